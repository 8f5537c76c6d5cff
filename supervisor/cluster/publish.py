"""A worker's publishing of one run: its frames to the run's subject, in order, many frames
to a message (`names.batch_message`), each batch until JetStream has it, and its summary to
the runs stream (see `worker.py`)."""

from __future__ import annotations

import collections
import contextlib
import logging
from typing import Any, Final

import orjson
import trio

from ..run.journal import RunJournal
from ..run.scriptrun import Run
from .artifacts import store_artifacts
from .jet import WRONG_LAST_SEQUENCE, ClusterDown
from .link import Cluster, retry_s
from .names import Header, batch_message, runs_subject

logger = logging.getLogger("mcpx_hooks.worker")

#: A batch of frames not acknowledged within this is sent again (ids make it idempotent).
PUBLISH_S: Final = 5.0
#: Frames in one message at most (and within the server's max payload, `batch_message`).
BATCH: Final = 8192
#: Batches in flight (sent, their acks not yet in) at most.
WINDOW: Final = 8
#: Different failures a run's publishing tells while NATS fails it, at most.
TOLD_MOST: Final = 16


class _Told:
    """What one run's publishing says of NATS failing it: each different failure once for
    as long as the failures last (a NATS that does not answer fails every try, every 5 s),
    then once that JetStream acknowledges again."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._said: set[str] = set()

    def failed(self, why: str) -> None:
        new = why not in self._said and len(self._said) < TOLD_MOST
        if new:
            self._said.add(why)
        level = logging.WARNING if new else logging.DEBUG
        logger.log(level, "run %s: %s; sending again", self.run_id, why)

    def acked(self) -> None:
        if self._said:
            logger.warning("run %s: JetStream acknowledges again; sending on", self.run_id)
            self._said.clear()


class Publisher:
    def __init__(self, cluster: Cluster, lease_s: float) -> None:
        self.cluster = cluster
        self.lease_s = lease_s
        #: The server's largest message (`fit`), read once connected.
        self.max_payload = 1024 * 1024
        #: `[runs] artifactBytes`: the artifacts bucket's budget (`artifacts.py`).
        self.artifact_bytes = 0

    async def publish(self, run: Run) -> None:
        """The run's frames to its subject in order, as many to a message as there are
        waiting (up to `BATCH`, within the server's max payload); its summary once it has
        begun and once it has ended. The first batch (the run's claim) is sent alone until
        acknowledged; then up to `WINDOW` batches are in flight at once. A batch not
        acknowledged is sent again, with all after it, cut where it was cut before (the
        same ids: a batch sent twice is stored once). A batch's artifacts are stored in the
        bucket before it is sent."""
        journal, run_id = run.journal, run.request.run_id
        told = _Told(run_id)
        stored: set[str] = set()
        at = 0
        inflight: collections.deque[tuple[int, list[Any]]] = collections.deque()
        #: Where each batch not known to be stored ends, by its first seq.
        cuts: dict[int, int] = {}
        failures = 0  # in a row: an ack starts them again
        while True:
            if at < len(journal) and len(inflight) < WINDOW:
                most = cuts.get(at, at + BATCH) - at
                message, upto = batch_message(
                    run_id, journal.lines, journal.ends, at, limit=self.max_payload, most=most
                )
                cuts[at] = upto
                framed = message[1]
                await store_artifacts(self.cluster, journal, framed, self.artifact_bytes, stored)
                if at == 0:
                    if not await self.send([message], run_id, told):
                        run.cancel()  # another worker began this run: this one publishes nothing
                        return
                    del cuts[at]
                    await self.summary(journal, told)
                else:
                    try:
                        inflight.append((at, await self.cluster.send_many([message])))
                    except ClusterDown as exc:
                        failures += 1
                        at = await self._rewind(inflight, at, told, exc, failures)
                        continue
                at = upto
            elif inflight:
                first, handles = inflight[0]
                try:
                    with trio.fail_after(PUBLISH_S):
                        await self.cluster.acked(handles)
                    inflight.popleft()
                    del cuts[first]
                    failures = 0
                    told.acked()
                except (ClusterDown, trio.TooSlowError) as exc:
                    failures += 1
                    at = await self._rewind(inflight, first, told, exc, failures)
            elif journal.finished and at == len(journal):
                break
            else:
                await journal.wait_past(at)
        await self.summary(journal, told)

    async def _rewind(
        self,
        inflight: collections.deque[tuple[int, list[Any]]],
        at: int,
        told: _Told,
        why: object,
        failures: int,
    ) -> int:
        """Forgets what is in flight and says where to send from again: the first frame
        not known to be stored; first waits out the backoff of `failures` in a row."""
        # (an exception that says nothing, a TooSlowError, says why in these words)
        told.failed(str(why) or "no ack in time")
        start = inflight[0][0] if inflight else at
        with trio.move_on_after(PUBLISH_S):
            for _, handles in inflight:
                with contextlib.suppress(ClusterDown):
                    await self.cluster.drop(handles)
        inflight.clear()
        await trio.sleep(retry_s(failures))
        return min(start, at)

    async def summary(self, journal: RunJournal, told: _Told | None = None) -> None:
        summary = journal.summary()
        headers: dict[str, str] = {
            Header.LEASE: f"{self.lease_s:g}",
            Header.MSG_ID: f"{journal.run_id}.summary.{summary['status']}",
        }
        summaries = [(runs_subject(journal.run_id), orjson.dumps(summary), headers)]
        await self.send(summaries, journal.run_id, told)

    async def send(
        self,
        batch: list[tuple[str, bytes, dict[str, str]]],
        run_id: str,
        told: _Told | None = None,
    ) -> bool:
        """Publishes until acknowledged (ids make a second send a no-op); False when the
        run's subject was not empty for its first frame. Tries again after a backoff,
        each different failure said once (`told`: the run's, as its publishing goes). One
        message after another, each awaited (`Cluster.publish`): nats-py never fails a
        pipelined publish's ack with JetStream's refusal (its handler raises it instead),
        so a claim refused so would only ever time out, and be sent again for ever."""
        told = told or _Told(run_id)
        failures = 0
        while True:
            with trio.move_on_after(PUBLISH_S) as timer:
                try:
                    for subject, data, headers in batch:
                        await self.cluster.publish(subject, data, headers)
                    told.acked()
                    return True
                except ClusterDown as exc:
                    if getattr(exc, "code", None) == WRONG_LAST_SEQUENCE:
                        return False
                    told.failed(str(exc) or "no ack")
            if timer.cancelled_caught:
                told.failed("no ack in time")
            failures += 1
            await trio.sleep(retry_s(failures))
