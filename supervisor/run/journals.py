"""The retained runs: the journals in memory (`journal.py`), within their budgets, and, when
there is a history (`history/`), the runs stored there, served as they were served live.

Memory holds at most `retain` runs whose frames cost at most `retain_bytes` together; past
either, the oldest finished runs are forgotten (running ones never are), and their artifacts
with them. A run no longer in memory is read back from the history when asked for: its lines
are the ones that were sent, so a reader gets the same frames with the same seq.
"""

from __future__ import annotations

import contextlib
import operator
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

import trio

from ..core.errors import HooksError
from ..core.hooks import DEFAULT_RETAIN_BYTES, DEFAULT_RUN_BYTES
from ..history.faults import HistoryFault
from ..history.store import History
from .artifacts import ArtifactGone, ArtifactStore, Stored
from .interrupted import as_sealed
from .journal import RunJournal
from .storedrun import StoredRun
from .telemetry import Telemetry

J = TypeVar("J", bound=RunJournal)


class UnknownRun(HooksError, LookupError):
    """No run with that id is retained."""


class Journals:
    """The retained runs: at most `retain` of them, whose frames cost at most `retain_bytes`
    together; past either, the oldest finished runs are forgotten (running ones never are)."""

    def __init__(
        self,
        retain: int,
        *,
        run_bytes: int = DEFAULT_RUN_BYTES,
        retain_bytes: int = DEFAULT_RETAIN_BYTES,
        artifacts: ArtifactStore | None = None,
        history: History | None = None,
        recorder: Callable[[RunJournal], object] | None = None,
        telemetry: Telemetry | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.retain = retain
        #: The runs stored on disk (None: memory only), and what records new runs there.
        self.history = history
        self.recorder = recorder
        self._settle = settle
        #: What the seals of the stored runs killed processes left say (`as_sealed`).
        self._orphans: dict[str, dict[str, Any]] = {}
        #: What each new run's frames are counted by and exported to (`telemetry.py`).
        self.telemetry = telemetry or Telemetry()
        #: The runs' artifacts, removed with the run that made them.
        self.artifacts = artifacts
        self.run_bytes = run_bytes
        self.retain_bytes = retain_bytes
        self._runs: OrderedDict[str, RunJournal] = OrderedDict()

    def open(self, run_id: str) -> RunJournal:
        journal = RunJournal(run_id, self.run_bytes, self._forget_old, self.artifacts)
        journal.recorder = self.recorder
        journal.telemetry = self.telemetry.frame
        self._runs[run_id] = journal
        self._forget_old()
        return journal

    def get(self, run_id: str) -> RunJournal:
        try:
            return self._runs[run_id]
        except KeyError:
            raise UnknownRun(run_id) from None

    async def find(self, run_id: str) -> RunJournal:
        """The run in memory, else as the history stored it (read in a worker thread);
        `UnknownRun` when neither has it."""
        journal = self._runs.get(run_id)
        if journal is not None:
            return journal
        history = self.history
        if history is None:
            raise UnknownRun(run_id)
        try:
            stored = await trio.to_thread.run_sync(history.lines, run_id)
        except HistoryFault:
            stored = None
        if stored is None:
            raise UnknownRun(run_id)
        return RunJournal.restored(run_id, *stored)

    async def download(self, run_id: str) -> RunJournal | StoredRun:
        """`find` for a reader that reads the run once through (a download, a replay over a
        WebSocket): a run only the history holds is read as it is sent, a chunk at a time
        (`storedrun.py`), never restored whole."""
        if run_id in self._runs or self.history is None:
            return await self.find(run_id)
        try:  # (whether the history holds the run at all: its row)
            held = await trio.to_thread.run_sync(self.history.extent, run_id)
        except HistoryFault:
            held = None
        if held is None:
            raise UnknownRun(run_id)
        return StoredRun(self.history, run_id)

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[RunJournal]:
        """The retained runs, oldest first."""
        return iter(list(self._runs.values()))

    def summaries(self) -> list[dict[str, Any]]:
        """Each retained run's `summary`, newest first: those in memory and the history's
        others (at most `retain` of those), which other processes (`exec`, `mcp`) may have
        started after this one's runs; one a killed process left, as its seal will list it
        (`as_sealed`), not `running` until the seal is stored. Blocking: a worker thread."""
        held = [j.summary() for j in reversed(self._runs.values())]
        if self.history is None:
            return held
        try:
            # (A run a killed process left lists as its seal, under way, will store it.)
            history, retain, runs = self.history, self.retain, self._runs
            stored = as_sealed(history, lambda: history.summaries(retain, runs), self._orphans)
            return newest_first(held, stored)
        except HistoryFault:
            return held

    async def settle(self) -> None:
        """Waits (bounded) until what the runs have sent is in the history, to be searched."""
        if self._settle is not None:
            await self._settle()

    def search(self, text: str, run_id: str | None, limit: int) -> list[dict[str, Any]] | None:
        """The stored frames matching `text` (`History.search`; blocking, a `HistoryFault`
        when it cannot be read), None without a history. A disk that takes no more writes
        (full) leaves the index where it was: what it holds is searched, as on read-only media."""
        if self.history is None:
            return None
        try:
            return self.history.search(text, run_id=run_id, limit=limit)
        except HistoryFault:
            return self.history.search(text, run_id=run_id, limit=limit, index=False)

    def find_artifact(self, run_id: str, artifact_id: str) -> Stored:
        """A retained run's kept artifact, or `ArtifactGone` saying why there is none."""
        if run_id not in self._runs and self.history is not None:
            with contextlib.suppress(HistoryFault):
                stored = self.history.artifact(run_id, artifact_id)
                if stored is not None:
                    return Stored(stored.path, stored.name, stored.mime, stored.size)
                if self.history.lines(run_id, 1 << 62) is not None:  # (the run, none of it)
                    raise ArtifactGone(f"run {run_id} has no artifact {artifact_id!r}")
        if run_id not in self._runs:
            raise ArtifactGone(
                f"no run {run_id!r} is retained (the last {self.retain} runs are, with their"
                " artifacts)"
            )
        if self.artifacts is None:
            raise ArtifactGone(f"run {run_id}'s artifacts are not kept here")
        return self.artifacts.find(run_id, artifact_id)

    def metrics_text(self) -> str:
        """The runs' metrics since the runtime started, in Prometheus' text format."""
        return self.telemetry.meters.prometheus_text()

    @property
    def cost(self) -> int:
        """What the retained runs' frames cost, in bytes."""
        return sum(map(_COST, self._runs.values()))

    def _forget_old(self) -> None:
        """Forgets finished runs, oldest first, while the runs or their cost are over budget.
        Runs the budget cannot forget (running ones) are kept: each is held to `run_bytes`."""
        for run_id in to_forget(self._runs, self.retain, self.retain_bytes, _finished):
            del self._runs[run_id]
            if self.artifacts is not None:
                self.artifacts.forget(run_id)


_COST: Final = operator.attrgetter("cost")


def newest_first(*lists: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run summaries from several sources (each newest first) as one list, newest first by
    their `startedAt` (UTC, one fixed format: its text sorts as its time); a run with none yet
    (no `start` frame) first, and runs started at the same moment in the order given."""
    return sorted((s for one in lists for s in one), key=_started, reverse=True)


def _started(summary: Mapping[str, Any]) -> str:
    started = summary.get("startedAt")
    return started if isinstance(started, str) else "~"  # ("~" after every digit)


_finished: Final = operator.attrgetter("finished")


def to_forget(
    runs: Mapping[str, J], retain: int, retain_bytes: int, ended: Callable[[J], bool]
) -> list[str]:
    """The ids of the runs to forget, in the order of `runs` (oldest first), until at most
    `retain` are left costing at most `retain_bytes`; only runs `ended` says are over. Asked
    at each run's start and end, so it looks no further than it must (usually at no run)."""
    count, cost = len(runs), sum(map(_COST, runs.values()))
    gone: list[str] = []
    if count <= retain and cost <= retain_bytes:
        return gone
    for run_id, journal in runs.items():
        if count <= retain and cost <= retain_bytes:
            break
        if ended(journal):
            count -= 1
            cost -= journal.cost
            gone.append(run_id)
    return gone
