"""What the whole service holds of what clients are still sending: WebSocket messages not yet
complete, and `/mcp` request bodies not yet all in. Each is held whole until its end (a
message is handed over whole, a body read whole), so without a bound over all of them `serve`
could be made to hold `--max-connections` x `--max-message-bytes` (about 1 GiB at the
defaults) by clients that each begin a large message and never end it.

`Unfinished` is that bound: one byte budget for the service (`--max-unfinished-bytes`). A
message's or body's first `OWN_BYTES` are its own (every request, every answer to an ask, fits
in those, so a client with a small message is never refused because others hold large ones);
past them each byte is taken from the budget as it comes, and given back once the message is
whole (handed over) or its connection ends. A message that would take the budget past its
bound is refused (a WebSocket: its error message and 1013, try again later; a body: 503 with
`Retry-After`), and its bytes are given back at once: the others go on. What the service holds
in unfinished messages is then at most the budget plus `OWN_BYTES` a connection.

Pure: no trio, no socket.
"""

from __future__ import annotations

from typing import Final

#: The bytes of each message or body that count against no budget: its own.
OWN_BYTES: Final = 64 * 1024


class Unfinished:
    """The service's budget of bytes held in unfinished messages and bodies."""

    def __init__(self, most: int) -> None:
        self.most = most
        #: The bytes taken now (past each message's own `OWN_BYTES`).
        self.held = 0

    def holding(self) -> Holding:
        """What one message or body (one at a time) holds of this budget."""
        return Holding(self)


class Holding:
    """One connection's unfinished message or body against the service's budget."""

    def __init__(self, budget: Unfinished) -> None:
        self._budget = budget
        #: The bytes of the message so far.
        self.size = 0
        #: What of them is taken from the budget.
        self._taken = 0

    def grow(self, more: int) -> bool:
        """`more` bytes of the message have come: True when they fit, else False (nothing is
        taken: the message is to be refused, and `release` gives back what it held)."""
        size = self.size + more
        want = max(0, size - OWN_BYTES) - self._taken
        if want > 0:
            budget = self._budget
            if budget.held + want > budget.most:
                return False
            budget.held += want
            self._taken += want
        self.size = size
        return True

    def release(self) -> None:
        """The message is whole (handed over), refused, or its connection ended: what it
        held goes back. Idempotent."""
        self._budget.held -= self._taken
        self._taken = 0
        self.size = 0
