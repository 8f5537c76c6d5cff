"""What the service streams to clients: a run's journal, the bus, one message at a time.

Every stream goes at its client's pace. While a run is running, its streams are carried by
its `Broadcaster`, which writes to every socket what it takes at once, and hands a stream
back to its own task only to wait for a slow client to take the rest of a message. A
finished run is replayed by each stream's own task. Either way a message holds what is
waiting for that client, so a slow client never slows the run or another client, catches up
in large messages, and holds no more than one message in memory. Frames are encoded once
per run, whatever the number of readers.

Meanwhile each stream listens to its client (`listen`): `cancel` on an exec socket, an
`answer` on a run's socket (a refused one is told why, and the socket stays open), anything
else ends the socket with an error. A `Wake` tells a stream to stop waiting (the client left,
a bad message, shutdown); it never cuts a send short, which would leave a broken frame on the
wire.
"""

from __future__ import annotations

import contextlib
import logging
import math
import weakref
from collections.abc import Iterator

import attrs
import trio

from ..core.convert import to_json
from ..core.effects import AnsweredBy
from ..core.errors import bug_summary
from ..core.records import Record
from ..history import HistoryFault
from ..run.bus import Subscription
from ..run.journal import Follower, RunJournal
from ..run.scriptrun import Run
from ..run.storedrun import StoredRun
from .broadcast import Broadcaster, EncodedRun, joined, text_frame
from .connection import ServerConnection
from .targets import check_from
from .wire import (
    COMPLETE,
    NO_MESSAGES,
    AnswerMessage,
    Close,
    ConnectionClosed,
    WireError,
    encode,
    parse_control,
)

logger = logging.getLogger("mcpx_hooks.server")


class Wake:
    """Ends a stream's wait for its next item, never a send in progress: a cancelled send
    would leave a broken frame on the wire. The stream looks at `reason` and `gone` after
    each wait."""

    def __init__(self, idle: bool) -> None:
        #: Idle sockets (events, an exec socket before its request) close first at shutdown.
        self.idle = idle
        self.reason: WireError | None = None
        self.gone = False
        self.journal: RunJournal | None = None  # (the run it streams: `stream_run`)
        self._scope: trio.CancelScope | None = None

    @property
    def ended(self) -> bool:
        return self.reason is not None or self.gone

    def set(self, reason: WireError) -> None:
        if self.reason is None:
            self.reason = reason
        self._cancel()

    def client_gone(self) -> None:
        self.gone = True
        self._cancel()

    def _cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        with trio.CancelScope() as scope:
            self._scope = scope
            if self.ended:
                scope.cancel()
            try:
                yield
            finally:
                self._scope = None


async def keep_alive(conn: ServerConnection, wake: Wake, ping_s: float, stall_s: float) -> None:
    """Pings the socket every `ping_s`; no pong within `ping_s` of its ping going out: the
    client is gone. The ping waits behind a message being written, which has its own bound
    (`stall_s`, as the ping's write): a client reading a large message slowly is not gone."""
    while True:
        await trio.sleep(ping_s)
        try:
            with trio.move_on_after(stall_s) as writing:
                pong = await conn.send_ping()
            if writing.cancelled_caught:
                wake.client_gone()
                return
            with trio.move_on_after(ping_s) as waiting:
                await pong.wait()
        except ConnectionClosed:
            return  # the stream hears of it itself
        if waiting.cancelled_caught:
            wake.client_gone()
            return


def complete() -> WireError:
    """How a stream that sent everything closes."""
    return WireError(Close.NORMAL, COMPLETE)


def broken_off(why: str) -> WireError:
    """How a stream of a run whose record breaks off (`RunJournal.broken`, `why`) closes
    once it has sent every frame before the break: the rest cannot be served (1011)."""
    return WireError(Close.INTERNAL_ERROR, why)


class Streams:
    """The service's streams: how many are open, each run's encoded frames and broadcaster.

    `send_rate` is the messages a second the streams of the whole service aim to stay
    under: a stream gets its next message no sooner than `streams / send_rate` seconds after
    its last one began (at 12,500: 1 stream waits 0.08 ms, 500 wait 40 ms), so what arrives
    meanwhile goes out together, and a frame that finds its stream idle goes out at once.
    `send_stall_s` bounds one message's write: a client slower than that is gone.
    """

    def __init__(self, *, send_rate: float, send_stall_s: float, message_bytes: int) -> None:
        self.send_rate = send_rate
        self.send_stall_s = send_stall_s
        self.message_bytes = message_bytes
        self.count = 0
        self._encoded: weakref.WeakKeyDictionary[RunJournal, EncodedRun] = (
            weakref.WeakKeyDictionary()
        )
        self._broadcasters: dict[RunJournal, Broadcaster] = {}

    def pace(self) -> float:
        """Seconds between the starts of two messages to one stream."""
        return self.count / self.send_rate

    @contextlib.contextmanager
    def _encoding(self, journal: RunJournal) -> Iterator[EncodedRun]:
        """The run's encoded frames, kept while anyone reads them."""
        encoded = self._encoded.get(journal)
        if encoded is None:
            encoded = self._encoded[journal] = EncodedRun(journal)
        encoded.readers += 1
        try:
            yield encoded
        finally:
            encoded.readers -= 1
            if not encoded.readers:
                self._encoded.pop(journal, None)

    async def serve_broadcaster(self, journal: RunJournal) -> None:
        """The run's broadcaster, until the journal has ended (or broken off) and its last
        frames are given. A bug in it is logged and ends it alone: its streams carry on by
        themselves."""
        with self._encoding(journal) as encoded:
            broadcaster = Broadcaster(encoded, pace=self.pace, message_bytes=self.message_bytes)
            self._broadcasters[journal] = broadcaster
            try:
                await broadcaster.serve()
            except* Exception as group:
                logger.error(
                    "the broadcaster of run %s failed: %s", journal.run_id, bug_summary(group)
                )
                logger.debug("the broadcaster of run %s failed", journal.run_id, exc_info=group)
            finally:
                del self._broadcasters[journal]

    # ---- a run -------------------------------------------------------------------------------

    async def stream_run(
        self,
        conn: ServerConnection,
        journal: RunJournal,
        start: int,
        wake: Wake,
        *,
        run: Run | None = None,
        cancels: bool = False,
    ) -> WireError | None:
        """Sends the journal from `start` to `end` (or to where it breaks off: `broken_off`)
        at the client's pace, in messages of what is waiting; meanwhile listens for
        `answer`s to `run`'s asks (None: the run has ended), `cancel` (with `cancels`: the
        exec socket) or a message out of turn. Returns how to close the socket, None when it
        must be aborted (the client is gone)."""
        wake.journal = journal
        follower = journal.follow(start)
        self.count += 1
        try:
            with self._encoding(journal) as encoded:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.listen, conn, wake, _Control(run, cancels))
                    try:
                        return await self._pump(conn, follower, encoded, wake)
                    finally:
                        nursery.cancel_scope.cancel()
        finally:
            self.count -= 1

    async def _pump(
        self, conn: ServerConnection, follower: Follower, encoded: EncodedRun, wake: Wake
    ) -> WireError | None:
        journal = encoded.journal
        # One scope for the whole loop, armed only while a message is being written: a
        # client that takes a message for longer than `send_stall_s` is gone.
        with trio.CancelScope() as stall:
            while not wake.ended:
                if conn.unsent:  # the broadcaster handed the stream back mid-message
                    stall.deadline = trio.current_time() + self.send_stall_s
                    try:
                        await conn.flush()
                    except ConnectionClosed:
                        wake.client_gone()
                        return None
                    stall.deadline = math.inf
                at = follower.at
                if at == len(journal) and (journal.finished or journal.broken is not None):
                    return complete() if journal.broken is None else broken_off(journal.broken)
                broadcaster = self._broadcasters.get(journal)
                if broadcaster is not None and broadcaster.open:
                    with wake.waiting():
                        await broadcaster.carry(conn, follower)
                    continue
                # No broadcaster (the run has ended, has not started it yet, or it failed):
                # the stream sends for itself, paced like the broadcaster, so 500 replays
                # cost what `send_rate` messages a second cost.
                if at == len(journal):
                    with wake.waiting():
                        await journal.wait_past(at)
                    continue
                began = trio.current_time()
                for cut, frame in encoded.messages(at, len(journal), self.message_bytes):
                    stall.deadline = trio.current_time() + self.send_stall_s
                    try:
                        await conn.send_frame(frame)
                    except ConnectionClosed:
                        wake.client_gone()
                        return None
                    stall.deadline = math.inf
                    follower.at = cut
                await trio.sleep_until(began + self.pace())
            return wake.reason
        return None  # stalled: `conn.broken` is set, the socket is aborted

    async def stream_stored(
        self, conn: ServerConnection, stored: StoredRun, start: int, wake: Wake
    ) -> WireError | None:
        """Sends a run only the history holds from `start` to its `end`, read a stored chunk
        at a time in a worker thread and sent in messages paced as a finished run's replay:
        what a stream holds is one chunk and one message, whatever the run's size. A run
        dropped from the history meanwhile breaks off (`broken_off`). Raises `WireError`
        before sending anything when `start` is past the run (`check_from`)."""
        try:
            check_from(start, await trio.to_thread.run_sync(stored.length, start))
        except HistoryFault as exc:
            raise WireError(Close.INTERNAL_ERROR, str(exc)) from None
        batches = stored.batches(start)
        self.count += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.listen, conn, wake, _Control(None, cancels=False))
                try:
                    return await self._send_stored(conn, batches, wake)
                except HistoryFault as exc:
                    return broken_off(str(exc))
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self.count -= 1

    async def _send_stored(
        self, conn: ServerConnection, batches: Iterator[list[bytes]], wake: Wake
    ) -> WireError | None:
        while not wake.ended:
            with wake.waiting():
                lines = await trio.to_thread.run_sync(next, batches, None)
            if wake.ended:
                break
            if lines is None:
                return complete()
            began = trio.current_time()
            for payload in joined(lines, self.message_bytes):
                try:
                    with trio.move_on_after(self.send_stall_s):
                        await conn.send_frame(text_frame(payload))
                except ConnectionClosed:
                    wake.client_gone()
                    return None
                if conn.broken:  # stalled: the socket is aborted
                    return None
            await trio.sleep_until(began + self.pace())
        return wake.reason

    # ---- the bus ---------------------------------------------------------------------------

    async def stream_events(
        self, conn: ServerConnection, sub: Subscription, wake: Wake, most: int
    ) -> WireError | None:
        """Sends the subscription's events (at most `most` a message) until the wake ends
        it; meanwhile any message from the client ends the socket with an error."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.listen, conn, wake, None)
            try:
                while True:
                    with wake.waiting():
                        first = await sub.__anext__()
                    if wake.ended:
                        return wake.reason
                    items = [first]
                    while sub.pending and len(items) < most:
                        items.append(await sub.__anext__())
                    text = "\n".join(encode(to_json(item)) for item in items)
                    if not await self.send(conn, text, wake):
                        return None
            finally:
                nursery.cancel_scope.cancel()

    # ---- one message either way --------------------------------------------------------------

    async def send(self, conn: ServerConnection, text: str, wake: Wake | None = None) -> bool:
        """Sends one message; False when the client is gone or stalled past the bound."""
        try:
            with trio.move_on_after(self.send_stall_s):
                await conn.send_text(text)
        except ConnectionClosed:
            if wake is not None:
                wake.client_gone()
            return False
        return not conn.broken

    async def listen(self, conn: ServerConnection, wake: Wake, control: _Control | None) -> None:
        """Reads what the client sends while a stream runs: on a run's socket, answers (a
        refused one gets an error message, the socket stays open) and, on an exec socket,
        `cancel`; anything else ends the socket with an error. Tells the stream when the
        client left."""
        while True:
            try:
                text = await conn.get_message()
            except ConnectionClosed:
                wake.client_gone()
                return
            if control is None:
                wake.set(WireError(Close.BAD_REQUEST, NO_MESSAGES))
                return
            try:
                message = parse_control(text)
            except WireError as exc:
                wake.set(exc)
                return
            if isinstance(message, AnswerMessage):
                refused = control.answer(message)
                if refused is not None:
                    # Shielded: a send cut short would leave a broken frame on the wire;
                    # `send` bounds it.
                    with trio.CancelScope(shield=True):
                        await self.send(conn, encode(to_json(refused.payload)), wake)
            elif control.cancels and control.run is not None:
                control.run.cancel()
            elif not control.cancels:
                wake.set(
                    WireError(
                        Close.BAD_REQUEST,
                        "cancel is taken on the exec socket that started the run, not here",
                    )
                )
                return


@attrs.frozen(repr=False, eq=False)
class _Control(Record):
    """What a run's socket may do to it: answer its asks, and (`cancels`) cancel it."""

    run: Run | None
    cancels: bool

    def answer(self, message: AnswerMessage) -> WireError | None:
        """None when the answer settled its ask; else the error message that says why not."""
        if self.run is None or self.run.journal.finished:
            why = f"{message.ask_id} is closed: the run has ended"
        else:
            said = self.run.asks.answer(message.ask_id, message.answer, AnsweredBy.CLIENT)
            if said is None:
                return None
            why = said
        return WireError(Close.BAD_REQUEST, f"answer refused: {why}", ask_id=message.ask_id)
