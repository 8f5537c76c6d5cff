"""A gateway's requests still waiting for a worker, and what becomes of them when NATS is
restarted: the requests stream is kept in memory (a request carries the caller's environment,
never written to a disk), so a request no worker had taken is gone with the server.

Each time the gateway hears NATS again after a disconnect, it looks for each run it queued
and no worker has begun (its frames subject still empty) whether the requests stream still
holds its request (at the stream sequence its publish was given, with the run's id). One
that is gone is ended at once with `start`, `error{cause: "failed"}` and `end`, published as
`ending.publish_lost` publishes a lost worker's ending: only onto an empty subject, once. A
worker never runs it (it is gone; and a worker runs nothing whose subject is not empty), and
the client waiting on the exec socket gets the ending instead of waiting for ever.

A run its client cancels while it waits for a worker (Ctrl-C or SIGTERM of `exec --remote`,
or the client gone with `cancelOnDisconnect`) is ended the same way (`end_cancelled`): the
ending is on its subject before any worker begins it, so none runs it.
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from ..core.frames import ErrorCause, StartFrame, blank
from ..core.hooks import Profile
from ..core.redact import Redactor
from ..service.execrequest import ExecRequest
from .ending import publish_ending
from .jet import ClusterDown
from .link import Cluster
from .mirror import MirrorJournal, Mirrors

logger = logging.getLogger("mcpx_hooks.cluster")

REQUEST_LOST: Final = "the request was lost: NATS restarted before a worker took it; send it again"
CANCELLED_QUEUED: Final = "cancelled before a worker took it"
#: The connection's state is looked at this often.
TICK_S: Final = 1.0


class Queued:
    """The runs this gateway queued whose client waits for them to begin: each one's
    sequence in the requests stream, and the `start` frame its ending begins with (the
    run's order starts so)."""

    def __init__(self) -> None:
        self._seqs: dict[str, tuple[int, StartFrame]] = {}

    def add(
        self, run_id: str, seq: int, request: ExecRequest, cwd: str, sandbox: Profile
    ) -> StartFrame:
        """Holds the run as queued; the `start` its ending begins with."""
        # Shown as a run's `start` shows it, every value of the caller's environment the
        # request carries redacted (the gateway does not know which of them are secrets).
        argv = Redactor(dict(request.caller_env)).value(list(request.script.shown_argv))
        start = blank(StartFrame, argv=tuple(argv), cwd=request.cwd or cwd, sandbox=sandbox.value)
        self._seqs[run_id] = (seq, start)
        return start

    def discard(self, run_id: str) -> None:
        self._seqs.pop(run_id, None)

    def items(self) -> list[tuple[str, tuple[int, StartFrame]]]:
        return list(self._seqs.items())


async def end_cancelled(cluster: Cluster, journal: MirrorJournal, start: StartFrame) -> bool:
    """Ends a queued run its client cancelled (or left, with `cancelOnDisconnect`) before a
    worker took it: `start`, `error{cause: "cancelled"}` and `end`, onto its subject only
    while it is empty, as a lost request's. The request stays queued; the worker that takes
    it finds the subject not empty and runs nothing of it. False: a worker had begun it."""
    return await publish_ending(
        cluster, journal, 0, CANCELLED_QUEUED, cause=ErrorCause.CANCELLED, start=start
    )


async def serve_queued(
    cluster: Cluster,
    queued: Queued,
    mirrors: Mirrors,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Until cancelled: after each reconnection, ends the queued runs whose request is gone."""
    _, reconnects = await cluster.status()
    task_status.started()
    unchecked = False
    while True:
        await trio.sleep(TICK_S)
        try:
            connected, count = await cluster.status()
        except ClusterDown:
            continue
        if count != reconnects:
            unchecked = True
        reconnects = count
        if connected and unchecked:
            try:
                for run_id, (seq, start) in queued.items():
                    await _check(cluster, mirrors, run_id, seq, start)
                unchecked = False
            except ClusterDown as exc:  # cut off again: looked at after the next reconnection
                logger.warning("queued requests not checked yet: %s", exc)


async def _check(
    cluster: Cluster, mirrors: Mirrors, run_id: str, seq: int, start: StartFrame
) -> None:
    if run_id not in mirrors:
        return
    journal = await mirrors.open(run_id)
    if journal.begun.is_set() or await cluster.request_held(seq, run_id):
        return
    if await publish_ending(
        cluster, journal, 0, REQUEST_LOST, cause=ErrorCause.FAILED, start=start
    ):
        logger.warning("run %s: %s", run_id, REQUEST_LOST)
