"""A gateway's own run history: every run the cluster runs, whichever gateway queued it,
recorded into the gateway's `[history]` database from the frames stream.

One task reads every run's subject of the frames stream (`mcpx.frames.*`) through one
ordered consumer, and keeps each run it sees in a `MirrorJournal` until its `end` (the
lines as the worker encoded them, never stamped here). The journal tells the runtime's
`Recorder` (`run/recording.py`) each time it grows, as a run's journal does on a single
`serve`: the one writer task writes what is new, batched, in a worker thread, and the reader
never waits for the disk. So the history holds the exact lines the stream holds, with the
chain the worker put in `end`, and `runs verify` passes on what a gateway serves of it.

Where the reader stands is a mark written with the lines (`History.write`), per stream as
JetStream made it (its creation time in the mark's name): a gateway that starts again goes
on from the message after it, catching up on what was published while it was down. A run
it was recording when it stopped is taken up from what its history holds. What the stream
no longer holds (its retention, `[runs] retainBytes`, dropped it meanwhile) is not there to
read: a run whose start is gone is not recorded, one whose middle is gone ends in the
history where the gap begins (a reader sees it sealed there), and the gateway says so.

Each hook frame read is counted in the gateway's metrics (`GET /metrics`), never exported.
When the history cannot be kept (`[history]` faults), the gateway logs it once and goes on
serving from the streams; with `[history] enabled = false` it reads the stream from the
moment it starts, for its metrics only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Final

import trio

from ..core.errors import bug_summary
from ..core.frames import at_time
from ..core.jsontext import wire_loads
from ..history.faults import HistoryFault
from ..history.store import History
from ..run.recording import Recorder
from ..run.telemetry import Telemetry
from .jet import NATS_FAILED, ClusterDown, Stored
from .link import Cluster, retry_s
from .mirror import MirrorJournal
from .names import RUN_ID, Header, Stream, batch_frames, every, frames_subject

logger = logging.getLogger("mcpx_hooks.cluster")

#: Runs being read at once at most: past it, the one heard of least recently is no longer
#: recorded (a run whose `end` never comes does not hold its frames forever).
RUNNING_MOST: Final = 4096
#: How many messages the reader may have still to read and yet feed a run's sockets: a burst
#: of other runs' messages costs a fed run that much delay; a backlog (a gateway catching up
#: after a start) would cost more, and a run then has a consumer of its own (`Mirrors`).
LIVE_BEHIND: Final = 64
#: How often the reader looks whether NATS was reconnected to a stream made anew, in s.
WATCH_S: Final = 2.0
#: Runs that ended, remembered so that a message of theirs read again is passed over.
ENDED_KEPT: Final = 4096


def mark_name(created: str) -> str:
    """The mark of the frames stream JetStream made at `created` (a stream made anew, as by
    a server that lost its store, starts its sequences again: its mark is another)."""
    return f"{Stream.FRAMES}@{created}"


class StreamIndexer:
    """The runs being read from the frames stream, each recorded as it grows."""

    def __init__(self, recorder: Recorder | None, telemetry: Telemetry, run_bytes: int) -> None:
        self.recorder = recorder
        self.history: History | None = recorder.history if recorder is not None else None
        self.telemetry = telemetry
        self.run_bytes = run_bytes
        self.mark = ""
        self._running: OrderedDict[str, MirrorJournal] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._fault_told = False
        #: The journals the gateway's sockets follow, filled from here (`Mirrors`): each
        #: until its end. `live`: reading the stream's newest messages, not a backlog.
        self._fed: dict[str, MirrorJournal] = {}
        self.live = False

    def running(self, run_id: str) -> MirrorJournal | None:
        """The journal of a run being read here (every line from its first), if any."""
        return self._running.get(run_id)

    def feed(self, journal: MirrorJournal) -> None:
        """Fills `journal` from here, from the next message of its run on."""
        if not journal.over:
            self._fed[journal.run_id] = journal

    def unfeed(self, run_id: str) -> None:
        self._fed.pop(run_id, None)

    async def start_seq(self, cluster: Cluster) -> int | None:
        """Where to read from: after the mark of the stream as it is now, else its first
        message (None: every message it holds); without a history, its next message."""
        created, first, last = await cluster.stream_made(Stream.FRAMES)
        self.mark = mark_name(created)
        start = await self._after_mark(first, last)
        # Live at once when there is little to read before the newest messages; else once a
        # batch leaves no more than `LIVE_BEHIND` pending.
        behind = 0 if not last else last - (first if start is None else start) + 1
        self.live = behind <= LIVE_BEHIND
        return start

    async def _after_mark(self, first: int, last: int) -> int | None:
        if self.history is None or self.recorder is None or self.recorder.fault is not None:
            return last + 1 if last else None
        history = self.history
        try:
            mark = await trio.to_thread.run_sync(history.mark, self.mark)
        except HistoryFault:
            return None
        if mark is None:
            return None
        if mark + 1 < first:
            logger.warning(
                "the frames stream no longer holds messages %d to %d (its retention dropped"
                " them while this gateway was not reading): the runs they held are not in"
                " this gateway's history, or only in part",
                mark + 1,
                first - 1,
            )
            return first
        return mark + 1

    async def take(self, batch: list[Stored]) -> None:
        """One batch of the stream's messages, in order. A bug in taking one message loses
        that message, logged in one line: never the gateway, nor the messages after it."""
        for message in batch:
            try:
                await self._take(message)
            except Exception as exc:  # a bug (see above)
                told = f"the frames stream: message {message.sequence} not taken"
                logger.error("%s: %s", told, bug_summary(exc))
                logger.debug("%s", told, exc_info=exc)
        if batch:
            self.live = batch[-1].pending <= LIVE_BEHIND
        if self.recorder is not None and batch:
            self.recorder.marks[self.mark] = batch[-1].sequence
            self.tell_fault()

    async def _take(self, message: Stored) -> None:
        run_id = message.subject.rsplit(".", 1)[-1]
        fed = self._fed.get(run_id)
        journal, fresh = None, False
        if RUN_ID.fullmatch(run_id) and run_id not in self._ended:
            # Opened before a socket's journal takes the message: opening it here gives it
            # the recorder and the metrics, which must hear of this message too, else a
            # gateway killed before the run's next message kept its place in the stream past
            # a run whose first frames it never wrote (taken up again, it recorded none).
            journal = self._running.get(run_id)
            fresh = journal is None
            journal = journal or await self._open(run_id, message)
        if fed is not None:  # a socket waits on it
            fed.take(message)
            if fed.over:
                del self._fed[run_id]
        if journal is not None:
            self._running.move_to_end(run_id)
            if journal is not fed:  # (the same journal: recorded as it is fed)
                journal.take(message)
            if fresh and journal.lines:  # the history's order: when it started
                journal.started = _started(journal.lines[0], journal.started)
            if journal.over:
                self._end(run_id)

    async def _open(self, run_id: str, message: Stored) -> MirrorJournal | None:
        """A run heard of for the first time here: a journal from its start, or, when the
        message is further on, from what the history holds of it (None: neither can be)."""
        if Header.REFUSED in message.headers:
            return None
        carried = batch_frames(message.headers, message.data)
        if carried is None:
            return None
        # A run a socket here follows holds it from its start (it takes this message next):
        # recorded from that same journal.
        journal = self._fed.get(run_id)
        if journal is None:
            journal = await self._from_start(run_id, carried[0])
            if journal is None:
                return None
        # Told from here on: what the history held is not counted or written again.
        journal.history_warned = True  # (a mirror takes no frame of its own: `tell_fault`)
        journal.telemetry = self.telemetry.count
        journal.recorder = self.recorder.note if self.recorder is not None else None
        self._running[run_id] = journal
        while len(self._running) > RUNNING_MOST:
            old, _ = self._running.popitem(last=False)
            logger.warning("run %s: no end heard of; no longer recorded here", old)
        return journal

    async def _from_start(self, run_id: str, first: int) -> MirrorJournal | None:
        """A journal of the run up to its frame `first`: what the history holds of it (None
        when it holds less)."""
        journal = MirrorJournal(run_id, self.run_bytes)
        if first > 0:
            held = await self._stored(run_id)
            if len(held) < first:
                self._end(run_id)
                if held:
                    logger.warning(
                        "run %s: its frames %d to %d are no longer in the frames stream: its"
                        " history here ends before them",
                        run_id,
                        len(held),
                        first - 1,
                    )
                return None
            last = str(len(held) - 1)
            journal.take(Stored(b"\n".join(held), {Header.SEQ: "0", Header.LAST_SEQ: last}, 0))
        return journal

    async def _stored(self, run_id: str) -> list[bytes]:
        """The lines the history holds of an unfinished run (none when it has ended)."""
        history = self.history
        if history is None or (self.recorder is not None and self.recorder.fault is not None):
            return []
        try:
            found = await trio.to_thread.run_sync(history.lines, run_id)
        except HistoryFault:
            return []
        return found[0] if found is not None and not found[1] else []

    def _end(self, run_id: str) -> None:
        self._running.pop(run_id, None)
        self._ended[run_id] = None
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)

    def tell_fault(self) -> None:
        """Once, when the history stops being kept: said in the log (a gateway's runs are
        the workers', so no `warning` frame can go in them)."""
        if self.recorder is None or self.recorder.fault is None or self._fault_told:
            return
        self._fault_told = True
        logger.warning("%s", fault_text(self.recorder.fault))


def _started(line: bytes, otherwise: float) -> float:
    """When a run started, as its `start` frame says (`otherwise` when it does not)."""
    try:
        when = at_time(wire_loads(line).get("at"))
    except (AttributeError, ValueError):
        return otherwise
    return otherwise if when is None else when.timestamp()


def fault_text(fault: str) -> str:
    return (
        f"the run history is not being kept ({fault}); this gateway serves runs from the"
        " cluster's streams only (mcpx-hooks doctor says more)"
    )


async def serve_indexing(
    cluster: Cluster,
    indexer: StreamIndexer,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Reads the frames stream into `indexer` until cancelled; a read cut short (NATS
    unreachable for long) is taken up again after the last message read, and one of a
    stream made anew meanwhile (a server that lost its store) from the new one's start."""
    indexer.tell_fault()
    task_status.started()
    start: int | None = None
    failures, begun = 0, False
    while True:
        try:
            if not begun:
                start, begun = await indexer.start_seq(cluster), True
            anew = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_stream, cluster, indexer.mark, anew, nursery.cancel_scope)
                async with cluster.follow(every(frames_subject("-")), start) as batches:
                    async for batch in batches:
                        failures = 0
                        await indexer.take(batch)
                        start = batch[-1].sequence + 1 if batch else start
                nursery.cancel_scope.cancel()
            if anew.is_set():
                begun = False
                continue
        except (ClusterDown, *NATS_FAILED) as exc:
            logger.warning("the frames stream: %s", exc)
        failures += 1
        await trio.sleep(retry_s(failures))


async def _watch_stream(
    cluster: Cluster, mark: str, anew: trio.Event, scope: trio.CancelScope
) -> None:
    """Sets `anew` and cancels `scope` when, after a reconnection, the frames stream is
    another than the one `mark` names."""
    reconnects = None
    while True:
        await trio.sleep(WATCH_S)
        try:
            connected, count = await cluster.status()
            if connected and count != reconnects:
                made, _, _ = await cluster.stream_made(Stream.FRAMES)
                reconnects = count  # (looked at again until the stream is there)
                if mark_name(made) != mark:
                    logger.warning("the frames stream was made anew: reading it from its start")
                    anew.set()
                    scope.cancel()
                    return
        except (ClusterDown, *NATS_FAILED):
            continue
