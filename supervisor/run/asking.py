"""A run's questions: the asks it waits on, the answers that settle them, and who may answer.

A hook that answers `ask` (with the effect to do so) gets an `ask` frame and the run waits
on `Asks.wait` until the deadline. Whoever follows the run may answer through `Asks.answer`:
a client of the run's WebSocket, `exec`'s terminal or its `--yes`/`--no`. The first answer
wins; an answer for an ask that is not open (unknown, already answered, past its deadline)
is refused with a sentence saying which, and changes nothing.

The answering side of one who follows the frames (`exec`) is `service/answering.py`'s.
"""

from __future__ import annotations

from typing import Final

import attrs
import trio

from ..core.effects import ANSWERS, AnsweredBy
from ..core.records import Record

#: Settled asks a run remembers to tell a late answer why it is refused.
SETTLED_KEPT: Final = 1024


@attrs.frozen(repr=False, eq=False)
class Settled(Record):
    """How an ask ended: the answer and who gave it (`DEADLINE`: nobody did)."""

    answer: str
    by: AnsweredBy


class _Open:
    def __init__(self) -> None:
        self.event = trio.Event()
        self.settled: Settled | None = None


class Asks:
    """The open and settled asks of one run. Its ids are `ask-1`, `ask-2`, … in the run."""

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}
        self._settled: dict[str, Settled | None] = {}  # None: the run was cancelled meanwhile
        self._count = 0

    def new_id(self) -> str:
        self._count += 1
        return f"ask-{self._count}"

    @property
    def open(self) -> tuple[str, ...]:
        return tuple(self._open)

    async def wait(self, ask_id: str, default: str, deadline_s: float) -> Settled:
        """Waits for the first answer to `ask_id` until `deadline_s` passes; then `default`
        applies (`by` DEADLINE). Cancelled, the ask is closed and the cancellation goes on."""
        pending = self._open[ask_id] = _Open()
        settled: Settled | None = None
        try:
            with trio.move_on_after(deadline_s):
                await pending.event.wait()
            settled = pending.settled or Settled(default, AnsweredBy.DEADLINE)
            return settled
        finally:
            del self._open[ask_id]
            self._remember(ask_id, settled)

    def answer(self, ask_id: str, answer: str, by: AnsweredBy) -> str | None:
        """Settles an open ask; None when it did, else why it did not (in words)."""
        if answer not in ANSWERS:
            return f"an answer is {' or '.join(ANSWERS)}, not {answer!r}"
        pending = self._open.get(ask_id)
        if pending is not None and pending.settled is None:
            pending.settled = Settled(answer, by)
            pending.event.set()
            return None
        if pending is not None or ask_id in self._settled:
            done = pending.settled if pending is not None else self._settled[ask_id]
            if done is None:
                return f"{ask_id} is closed: the run was cancelled while it waited"
            if done.by is AnsweredBy.DEADLINE:
                return f"{ask_id} is closed: its deadline passed (default {done.answer} applied)"
            return f"{ask_id} was already answered {done.answer} (by {done.by}); the first counts"
        open_ = ", ".join(self._open) or "none"
        return f"no ask {ask_id!r} in this run (open now: {open_})"

    def _remember(self, ask_id: str, settled: Settled | None) -> None:
        self._settled[ask_id] = settled
        while len(self._settled) > SETTLED_KEPT:
            del self._settled[next(iter(self._settled))]
