"""What a gateway knows of the cluster's runs: the runs stream (each run's last summary) for
`GET /v1/runs`, and the workers' leases, watched so that a run whose worker was lost gets
its ending (`ending.publish_lost`).

A worker renews its lease on a run every third of the lease and says so on the run's lease
subject (core NATS). A run the runs stream calls running, not heard of for longer than its
lease, has lost its worker. A gateway that has just started, or that was cut off from NATS
(a restarted server), counts every lease from the moment it can hear again: it never takes
its own deafness for a lost worker.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Any, Final

import trio

from ..core.events import EventKind
from ..core.frames import now_rfc3339, seconds_between
from ..core.jsontext import wire_loads
from .ending import publish_lost
from .jet import ClusterDown
from .link import Cluster, retry_s
from .mirror import Mirrors
from .names import DEFAULT_LEASE_S, RUN_ID, Header, every, lease_subject, runs_subject

logger = logging.getLogger("mcpx_hooks.cluster")

#: The watch looks at the leases this often at most (and at least 4 times a lease).
TICK_S: Final = 1.0
#: How long JetStream has to answer (its account's info) before a run is judged lost.
PROBE_S: Final = 2.0
#: A fresh `run.started` or `run.finished` event waits at most this long for the run's
#: summary to say so (`RunsIndex.caught_up`).
SUMMARY_WAIT_S: Final = 10.0
#: Within `SHORT_AFTER_S` of a wait that ran out, a wait is at most this long: an event
#: whose run never gets a summary (a publisher that is not a worker, a run no longer
#: retained) holds the events after it back once, not 10 s each.
SHORT_WAIT_S: Final = 0.5
SHORT_AFTER_S: Final = 60.0


#: What each key of a run's summary holds (`run/journal.py` `summary`): its check.
_SUMMARY: Final[dict[str, Any]] = {
    "runId": lambda v: isinstance(v, str),
    "argv": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "argvCut": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "cwd": lambda v: v is None or isinstance(v, str),
    "startedAt": lambda v: v is None or isinstance(v, str),
    "status": lambda v: v in ("running", "result", "error"),
    "exitCode": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "durationMs": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "refused": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "failed": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
}


def summary_problem(summary: dict[str, Any], run_id: str) -> str | None:
    """What is wrong with a run's summary read from the bus (None: nothing): each key it
    holds of the right kind, its `runId` its subject's, its `status` present. A worker
    writes them; a publisher that is not one (a forged `{"runId": 5}`) is not listed."""
    if summary.get("runId") != run_id or "status" not in summary:
        return "its runId or its status"
    for key, value in summary.items():
        check = _SUMMARY.get(key)
        if check is not None and not check(value):
            return f"its {key}"
    return None


def _run_id(subject: str) -> str | None:
    run_id = subject.rsplit(".", 1)[-1]
    return run_id if RUN_ID.fullmatch(run_id) else None


class RunsIndex:
    """The retained runs' summaries, newest last; the leases of those still running."""

    def __init__(self, retain: int) -> None:
        self.retain = retain
        self._summaries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        #: Running runs: their lease, and when this gateway last heard it renewed.
        self._leases: dict[str, float] = {}
        self._heard: dict[str, float] = {}
        self._ending: set[str] = set()
        #: Set (and made anew) each time a summary is taken.
        self._changed = trio.Event()
        #: When a wait for a summary last ran out.
        self._ran_out = -math.inf

    def summaries(self) -> list[dict[str, Any]]:
        """`GET /v1/runs`, newest first."""
        return list(reversed(self._summaries.values()))

    async def caught_up(self, event: dict[str, Any]) -> None:
        """Waits (at most `SUMMARY_WAIT_S`; `SHORT_WAIT_S` soon after a wait ran out) until
        `GET /v1/runs` shows what a fresh run event says: the run listed once it started,
        not running once it finished. A worker publishes its events and a run's summary on
        their own streams, so a client told of an ending could otherwise ask for the list
        before it has the ending too."""
        run_id, kind = event.get("runId"), event.get("kind")
        if not isinstance(run_id, str) or kind not in (
            EventKind.RUN_STARTED,
            EventKind.RUN_FINISHED,
        ):
            return
        now = trio.current_time()
        bound = SHORT_WAIT_S if now - self._ran_out < SHORT_AFTER_S else SUMMARY_WAIT_S
        with trio.move_on_after(bound) as waiting:
            while not self._shows(run_id, kind == EventKind.RUN_FINISHED):
                await self._changed.wait()
        if waiting.cancelled_caught:
            self._ran_out = trio.current_time()

    def _shows(self, run_id: str, finished: bool) -> bool:
        summary = self._summaries.get(run_id)
        return summary is not None and (not finished or summary.get("status") != "running")

    # ---- the streams -----------------------------------------------------------------------

    def known(self, run_id: str) -> bool:
        return run_id in self._summaries

    def take_summary(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        run_id = _run_id(subject)
        try:
            summary = wire_loads(data)
        except ValueError:
            return
        if run_id is None or not isinstance(summary, dict):
            return
        if (problem := summary_problem(summary, run_id)) is not None:
            logger.warning(
                "run %s: a summary on the bus that is not one (%s), skipped", run_id, problem
            )
            return
        self._summaries[run_id] = summary
        self._summaries.move_to_end(run_id)
        self._changed.set()
        self._changed = trio.Event()
        while len(self._summaries) > self.retain:
            old, _ = self._summaries.popitem(last=False)
            self._leases.pop(old, None)
            self._heard.pop(old, None)
        if summary.get("status") == "running":
            try:
                lease = float(headers.get(Header.LEASE, DEFAULT_LEASE_S))
            except ValueError:
                lease = DEFAULT_LEASE_S
            self._leases[run_id] = lease
            self._heard.setdefault(run_id, trio.current_time())
        else:
            self._leases.pop(run_id, None)
            self._heard.pop(run_id, None)

    def heard(self, subject: str) -> None:
        run_id = _run_id(subject)
        if run_id is not None and run_id in self._leases:
            self._heard[run_id] = trio.current_time()

    def lapsed(self) -> list[str]:
        now = trio.current_time()
        return [
            run_id
            for run_id, lease in self._leases.items()
            if now - self._heard.get(run_id, now) > lease and run_id not in self._ending
        ]

    def ending(self, run_id: str, now: bool) -> None:
        """Marks a lapsed run as being ended (`now`) or no longer (heard anew: retried
        after another lease if its ending did not go through)."""
        if now:
            self._ending.add(run_id)
        else:
            self._ending.discard(run_id)
            if run_id in self._leases:
                self._heard[run_id] = trio.current_time()

    def started_at(self, run_id: str) -> object:
        return self._summaries.get(run_id, {}).get("startedAt")

    def hear_all_now(self) -> None:
        now = trio.current_time()
        for run_id in self._leases:
            self._heard[run_id] = now


async def serve_index(
    cluster: Cluster,
    index: RunsIndex,
    mirrors: Mirrors,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keeps `index` from the runs stream and the lease subjects, and ends the runs whose
    worker was lost, until cancelled."""
    async with trio.open_nursery() as nursery:
        await nursery.start(_serve_summaries, cluster, index)
        await nursery.start(_serve_heartbeats, cluster, index)
        task_status.started()
        await _serve_watch(cluster, index, mirrors, nursery)


async def _serve_summaries(
    cluster: Cluster, index: RunsIndex, task_status: trio.TaskStatus[None]
) -> None:
    started, failures = False, 0
    while True:  # a follow cut short (NATS unreachable for long) is taken up again
        async with cluster.follow(every(runs_subject("-"))) as batches:
            if not started:
                task_status.started()
                started = True
            async for batch in batches:
                failures = 0
                for message in batch:
                    index.take_summary(message.subject, message.data, dict(message.headers))
        failures += 1
        await trio.sleep(retry_s(failures))


async def _serve_heartbeats(
    cluster: Cluster, index: RunsIndex, task_status: trio.TaskStatus[None]
) -> None:
    started, failures = False, 0
    while True:
        async with cluster.listen(every(lease_subject("-"))) as messages:
            if not started:
                task_status.started()
                started = True
            async for message in messages:
                failures = 0
                index.heard(message.subject)
        index.hear_all_now()  # deaf meanwhile: no lease is judged on that
        failures += 1
        await trio.sleep(retry_s(failures))
        index.hear_all_now()


async def _serve_watch(
    cluster: Cluster, index: RunsIndex, mirrors: Mirrors, nursery: trio.Nursery
) -> None:
    reconnects, stalled = -1, False
    while True:
        await trio.sleep(TICK_S)
        try:
            connected, count = await cluster.status()
        except ClusterDown:
            connected, count = False, reconnects
        if not connected or count != reconnects:
            reconnects = count
            index.hear_all_now()
            continue
        lapsed = index.lapsed()
        if lapsed and (stalled or not await _answers(cluster)):
            # NATS connected but silent (stalled) is not its workers' silence: no lease is
            # judged until it answers again, and every lease counts from then, as after a
            # reconnection.
            stalled = not (stalled and await _answers(cluster))
            index.hear_all_now()
            continue
        for run_id in lapsed:
            index.ending(run_id, now=True)
            nursery.start_soon(_end_lost, cluster, index, mirrors, run_id)


async def _answers(cluster: Cluster) -> bool:
    """Whether JetStream answers within `PROBE_S`: asked before any run is judged lost,
    since a server stalled with its connections up (stopped, frozen) is as silent as a lost
    worker, and its runs' workers may be running them still."""
    try:
        return (await cluster.status(PROBE_S))[0]
    except ClusterDown:
        return False


async def _end_lost(cluster: Cluster, index: RunsIndex, mirrors: Mirrors, run_id: str) -> None:
    try:
        journal = await mirrors.open(run_id)
        ended = await publish_lost(cluster, journal, _elapsed_ms(index.started_at(run_id)))
        if ended:
            logger.warning("run %s: its worker was lost; ended it", run_id)
    except ClusterDown as exc:
        logger.warning("run %s: its worker was lost; could not end it yet: %s", run_id, exc)
    finally:
        index.ending(run_id, now=False)


def _elapsed_ms(started: object) -> int:
    """Milliseconds from a run's `start` (its `at`) to now; 0 where it cannot be read."""
    span = seconds_between(started, now_rfc3339())
    return 0 if span is None else int(span * 1000)
