"""A run's artifacts through the cluster: a worker keeps them in the artifacts bucket (an
object store) and any gateway serves `GET /v1/runs/{runId}/artifacts/{id}` from it.

- The worker runs a script as a single `serve` does: its artifacts are kept in the worker's
  own store first (`run/artifacts.py`, within `[runs] artifactBytes`). Before a batch of
  frames holding `artifact` frames is published, each kept one is put in the bucket as the
  object `runId.id`; the `end` frame comes after them, so a client that sees `end` can
  fetch every one.
- The bucket holds `[runs] artifactBytes` too: before a run's artifacts go in, the worker
  deletes the objects of runs the runs stream no longer retains (it holds the last
  `runs.retain` runs), then, while they still would not fit, the oldest runs' objects. That
  ties the artifacts to the runs' own retention, which a TTL would not: a run is retained
  by count, not by age. A gateway also serves a run's artifact only while the run is
  retained, so an object not yet pruned is never served past its run.
- A gateway finds the object (404 as a single `serve` says it: no such run, no such
  artifact) and streams its chunks as they come, a few at a time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import trio

from ..core.frames import FrameType
from ..core.jsontext import wire_loads
from ..core.telemetry import Meters
from ..history.faults import HistoryFault
from ..history.store import History
from ..run.artifacts import ArtifactGone, Stored
from ..run.journal import RunJournal
from ..run.journals import Journals, UnknownRun, newest_first
from ..run.storedrun import StoredRun
from ..service.routes import ArtifactSource, SourceDown
from .jet import ClusterDown
from .link import Cluster
from .mirror import Mirrors
from .names import RUN_ID, Stream, artifact_key, frames_subject, runs_subject
from .watch import RunsIndex

logger = logging.getLogger("mcpx_hooks.cluster")

#: A line is looked at as a possible `artifact` frame only if it holds this.
_MARK = f'"{FrameType.ARTIFACT}"'.encode()


def artifact_ids(lines: list[bytes]) -> list[str]:
    """The ids of the `artifact` frames among `lines`, in order."""
    found = []
    for line in lines:
        if _MARK not in line:
            continue
        with contextlib.suppress(ValueError):
            frame = wire_loads(line)
            if isinstance(frame, dict) and frame.get("type") == FrameType.ARTIFACT:
                found.append(str(frame.get("id")))
    return found


async def store_artifacts(
    cluster: Cluster, journal: RunJournal, framed: bytes, budget: int, done: set[str]
) -> None:
    """Puts the kept artifacts framed in `framed` (a batch's frames, a line each; those not
    in `done`) in the bucket, after making room for them. One that cannot be stored is
    logged; its frame still goes out (a gateway then answers 404 for it). A run whose
    artifacts are all done (most runs have none) is not looked for in `framed`."""
    store = journal.artifacts
    if store is None or store.framed(journal.run_id) <= done or _MARK not in framed:
        return
    run_id = journal.run_id
    kept: list[tuple[str, Stored]] = []
    for artifact_id in artifact_ids(framed.split(b"\n")):
        if artifact_id in done:
            continue
        done.add(artifact_id)
        with contextlib.suppress(ArtifactGone):  # not kept on the worker either (its warning)
            kept.append((artifact_id, store.find(run_id, artifact_id)))
    if not kept:
        return
    try:
        if not await cluster.prune_artifacts(run_id, sum(s.size for _, s in kept), budget):
            logger.warning(
                "run %s: its artifacts do not fit in [runs] artifactBytes (%d bytes) in the"
                " cluster; not stored",
                run_id,
                budget,
            )
            return
        for artifact_id, stored in kept:
            key = artifact_key(run_id, artifact_id)
            await cluster.put_artifact(key, stored.path, stored.name, stored.mime)
    except ClusterDown as exc:
        logger.warning("run %s: artifacts not stored in the cluster: %s", run_id, exc)


class ClusterArtifact:
    """One artifact as a gateway serves it: looked up in the bucket when asked."""

    def __init__(self, cluster: Cluster, index: RunsIndex, run_id: str, artifact_id: str) -> None:
        self.cluster = cluster
        self.index = index
        self.run_id = run_id
        self.artifact_id = artifact_id
        self._chunks = ""

    async def find(self) -> Stored:
        try:
            self.cluster.require_connected()
            retained = self.index.known(self.run_id) or await self.cluster.last(
                Stream.RUNS, runs_subject(self.run_id)
            )
            found = retained and await self.cluster.find_artifact(
                artifact_key(self.run_id, self.artifact_id)
            )
        except ClusterDown as exc:
            raise SourceDown(_down(exc)) from None
        if not retained:
            raise ArtifactGone(_not_retained(self.run_id, self.index.retain))
        if not found:
            raise ArtifactGone(f"run {self.run_id} has no artifact {self.artifact_id!r}")
        self._chunks = found.chunks_subject
        return Stored("", found.name, found.mime, found.size)

    @contextlib.asynccontextmanager
    async def pieces(self) -> AsyncIterator[AsyncIterator[bytes]]:
        if not self._chunks:  # empty: no chunks to read
            yield _nothing()
            return
        async with self.cluster.artifact_chunks(self._chunks) as chunks:
            yield chunks


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""


def _down(exc: ClusterDown) -> str:
    return f"the cluster cannot be reached: {exc}; try again later"


def _not_retained(run_id: str, retain: int) -> str:
    return (
        f"no run {run_id!r} is retained (the cluster keeps the last {retain} runs and their"
        " artifacts)"
    )


class ClusterRoutes:
    """What a gateway's plain HTTP routes read: the runs stream's summaries (`RunsIndex`),
    the artifacts bucket, and, when it keeps one, its own run history (`journals.history`,
    filled from the frames stream by `indexing.py`): the runs the streams no longer hold,
    the search and the downloads; and its metrics (`journals.metrics_text`: its hooks, and
    those of every run it read from the frames stream)."""

    def __init__(
        self,
        index: RunsIndex,
        cluster: Cluster,
        journals: Journals | None = None,
        mirrors: Mirrors | None = None,
    ) -> None:
        self.index = index
        self.cluster = cluster
        self.journals = journals
        self.mirrors = mirrors

    @property
    def history(self) -> History | None:
        return self.journals.history if self.journals is not None else None

    def metrics_text(self) -> str:
        if self.journals is None:
            return Meters().prometheus_text()
        return self.journals.metrics_text()

    def summaries(self) -> list[dict[str, Any]]:
        """The runs stream's and the history's others (at most `runs.retain` of those), newest
        first."""
        held = self.index.summaries()
        if self.history is None:
            return held
        try:
            others = self.history.summaries(self.index.retain, [s["runId"] for s in held])
            return newest_first(held, others)
        except HistoryFault:
            return held

    async def settle(self) -> None:
        if self.journals is not None:
            await self.journals.settle()

    def search(self, text: str, run_id: str | None, limit: int) -> list[dict[str, Any]] | None:
        """The gateway's history searched (None: it keeps none, `/v1/search` is 404)."""
        if self.journals is None:
            return None
        return self.journals.search(text, run_id, limit)

    def find_artifact(self, run_id: str, artifact_id: str) -> Stored | ArtifactSource:
        if not RUN_ID.fullmatch(run_id):
            raise ArtifactGone(_not_retained(run_id, self.index.retain))
        if not RUN_ID.fullmatch(artifact_id):
            raise ArtifactGone(f"run {run_id} has no artifact {artifact_id!r}")
        return ClusterArtifact(self.cluster, self.index, run_id, artifact_id)

    async def find(self, run_id: str) -> RunJournal | StoredRun:
        """A run's journal for its downloads: as this gateway follows it, else as its history
        holds it when it has ended there, else from the frames stream, else what the history
        holds of it (`UnknownRun`: none of them has it; `SourceDown`: the history has
        nothing of it and the cluster cannot be reached to ask)."""
        mirrors = self.mirrors
        if mirrors is not None and run_id in mirrors:
            journal = await mirrors.open(run_id)
            if len(journal):
                return journal
        stored = await self.stored(run_id)
        if stored is not None and stored[1]:
            return stored[0]
        if mirrors is not None and RUN_ID.fullmatch(run_id):
            try:
                self.cluster.require_connected()
                if await self.cluster.last(Stream.FRAMES, frames_subject(run_id)) is not None:
                    journal = await mirrors.open(run_id)
                    if len(journal):
                        return journal
            except ClusterDown as exc:
                if stored is None:
                    raise SourceDown(_down(exc)) from None
        if stored is None:
            raise UnknownRun(run_id)
        return stored[0]

    async def download(self, run_id: str) -> RunJournal | StoredRun:
        """`find`: a run only this gateway's history holds is read as it is downloaded."""
        return await self.find(run_id)

    async def stored(self, run_id: str) -> tuple[StoredRun, bool] | None:
        """The run as this gateway's history holds it (read as it is sent, a stored chunk at
        a time, and sealed when it holds no `end`), and whether it holds its `end`; None when
        it holds nothing of it."""
        history = self.history
        if history is None:
            return None
        try:
            found = await trio.to_thread.run_sync(history.extent, run_id)
        except HistoryFault:
            return None
        if found is None or not found[0]:
            return None
        return StoredRun(history, run_id), found[1]
