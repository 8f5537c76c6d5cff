"""Recording runs to the history (`history/`) without a run ever waiting on the disk.

A journal tells the `Recorder` each time it grows (`note`, on the event loop, never
blocking). The recorder's channel carries journals, not frames: a journal is in it at most
once, and the one writer task (`Recorder.serve`) takes everything waiting, reads each
journal's lines since what it stored last (the lines are the journal's, held anyway), and
writes them all in one transaction in a worker thread, at most one every `BATCH_S`. So the
writer's batches grow when the disk is slow, and a run's frames cost no memory of their own
while they wait (the store writes a batch as chunks of a bounded number of lines).

Bounds and the slow side: the channel holds at most `CAPACITY` journals, so at most that
many runs wait to be written. When it is full (more runs behind than that), a run that has
something new is not recorded at all rather than blocking it or holding its frames twice:
a `warning` frame in that run says its history is not being kept, what was stored of it is
dropped (never a run that looks whole but is not), and it goes on in memory as before.

Another process holding the database's lock past `BUSY_MS` (a large write, retention
dropping large runs, a search indexing) is waited out: the same runs' lines are written again
every `BUSY_RETRY_S`, and only a lock held for `BUSY_GIVE_UP_S` on end (`BUSY_AT_EXIT_S` once
the process is ending and waits for the writer) is a fault. Retention and the sealing of
interrupted runs are left for their next turn.

Faults: when the database cannot be opened or written (locked past those bounds, read-only,
full, not a database, removed while open), recording stops for the rest of the process: each
run that is still running (written or waiting to be), and each later one, gets one `warning`
saying why the history is not being kept, and goes on in memory; what was stored of the runs
not stored whole is dropped, where the database still lets it. A run that had ended before
the fault was known can take no more frames: it is in `unsaid`, with why, and `on_unsaid`
(the service's log) is told; `exec` says it on stderr. `mcpx-hooks doctor` probes the
database and says the same.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from typing import Final

import trio

from ..core.errors import bug_summary
from ..core.frames import WarningFrame, blank
from ..history.faults import HistoryBusy, HistoryFault
from ..history.store import OWNER_MARK, History, Written
from .artifacts import ArtifactGone
from .interrupted import owner_token, seal_interrupted
from .journal import RunJournal

logger = logging.getLogger("mcpx_hooks.history")

#: Runs that may wait for the writer at once (see the module docstring).
CAPACITY: Final = 256
#: At most one write in this many seconds (what comes in between is one transaction).
BATCH_S: Final = 0.05
#: The longest a search waits for the writer to store what runs have sent (`settled`).
SETTLE_S: Final = 1.0
#: Retention runs after this many runs have ended, and at the start.
RETAIN_EVERY: Final = 64
#: The stored lines indexed for search at most per write (one every `BATCH_S`) while runs
#: send lines, so that the writer's indexing takes little of the processor a busy run uses
#: (about 2 % of a core); and per write when none came, catching up. What is left when the
#: process ends is not indexed then (an `exec` of 300,000 lines would wait 1.5 s more for
#: it): a search indexes what its history is behind on before it looks (`History.search`),
#: and so does the next process that writes the history, a slice at a time.
INDEX_LINES: Final = 512
INDEX_IDLE_LINES: Final = 8192
#: A write another process's lock kept out is tried again after this many seconds, for as
#: long as `BUSY_GIVE_UP_S` (the runs' lines wait in their journals meanwhile).
BUSY_RETRY_S: Final = 0.5
BUSY_GIVE_UP_S: Final = 30.0
#: The same, once the process is ending and waits for the writer (`wait_idle`).
BUSY_AT_EXIT_S: Final = 4.0


class Recorder:
    """The runs' way to the history: `note` from journals, `serve` to write."""

    def __init__(
        self,
        history: History | None,
        fault: str | None = None,
        *,
        retain_days: float = math.inf,
        retain_bytes: int = 1 << 62,
        capacity: int = CAPACITY,
    ) -> None:
        self.history = history
        #: Why the history is not being kept (None while it is).
        self.fault = fault
        self.retain_days = retain_days
        self.retain_bytes = retain_bytes
        self._send, self._receive = trio.open_memory_channel[RunJournal](capacity)
        self._queued: set[RunJournal] = set()
        #: Per unfinished run recorded so far: its journal and the lines stored.
        self._stored: dict[str, tuple[RunJournal, int]] = {}
        #: Runs given up while some of them was stored: removed by the writer.
        self._dropped: set[str] = set()
        self._ended = 0
        self._idle = trio.Event()
        self._idle.set()
        #: Whether the search index is behind the stored lines (`INDEX_LINES`).
        self._behind = True
        #: Set when the process waits for the writer: no more waiting between commits.
        self._flushing = trio.Event()
        #: Marks to store with the next write (`History.write`): a gateway's place in the
        #: frames stream, every message up to it being in the journals it noted.
        self.marks: dict[str, int] = {}
        self._marked: dict[str, int] = {}
        #: Runs that ended before a fault kept them from the history, and why (see the
        #: module docstring); `on_unsaid` is told of each as it is found.
        self.unsaid: dict[str, str] = {}
        self.on_unsaid: Callable[[str, str], object] | None = None
        #: Told why, once, when a fault stops the recording after the process started.
        self.on_fault: Callable[[str], object] | None = None
        self._owner = owner_token()
        #: Journals a busy database kept out, to write again, and since when it has been.
        self._again: list[RunJournal] = []
        self._busy_since: float | None = None

    def note(self, journal: RunJournal) -> None:
        """The journal grew: queue it for the writer (never blocks)."""
        if self.fault is not None or self.history is None:
            self._warn(journal, self._fault_text())
            return
        if journal in self._queued:
            return
        try:
            self._send.send_nowait(journal)
        except trio.WouldBlock:
            journal.recorder = None
            self._stored.pop(journal.run_id, None)
            self._dropped.add(journal.run_id)
            self._warn(
                journal,
                "the run history is not being kept for this run: as many runs as it queues"
                f" ({self._send.statistics().max_buffer_size}) are already"
                " waiting for the disk; the run goes on in memory",
            )
            return
        self._queued.add(journal)
        self._idle = trio.Event() if self._idle.is_set() else self._idle

    def _fault_text(self) -> str:
        return self.not_kept("this run is")

    def not_kept(self, kept: str = "runs are") -> str:
        """The fault, for a run's warning or the process's log (a server's, once): what
        `kept` names goes on in memory."""
        return (
            f"the run history is not being kept ({self.fault}); {kept} kept in memory only"
            " (mcpx-hooks doctor says more)"
        )

    def _warn(self, journal: RunJournal, message: str) -> None:
        """One `warning` in a run that can still take one (started, no outcome yet); a run
        that has ended is `unsaid` instead."""
        if journal.history_warned or not journal.lines:
            return
        journal.history_warned = True
        if journal.finished or journal.outcome is not None:
            self.unsaid[journal.run_id] = message
            if self.on_unsaid is not None:
                self.on_unsaid(journal.run_id, message)
            return
        journal.append(blank(WarningFrame, message=message))

    async def settled(self) -> None:
        """Waits, at most `SETTLE_S`, until every journal noted so far is written (a search
        that should find what a run has just sent): the writer's batches go on as ever."""
        with trio.move_on_after(SETTLE_S):
            await self._idle.wait()

    async def wait_idle(self) -> None:
        """Waits until every journal noted so far is written (or the history failed); the
        writer writes at once from here on. The search index is left behind, if it is
        (`INDEX_LINES`)."""
        self._flushing.set()
        await self._idle.wait()

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer, until cancelled; beside it, what a process opening the history does
        first (`_opening`), so that the runs' lines are stored meanwhile."""
        task_status.started()
        async with trio.open_nursery() as nursery:
            if self.history is not None and self.fault is None:
                nursery.start_soon(self._opening)
            await self._writer()

    async def _opening(self) -> None:
        """The runs a killed process left unfinished, ended (a run of 400,000 lines takes
        about a second to read through); then retention."""
        assert self.history is not None
        try:
            await trio.to_thread.run_sync(seal_interrupted, self.history)
        except HistoryBusy:
            pass  # (the next process that opens the history seals them)
        except HistoryFault as exc:
            await self._fail(str(exc), [], [])
        if self.fault is None:
            await self._retain()

    async def _writer(self) -> None:
        while True:
            batch, self._again = self._again, []
            wait = BUSY_RETRY_S if batch else BATCH_S if self._behind else math.inf
            with trio.move_on_after(wait):
                batch.append(await self._receive.receive())
            while True:
                try:
                    batch.append(self._receive.receive_nowait())
                except trio.WouldBlock:
                    break
            self._queued.difference_update(batch)
            await self._write(list(dict.fromkeys(batch)))
            if not self._queued and not self._again:
                self._idle.set()
            # Commits batched: what comes in the meantime waits for the next one (a run
            # that ends is written at once when the process waits for the writer).
            with trio.move_on_at(trio.current_time() + BATCH_S):
                await self._flushing.wait()

    async def _write(self, batch: list[RunJournal]) -> None:
        history = self.history
        if history is None or self.fault is not None:
            return
        # The marks first: what they say is in the journals is then in the items.
        marks = dict(self.marks) if self.marks != self._marked else None
        where = {j.run_id: self._stored[j.run_id] for j in batch if j.run_id in self._stored}
        taken = [(journal, item) for journal in batch if (item := self._item(journal))]
        items = [item for _, item in taken]
        # A run's owner, with its first lines (`interrupted.py`): one this process runs,
        # not yet ended (its end removes the mark, in the same write, before marks are set).
        owners = {
            OWNER_MARK + item.run_id: self._owner
            for journal, item in taken
            if journal.owned and not item.first and not item.finished
        }
        dropped, self._dropped = self._dropped, set()
        ended = sum(item.finished for item in items)
        began = trio.current_time()
        try:
            if dropped:
                await trio.to_thread.run_sync(history.drop, dropped)
            if items or self._behind or marks:
                budget = INDEX_LINES if items else INDEX_IDLE_LINES
                sent = {**(marks or {}), **owners}
                self._behind = await trio.to_thread.run_sync(
                    lambda: history.write(items, index=budget, marks=sent)
                )
                self._marked = marks or self._marked
            self._busy_since = None
            self._ended += ended
            if self._ended >= RETAIN_EVERY:
                self._ended = 0
                await self._retain()
        except HistoryBusy as exc:
            now = trio.current_time()
            self._busy_since = began if self._busy_since is None else self._busy_since
            bound = BUSY_AT_EXIT_S if self._flushing.is_set() else BUSY_GIVE_UP_S
            if now - self._busy_since >= bound:
                await self._fail(str(exc), batch, [i.run_id for i in items if i.first > 0])
                return
            # Nothing of the batch was written: each run is where it was, to be written again.
            for journal, _ in taken:
                self._stored.pop(journal.run_id, None)
            self._stored.update(where)
            self._dropped |= dropped
            self._again = [journal for journal, _ in taken]
        except HistoryFault as exc:
            await self._fail(str(exc), batch, [i.run_id for i in items if i.first > 0])
        except Exception as exc:  # a bug: the history given up, never the process it serves
            logger.error("recording runs failed: %s", bug_summary(exc))
            logger.debug("recording runs failed", exc_info=exc)
            why = f"a bug in recording runs: {bug_summary(exc)}"
            await self._fail(why, batch, [i.run_id for i in items if i.first > 0])

    async def _forget(self, run_ids: list[str]) -> None:
        """What was stored of runs a fault cut short, dropped where the database still lets
        it (never a run that looks whole but is not, nor one left "running")."""
        history = self.history
        if history is None or not run_ids:
            return
        with contextlib.suppress(HistoryFault):
            await trio.to_thread.run_sync(history.drop, set(run_ids))

    def _item(self, journal: RunJournal) -> Written | None:
        """What to write of `journal` now (None: nothing new, or it is no longer recorded)."""
        if journal.recorder is None:
            return None
        _, stored = self._stored.get(journal.run_id, (journal, 0))
        lines = journal.lines[stored:]
        if not lines and not journal.finished:
            return None
        if journal.finished:
            self._stored.pop(journal.run_id, None)
        else:
            self._stored[journal.run_id] = (journal, stored + len(lines))
        return Written(
            journal.run_id,
            stored,
            lines,
            journal.summary(),
            journal.started,
            journal.finished,
            _artifacts(journal) if journal.finished else (),
        )

    async def _retain(self) -> None:
        assert self.history is not None
        history = self.history
        try:
            await trio.to_thread.run_sync(
                lambda: history.retain(days=self.retain_days, max_bytes=self.retain_bytes)
            )
        except HistoryBusy:
            self._ended = RETAIN_EVERY - 1  # (again after the next run that ends)
        except HistoryFault as exc:
            await self._fail(str(exc), [], [])

    async def _fail(self, why: str, batch: list[RunJournal], cut: list[str]) -> None:
        """Recording stops: each run still running is told, once; what was stored of those
        not stored whole (`cut`, and those being written) is forgotten."""
        first, self.fault = self.fault is None, why
        if first and self.on_fault is not None:
            self.on_fault(self.not_kept())
        running = {id(j): j for j in (*batch, *self._queued)}
        running |= {id(j): j for j, _ in self._stored.values()}
        cut = [*cut, *self._stored]
        self._stored.clear()
        for journal in running.values():
            self._warn(journal, self._fault_text())
        self._idle.set()
        await self._forget(cut)


def _artifacts(journal: RunJournal) -> list[tuple[str, str, str, str, int, str]]:
    """The run's kept artifacts, with where their bytes are now (the artifact store's)."""
    store = journal.artifacts
    found: list[tuple[str, str, str, str, int, str]] = []
    for frame in journal.artifact_frames if store is not None else ():
        assert store is not None
        try:
            kept = store.find(journal.run_id, str(frame["id"]))
        except ArtifactGone:
            continue
        sha, name = str(frame["sha256"]), str(frame["name"])  # (the name as framed: text)
        found.append((str(frame["id"]), sha, name, kept.mime, kept.size, kept.path))
    return found
