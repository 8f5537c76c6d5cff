"""A gateway's copies of runs: each run it serves is a `MirrorJournal`, filled from the run's
subject of the frames stream, in order, so the service's streams (`service/streams.py`) send
it exactly as they send a local run's journal: replay from any seq, follow live, at each
client's own pace, one broadcaster's worth of encoding per run.

`Mirrors` holds them (at most `runs.retain`, the oldest finished forgotten first; a run still
running is followed until its `end`). While the gateway's one reader of every run's frames
(`indexing.py`, the `Feed`) reads the newest messages, it fills the runs it can: one whose id
was just made here, and one it is reading (the same journal, then, recorded and followed);
any other run is filled by a consumer of its own subject. So a gateway that queues a run and
serves its socket makes no consumer for it, and reads each of its messages once.
"""

from __future__ import annotations

import contextlib
import logging
from array import array
from collections import OrderedDict
from itertools import accumulate, repeat
from operator import add
from typing import Any, Final, Protocol

import orjson
import trio

from ..core.errors import bug_summary
from ..core.frames import OUTPUT_TYPES, STREAM_ENDS, FrameType
from ..core.jsontext import wire_loads
from ..run.journal import FRAME_OVERHEAD, RunJournal
from ..run.journals import to_forget
from ..service.wire import Close, WireError
from .jet import ClusterDown, Stored
from .link import Cluster, retry_s
from .names import Header, Stream, batch_frames, frame_problem, frames_subject

logger = logging.getLogger("mcpx_hooks.cluster")

#: The output types, as the wire says them: the frames a mirror keeps without a look inside.
_OUTPUT: Final = frozenset(kind.value for kind in OUTPUT_TYPES)
#: How a line of the script's output ends as the journal writes it (its type last), stdout
#: first.
_OUTPUT_ENDS: Final = (
    STREAM_ENDS[FrameType.STDOUT],
    *(end for kind, end in STREAM_ENDS.items() if kind is not FrameType.STDOUT),
)


#: The same, with the newline after every line of a batch but its last.
_OUTPUT_LINE_ENDS: Final = tuple(end + b"\n" for end in _OUTPUT_ENDS)


def _all_output(data: bytes, count: int) -> bool:
    """Whether all `count` lines of a batch's `data` are output frames, counted over the
    whole message at C speed: a newline stands only between two lines, so each match of
    an output ending and its newline is one line's end. A batch all of `stdout` (nearly
    every one) is known so in one pass, any other in one pass per output type."""
    last = data.endswith(_OUTPUT_ENDS)
    if data.count(_OUTPUT_LINE_ENDS[0]) + last == count:
        return True
    return sum(map(data.count, _OUTPUT_LINE_ENDS)) + last == count


def _kind(word: object) -> FrameType | str:
    try:
        return FrameType(str(word))
    except ValueError:
        return str(word)


class MirrorJournal(RunJournal):
    """A run's journal as the frames stream has it: lines taken as the worker encoded and
    redacted them, never stamped here."""

    owned = False  # (a worker runs it: a gateway that stops never ends it in its history)

    def __init__(self, run_id: str, run_bytes: int) -> None:
        super().__init__(run_id, run_bytes)
        #: The stream sequence of the run's last message seen.
        self.last_stream_seq = 0
        #: The worker refused the request before running it (the exec socket closes so).
        self.refusal: WireError | None = None
        self.caught_up = trio.Event()
        #: Its first frame came, or the worker's refusal, or a break (`broken`).
        self.begun = trio.Event()
        #: The stream sequence past which the journal is `caught_up` (when a feed fills it).
        self.until: int | None = None

    @property
    def over(self) -> bool:
        """Whether it takes nothing more: the run has ended, was refused, or broke off."""
        return self.finished or self.refusal is not None or self.broken is not None

    def take(self, message: Stored) -> None:
        """One message of the run's subject: its frames (one, or a batch) kept from the next
        seq on, in order; a frame already held (a batch sent again) or a stray message is
        skipped, and nothing is kept after `end`. A frame that is not one (`frame_problem`)
        or a gap (a batch past the next seq) breaks the record there (`broken`): nothing is
        kept from it on, and the readers, woken, end with the frames before it. A bug in
        taking it loses the message, logged, never more."""
        try:
            self._take(message)
        except Exception as exc:  # a bug: logged in one line, the gateway goes on
            logger.error("run %s: a message not taken: %s", self.run_id, bug_summary(exc))
            logger.debug("run %s: a message not taken", self.run_id, exc_info=exc)

    def _take(self, message: Stored) -> None:
        self.last_stream_seq = max(self.last_stream_seq, message.sequence)
        if self.until is not None and self.last_stream_seq >= self.until:
            self.caught_up.set()
        if self.over:
            return
        refused = message.headers.get(Header.REFUSED)
        if refused is not None:
            self.refusal = _refusal(refused, message.data)
            self.begun.set()
            return
        carried = batch_frames(message.headers, message.data)
        if carried is None:
            logger.warning("run %s: a message that is no frame, skipped", self.run_id)
            return
        first, lines = carried
        held = len(self.lines)
        if first > held:
            logger.warning("run %s: frame %d came where %d was due", self.run_id, first, held)
            self._break(held, f"the next message on its subject begins at frame {first}")
            return
        fresh = lines[held - first :]
        if _all_output(message.data, len(lines)):  # (the batch of nearly every message)
            self._keep_output(fresh)
            self.begun.set()
            return
        # Output frames (nearly all of a run) are known by how their lines end, in one pass
        # at C speed; only the others are decoded, each kept as it comes.
        plain = list(map(bytes.endswith, fresh, repeat(_OUTPUT_ENDS)))
        at = 0
        while at < len(fresh) and not self.finished:
            try:
                other = plain.index(False, at)
            except ValueError:
                other = len(fresh)
            self._keep_output(fresh[at:other])
            if other == len(fresh):
                break
            line = fresh[other]
            if isinstance(wire := _decoded(line), str):
                seq = held + other
                logger.warning("run %s: frame %d is not one (%s)", self.run_id, seq, wire)
                self._break(seq, f"not a frame: {wire}")
                break
            kind = wire.get("type")
            if kind in _OUTPUT:  # an output frame in another form than the journal's
                self._keep_output([line])
            else:
                self._keep((line, len(line) + FRAME_OVERHEAD, _kind(kind), wire))  # type: ignore[arg-type]
            at = other + 1
        if len(self.lines) > held:
            self.begun.set()

    def _break(self, seq: int, problem: str) -> None:
        """Ends the record at frame `seq`, which `problem` says is wrong: nothing from it on
        is kept, and the readers are woken to end with the frames before it."""
        self.broken = (
            f"run {self.run_id}'s record on the cluster is broken at frame {seq} ({problem}):"
            " the frames before it were sent, none after it can be"
        )
        self.begun.set()
        self._woken()

    def _keep_output(self, lines: list[bytes]) -> None:
        """Keeps output frames' lines: all but the last at once, the last as any frame is
        kept, which wakes the readers once for all of them."""
        if not lines:
            return
        if len(lines) > 1:
            bulk = lines[:-1]
            before = self.ends[-1]
            # `ends` grows by each line's bytes and its newline (built as an array, then
            # added at once: its first item is `before`).
            grown = array("q", accumulate(map(add, map(len, bulk), repeat(1)), initial=before))
            self.ends += grown[1:]
            self.cost += grown[-1] - before + (FRAME_OVERHEAD - 1) * len(bulk)
            self.lines += bulk
        last = lines[-1]
        # (`_keep` looks at a frame's type and fields only for outcomes, hooks and `end`.)
        self._keep((last, len(last) + FRAME_OVERHEAD, FrameType.STDOUT, {}))

    async def chain(self) -> bytes:
        """The chain of the lines held (`core/chain.py`), hashed a slice at a time: the lines
        a gateway's `end` after them chains on (`ending.py`)."""
        await self.chain_lines()
        return self._chained_now()

    def ask_ids(self) -> set[str]:
        return {
            str(f.get("askId")) for f in self.decoded(0) if f.get("type") == FrameType.ASK.value
        }


def _decoded(line: bytes) -> dict[str, Any] | str:
    """A frame's line decoded, or what is wrong with it when it is not a frame."""
    try:
        wire = wire_loads(line)
    except ValueError:
        wire = None
    if not isinstance(wire, dict):
        return "not a JSON object"
    return frame_problem(wire) or wire


def _refusal(code: str, data: bytes) -> WireError:
    try:
        close = Close(int(code))
        payload = orjson.loads(data)
        message = str(payload.get("message", "the worker refused the request"))
    except (ValueError, AttributeError, orjson.JSONDecodeError):
        close, message = Close.BAD_REQUEST, "the worker refused the request"
    return WireError(close, message)


class Feed(Protocol):
    """The gateway's reader of every run's frames (`indexing.StreamIndexer`)."""

    #: Whether it reads the stream's newest messages (not a backlog).
    live: bool

    def running(self, run_id: str) -> MirrorJournal | None: ...

    def feed(self, journal: MirrorJournal) -> None: ...

    def unfeed(self, run_id: str) -> None: ...


class Mirrors:
    """The runs this gateway serves, each filled by `feed` or by a task of `nursery`."""

    def __init__(
        self,
        cluster: Cluster,
        nursery: trio.Nursery,
        retain: int,
        run_bytes: int,
        retain_bytes: int,
    ) -> None:
        self.cluster = cluster
        self.nursery = nursery
        self.retain = retain
        self.run_bytes = run_bytes
        self.retain_bytes = retain_bytes
        self._runs: OrderedDict[str, MirrorJournal] = OrderedDict()
        self._fills: dict[str, trio.CancelScope] = {}
        self.feed: Feed | None = None

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._runs

    async def open(self, run_id: str, *, fresh: bool = False) -> MirrorJournal:
        """The run's mirror once it holds what the stream held when asked. A `fresh` run
        (its id just made here) has nothing on its subject yet: the stream is not asked."""
        journal = self._runs.get(run_id)
        feed = self.feed if self.feed is not None and self.feed.live else None
        if journal is None and feed is not None:
            journal = MirrorJournal(run_id, self.run_bytes) if fresh else feed.running(run_id)
            if journal is not None:
                self._runs[run_id] = journal
                self._forget_old()
                feed.feed(journal)
                await self._caught_up(journal, fresh)
        if journal is None:
            journal = self._runs[run_id] = MirrorJournal(run_id, self.run_bytes)
            self._forget_old()
            await self.nursery.start(self._fill, journal, fresh)
        await journal.caught_up.wait()
        return journal

    async def _caught_up(self, journal: MirrorJournal, fresh: bool) -> None:
        """A fed journal is caught up once it holds what the run's subject held when asked
        (a fresh run's, nothing)."""
        last = None
        if not fresh:
            with contextlib.suppress(ClusterDown):
                last = await self.cluster.last(Stream.FRAMES, frames_subject(journal.run_id))
        journal.until = 0 if last is None else last.sequence
        if journal.last_stream_seq >= journal.until:
            journal.caught_up.set()

    def drop(self, run_id: str) -> None:
        """Forgets a run that has not begun (its request not queued, or its client gone
        before a worker took it), and stops following it: a follower opens it anew."""
        journal = self._runs.get(run_id)
        if journal is not None and not journal.begun.is_set():
            del self._runs[run_id]
            self._fills.pop(run_id, trio.CancelScope()).cancel()
            if self.feed is not None:
                self.feed.unfeed(run_id)

    async def _fill(
        self, journal: MirrorJournal, fresh: bool, task_status: trio.TaskStatus[None]
    ) -> None:
        with trio.CancelScope() as scope:
            self._fills[journal.run_id] = scope
            try:
                await self._follow(journal, fresh, task_status)
            finally:
                if self._fills.get(journal.run_id) is scope:
                    del self._fills[journal.run_id]

    async def _follow(
        self, journal: MirrorJournal, fresh: bool, task_status: trio.TaskStatus[None]
    ) -> None:
        """Follows the run's subject to its end; a follow cut short (NATS unreachable for
        long) is taken up again from the next stream sequence, so no frame is missed."""
        subject = frames_subject(journal.run_id)
        last = None
        if not fresh:
            with contextlib.suppress(ClusterDown):
                last = await self.cluster.last(Stream.FRAMES, subject)
        until = 0 if last is None else last.sequence
        if until == 0:
            journal.caught_up.set()
        task_status.started()
        failures = 0  # follows cut short in a row, none having brought a frame
        try:
            while not journal.over:
                start = journal.last_stream_seq + 1 if journal.last_stream_seq else None
                async with self.cluster.follow(subject, start) as batches:
                    async for batch in batches:
                        failures = 0
                        for message in batch:
                            journal.take(message)
                            if message.sequence >= until or not message.pending:
                                journal.caught_up.set()
                        if journal.over:
                            return
                logger.warning("run %s: following its frames again", journal.run_id)
                failures += 1
                await trio.sleep(retry_s(failures))
        finally:
            journal.caught_up.set()

    def _forget_old(self) -> None:
        """Forgets runs that are `over`, oldest first, past `retain` runs or `retain_bytes`."""
        for run_id in to_forget(self._runs, self.retain, self.retain_bytes, _over):
            del self._runs[run_id]


def _over(journal: MirrorJournal) -> bool:
    return journal.over
