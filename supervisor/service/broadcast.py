"""A run's frames to all its clients by one task, each message encoded and built once.

Every stream of a running run hands itself to the run's `Broadcaster` whenever it has
nothing left to write (`carry`). When the journal grows, the broadcaster goes through the
streams in turn and offers each the frames it has not had, as messages of what is waiting,
with non-blocking writes (`ServerConnection.offer`): no task switch, no encoding and no lock
wait per client. The streams that kept up are all at the same place, so they share the
same message bytes. A socket that does not take a message whole (its buffer is full, a pong
is being written, the client has gone) is handed back to its stream with the rest of that
message, which the stream's own task waits to write (`flush`) before joining again. So a
slow client never holds up the broadcaster, the run or another client, never loses a frame,
and holds at most one message; a client that keeps up gets each frame within one round.

Rounds are paced: the next begins no sooner than `pace()` seconds after the last one began,
and what arrives meanwhile goes out together; a frame that finds the broadcaster idle goes
out at once. A round yields to other tasks every `YIELD_EVERY` streams.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Final

import trio

from ..core.batches import bounded
from ..run.journal import Follower, RunJournal
from .connection import ServerConnection

#: Writes in a round between two yields to the other tasks (the run, lagging streams).
YIELD_EVERY: Final = 128


def text_frame(payload: bytes) -> bytes:
    """One complete text message as a server sends it: FIN, opcode 1, no mask (RFC 6455 §5.2).

    `payload` is the message's UTF-8."""
    size = len(payload)
    if size < 126:
        head = bytes((0x81, size))
    elif size < 1 << 16:
        head = bytes((0x81, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x81, 127)) + size.to_bytes(8, "big")
    return head + payload


def joined(lines: Sequence[bytes], limit: int) -> Iterator[bytes]:
    """`lines` as the payloads of messages of about `limit` bytes at most (at least one line
    each), joined by newlines as a journal's messages are."""
    return (b"\n".join(part) for part in bounded(lines, limit))


class EncodedRun:
    """A run's frames cut into messages of at most `limit` bytes, each built once as a
    WebSocket frame: readers at the same place (the usual case of many clients keeping up)
    share the bytes. The lines are the journal's own, encoded once when appended."""

    def __init__(self, journal: RunJournal) -> None:
        self.journal = journal
        self.readers = 0
        self._last: tuple[int, int, bytes] = (0, 0, b"")

    def message(self, start: int, stop: int, limit: int) -> tuple[int, bytes]:
        """The message that begins at frame `start`: frames up to about `limit` bytes (at
        least one) and before `stop`, as (the seq after its last frame, `text_frame` bytes).
        The last one built is kept: readers at the same place share it."""
        ends = self.journal.ends
        cut = bisect.bisect_right(ends, ends[start] + limit, start + 1, stop + 1) - 1
        cut = max(cut, start + 1)
        if self._last[:2] != (start, cut):
            payload = b"\n".join(self.journal.lines[start:cut])
            self._last = (start, cut, text_frame(payload))
        return cut, self._last[2]

    def messages(self, start: int, stop: int, limit: int) -> Iterator[tuple[int, bytes]]:
        """Frames `start..stop-1` as messages (see `message`), each built when it is due."""
        while start < stop:
            cut, frame = self.message(start, stop, limit)
            yield cut, frame
            start = cut


class Broadcaster:
    """The live edge of one run. `serve` runs for the run's life (its owner starts it with
    the run); streams `carry` themselves over to it whenever they have nothing to flush."""

    def __init__(
        self, encoded: EncodedRun, *, pace: Callable[[], float], message_bytes: int
    ) -> None:
        self.encoded = encoded
        self.journal = encoded.journal
        self._pace = pace
        self._message_bytes = message_bytes
        #: Carried streams, in the order they joined, each with the event that hands it back.
        self._live: dict[tuple[ServerConnection, Follower], trio.Event] = {}
        #: Where the streams that took the last round whole are: the round's end.
        self._edge = 0
        #: Set while waiting for the run: a stream that joins behind ends the wait.
        self._idle: trio.CancelScope | None = None
        #: False once `serve` has returned: streams then follow the journal on their own.
        self.open = True

    @property
    def live(self) -> int:
        """How many streams it carries."""
        return len(self._live)

    async def serve(self) -> None:
        """Broadcasts until a round has given the run's `end`, at most one round after it
        came, or the last frame before a break (`RunJournal.broken`), then hands every
        carried stream back (also when cancelled or failing): a stream still behind, a slow
        client's, reads the rest on its own, so a slow client never keeps the broadcaster,
        or its run, going."""
        journal = self.journal
        next_round = -math.inf
        try:
            while True:
                known = len(journal)
                if not any(follower.at < known for _, follower in self._live):
                    if journal.finished or journal.broken is not None:
                        return
                    with trio.CancelScope() as self._idle:
                        await journal.wait_past(known)
                    self._idle = None
                    continue
                await trio.sleep_until(next_round)
                began = trio.current_time()
                await self._round()
                if journal.finished and self._edge == len(journal):
                    return
                next_round = began + self._pace()
        finally:
            self.open = False
            for back in self._live.values():
                back.set()
            self._live.clear()

    async def carry(self, conn: ServerConnection, follower: Follower) -> None:
        """Waits while the broadcaster sends this stream's frames from `follower.at` on
        (keeping `follower.at` up to date), and returns when it hands the stream back: the
        socket did not take a message whole (its rest is left to `flush`), or the
        broadcaster stopped (it has given the run's `end`, or failed). Cancelled, the stream
        just leaves: no write is ever cut short, as the broadcaster's writes do not wait."""
        assert not conn.unsent, "carry() with a message still to flush"
        if not self.open:
            return
        key = (conn, follower)
        back = self._live[key] = trio.Event()
        if self._idle is not None and follower.at < len(self.journal):
            self._idle.cancel()
        try:
            await back.wait()
        finally:
            self._live.pop(key, None)

    async def _round(self) -> None:
        stop, edge = len(self.journal), self._edge
        self._edge = stop
        # The messages from the edge on, built once for all the streams that kept up.
        shared: dict[int, tuple[int, bytes]] = {}
        for written, key in enumerate(list(self._live)):
            if written and not written % YIELD_EVERY:
                await trio.lowlevel.checkpoint()
            back = self._live.get(key)
            if back is not None and not self._give(*key, stop, edge, shared):
                del self._live[key]
                back.set()

    def _give(
        self,
        conn: ServerConnection,
        follower: Follower,
        stop: int,
        edge: int,
        shared: dict[int, tuple[int, bytes]],
    ) -> bool:
        """Offers a stream its frames up to `stop`, message after message, as long as its
        socket takes them whole; False when one was not (its rest is the stream's to flush).
        Messages from the edge are shared; a stream elsewhere (it joined behind) gets its
        own, built one at a time."""
        at = follower.at
        kept_up = at == edge
        while at < stop:
            message = shared.get(at) if kept_up else None
            if message is None:
                message = self.encoded.message(at, stop, self._message_bytes)
                if kept_up:
                    shared[at] = message
            at = follower.at = message[0]
            if not conn.offer(message[1]):
                return False
        return True
