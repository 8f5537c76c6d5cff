"""What an MCP client is told on its calls' way (a tool server's progress on a call, its log
messages while the call is in flight), queued for the client and sent by a task of its own.

It is told from the reading of the tool server's output, which every session with a call to
that server shares: were it sent there, a client that does not read (its HTTP response left
unread, its socket's buffers full) would hold up every other session's answers from the
server for as long as it sends, a second a message. Queued here, the reading goes on at
once; the client's own task waits for it, each message for at most `HEAR_WAIT_S`.

The queue holds at most `OUTBOX_BYTES` of messages (one message, however large, when it is
empty): a server's burst of thousands reaches a client that reads, every one, in order, and
the memory a client that does not read can hold is bounded. A message past that is missed,
and the client is told how many it missed (`MISSED`, a `warning` log message in the request
of the message after them, or of the call's answer), before that message or answer; so is
one given up after `HEAR_WAIT_S` on its way, with those queued behind it then (a client that
has not read for that long would have each wait as long, its answers behind them). Over
stdio, where the client is alone in hearing its servers, the reading waits for room instead
(`patient`), a message at most `HEAR_WAIT_S`. A call's answer waits until what was told
before it has gone (`wait_told`), so that the client hears a call's progress and log
messages before its answer, as the server sent them.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from ..tools.hearing import HEAR_WAIT_S, hear_within

#: How many bytes of messages (as the server wrote them) may wait for one client that is slow
#: to read; past that, it misses them, and is told so.
OUTBOX_BYTES: Final = 1024 * 1024
#: What a client that missed messages is told (a `warning` log message), with how many.
MISSED: Final = (
    "mcpx-hooks: {n} of the tool servers' progress and log messages on your calls were missed:"
    " they came faster than this client read them (1 MiB of them is held for a client, and"
    " one it has not read in a second is let go, with those waiting behind it)"
)

Telling = Callable[[], Awaitable[None]]
#: What sends a `warning` log message (its words) to the client, in a request of its calls.
Warn = Callable[[str], Telling]
#: A message queued: what sends it, its size, what tells the client it was missed, and how
#: many missed messages it tells of (0 for a message; a `MISSED` note's count, which a note
#: given up carries on to the next one).
_Queued = tuple[Telling, int, Warn, int]


class Outbox:
    """One client's queue of messages (`tell`), sent in order by `serve_outbox`."""

    def __init__(self) -> None:
        #: Whether a message told while the queue is full waits for room (at most
        #: `HEAR_WAIT_S`) rather than being missed: for a client that is alone in hearing the
        #: servers it uses (`mcpx-hooks mcp` over stdio), whose relayed calls' progress waits
        #: so too; never where sessions share servers (over HTTP).
        self.patient = False
        self._send, self._receive = trio.open_memory_channel[_Queued](math.inf)
        self._told = 0  # queued so far
        self._gone = 0  # sent (or given up) so far
        self._held = 0  # bytes queued and not yet gone
        self._moved = trio.Event()
        self._dropping = 0  # the queued messages before this one are given up unsent
        self._missed = 0  # missed since the client was last told so
        self._warn: Warn | None = None  # how to tell it, in the request of the last missed
        self._unsaid = False  # whether a message (not a note) is among the missed

    def _full(self, size: int) -> bool:
        return self._gone < self._told and self._held + size > OUTBOX_BYTES

    async def tell(self, send: Telling, size: int, warn: Warn) -> None:
        """Queues `send` (what sends one message of `size` bytes to the client); never waits,
        unless `patient`. A message past `OUTBOX_BYTES` is missed (a patient one, when no room
        is made within `HEAR_WAIT_S`), and the client told so by `warn` before the next
        message it is sent (or the call's answer)."""
        if self._full(size) and self.patient:
            with trio.move_on_after(HEAR_WAIT_S):
                while self._full(size):
                    await self._moved.wait()
        if self._full(size):
            self._miss(1, warn, note=False)
            return
        self._say_missed()
        self._queue(send, size, warn, 0)

    def _miss(self, count: int, warn: Warn, *, note: bool) -> None:
        self._missed += count
        self._warn = warn
        self._unsaid = self._unsaid or not note

    def _queue(self, send: Telling, size: int, warn: Warn, count: int) -> None:
        try:
            self._send.send_nowait((send, size, warn, count))
        except trio.ClosedResourceError:
            return
        self._told += 1
        self._held += size

    def _say_missed(self) -> None:
        if self._missed and self._warn is not None:
            count = self._missed
            self._queue(self._warn(MISSED.format(n=count)), 0, self._warn, count)
        self._missed, self._warn, self._unsaid = 0, None, False

    async def wait_told(self) -> None:
        """Returns once every message queued before this call has gone (sent, or given up
        after `HEAR_WAIT_S`), and the client told of the messages it missed (those given up
        on the way too). A `MISSED` note given up on its way is not waited for again here
        (a client gone would have it given up at once, again and again): its count goes
        with the next note, before the next message or answer."""
        while True:
            self._say_missed()
            mark = self._told
            while self._gone < mark:
                await self._moved.wait()
            if not self._unsaid:
                return

    async def serve_outbox(self) -> None:
        """Sends the queued messages in order, each for at most `HEAR_WAIT_S`, until
        cancelled."""
        async for send, size, warn, count in self._receive:
            # (a client that has not read one message in `HEAR_WAIT_S` misses the ones queued
            # behind it then too: each would wait as long, its answer behind them all)
            if self._gone < self._dropping or not await hear_within(_send_it, send):
                self._dropping = max(self._dropping, self._told)
                # (a note given up: the client was not told; the next note counts them too)
                self._miss(count or 1, warn, note=count > 0)
            self._gone += 1
            self._held -= size
            self._moved.set()
            self._moved = trio.Event()


async def _send_it(send: Telling) -> None:
    await send()
