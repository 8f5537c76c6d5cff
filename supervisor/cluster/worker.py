"""`mcpx-hooks worker --cluster nats://…`: takes exec requests from the requests stream and
runs them with its own config, as many at once as `--concurrency` allows.

For each request it takes (its lease: JetStream's ack wait, renewed every third of it while
the run lasts, and heard by the gateways on the run's lease subject), the worker checks the
request as a single `serve` does (per-call hooks layered over its own files, the sandboxes
its `[service] sandboxes` allows; a refusal goes back to the exec socket as its error), runs
it, and publishes every frame, in order, to the run's subject with its `seq` in a header.
Each publish has an id (`runId.seq`), so one that must be sent again after a lost
connection is taken once; the first frame also requires the subject to be empty, so a run
is started by one worker only. A request whose run's subject holds anything is not run:
delivered again, its run was a lost worker's (a gateway ends it); else its gateway ended it
while it waited (its client cancelled it). The run's summary goes to the runs
stream when it starts and ends; the request is acknowledged once `end` is published.

A request runs only if a gateway signed it with the cluster key (`sealing.py`): one
unsigned, or signed with another key, is never run; the run it names gets `start`, an
`error` saying why (`sealing.UNSIGNED`) and `end` (only onto an empty subject: a run that
has begun is not touched), and a message that names no run is acknowledged, dropped and
logged. At start, a worker asks whether the other parts hold its key (`keycheck.py`).
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import trio

from ..core.convert import to_json
from ..core.effects import AnsweredBy
from ..core.errors import bug_summary
from ..core.frames import Control, ErrorCause, StartFrame, blank
from ..core.hooks import Config
from ..core.jsontext import wire_loads
from ..core.records import Record
from ..process.signals import serve_stop_signals
from ..run.runtime import Runtime
from ..run.scriptrun import Run, execute
from ..service.admission import Admitted, Caller, admit
from ..service.execrequest import parse_exec
from ..service.logredact import open_logged_runtime
from ..service.roots import release_cwd
from ..service.wire import Close, WireError, encode
from .access import INSECURE_WARNING, NatsAccess
from .ending import publish_ending
from .events import forward_events
from .jet import ClusterDown, Taken
from .keycheck import Part, check_key
from .link import Cluster, open_cluster, retry_s
from .mirror import MirrorJournal
from .names import (
    DEFAULT_LEASE_S,
    Header,
    Stream,
    control_subject,
    every,
    frames_subject,
    lease_subject,
    requests_subject,
    stream_specs,
)
from .publish import PUBLISH_S, Publisher
from .sealing import ClusterKey, named_run, unpack_request

logger = logging.getLogger("mcpx_hooks.worker")

#: A take waits this long for a request before it looks whether to stop.
TAKE_WAIT_S: Final = 1.0
#: Why the runs still going when a stopping worker's grace has passed are cancelled.
WORKER_STOPPING: Final = "the worker is shutting down"
#: The most of a gateway's `why` for a cancellation a run's `error` says.
WHY_MAX: Final = 200


@attrs.frozen(repr=False, eq=False)
class WorkerOptions(Record):
    url: str
    #: The cluster key (`--cluster-key-file`): requests are signed with it, secrets sealed.
    key: bytes = attrs.field(repr=False)
    access: NatsAccess = attrs.field(factory=NatsAccess)
    concurrency: int = 4
    lease_s: float = DEFAULT_LEASE_S
    #: Runs in progress may finish within this after the first stop signal.
    grace_s: float = 10.0
    cwd: str = "."
    environ: Mapping[str, str] = attrs.field(factory=dict)
    #: This machine's host name: a refusal of a request (its cwd) names the worker by it.
    host: str = attrs.field(factory=socket.gethostname)


class Worker:
    def __init__(self, runtime: Runtime, cluster: Cluster, options: WorkerOptions) -> None:
        self.runtime = runtime
        self.cluster = cluster
        self.options = options
        self.key = ClusterKey(options.key)
        self.stopping = False
        self.active: dict[str, Run] = {}
        self._taking = trio.CancelScope()
        self.publisher = Publisher(cluster, options.lease_s)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Takes and runs requests until `stopping`; then waits for the runs in progress."""
        slots = trio.Semaphore(self.options.concurrency)
        failures = 0  # takes failed in a row
        async with trio.open_nursery() as control:
            await control.start(self._serve_control)
            async with trio.open_nursery() as runs:
                task_status.started()
                while not self.stopping:
                    await slots.acquire()
                    taken = []
                    with self._taking:  # a stop ends the take, or the wait after a failed one
                        try:
                            taken = await self.cluster.take(
                                requests_subject(), self.options.lease_s, TAKE_WAIT_S
                            )
                            failures = 0
                        except ClusterDown as exc:
                            logger.warning("cannot take requests: %s", exc)
                            failures += 1
                            await trio.sleep(retry_s(failures))
                    self._taking = trio.CancelScope()  # (a scope is entered once)
                    if not taken:
                        slots.release()
                        continue
                    runs.start_soon(self._take, taken[0], slots)
            control.cancel_scope.cancel()

    def stop(self) -> None:
        """Takes no more requests (a take waiting now ends at once)."""
        self.stopping = True
        self._taking.cancel()

    def cancel_all(self) -> None:
        for run in list(self.active.values()):
            run.cancel(WORKER_STOPPING)

    async def _take(self, taken: Taken, slots: trio.Semaphore) -> None:
        try:
            await self._serve_request(taken)
        except* Exception as group:
            # A bug here must not come back with every delivery: the request is settled,
            # and its client told, unless its run had begun (then it has its `end`).
            logger.error("a request failed: %s", bug_summary(group))
            logger.debug("a request failed", exc_info=group)
            with trio.CancelScope(shield=True), trio.move_on_after(PUBLISH_S):
                await self._give_up(taken, bug_summary(group))
        finally:
            slots.release()

    async def _give_up(self, taken: Taken, why: str) -> None:
        try:
            run_id = named_run(taken.data)
            if run_id is not None and not await self.cluster.last(
                Stream.FRAMES, frames_subject(run_id)
            ):
                error = WireError(Close.TRY_AGAIN, f"the worker could not run the request: {why}")
                await self._refuse(run_id, error)
            await self.cluster.settle(taken.msg)
        except ClusterDown as exc:
            logger.warning("a failed request is not settled: %s", exc)

    async def _serve_request(self, taken: Taken) -> None:
        msg = taken.msg
        # Read, checked and unsealed in a worker thread, as the request is then parsed and
        # admitted (`_prepare`): up to a NATS message of JSON on the event loop held the
        # renewal of every lease this worker holds, and the frames of its other runs.
        unpacked = await trio.to_thread.run_sync(
            unpack_request, self.key, taken.data, taken.headers
        )
        run_id, text = unpacked.run_id, unpacked.text
        if run_id is None:
            logger.warning("a queued message that is no request, dropped")
            await self.cluster.settle(msg)
            return
        if text is None:
            logger.warning("run %s: not run: %s", run_id, unpacked.problem)
            await self._end_unsigned(run_id, unpacked.problem)
            await self.cluster.settle(msg)
            return
        # Begun or ended already: a lost worker's run (delivered again), one whose lease
        # lapsed while this worker did not hear (a stale delivery), or one its gateway ended
        # while it waited (cancelled): never run (its first frame is also published only
        # onto an empty subject, whatever happens).
        try:
            begun = await self.cluster.last(Stream.FRAMES, frames_subject(run_id))
        except ClusterDown as exc:  # not acknowledged: delivered again after the lease
            logger.warning("run %s: not run yet, its subject not looked at: %s", run_id, exc)
            return
        if begun:
            await self.cluster.settle(msg)
            return
        async with trio.open_nursery() as lease:
            lease.start_soon(self._keep_lease, msg, run_id)
            try:
                # Read once, in `unpack_request`, when it is an object at all.
                request = text if unpacked.request is None else unpacked.request
                run, config = await self._prepare(run_id, request)
            except WireError as exc:
                await self._refuse(run_id, exc)
            else:
                await self._run(run, config)
            lease.cancel_scope.cancel()
        await self.cluster.settle(msg)

    async def _end_unsigned(self, run_id: str, problem: str) -> None:
        """Ends a run whose request is not to be run (`start`, `error`, `end`), onto its
        subject only while it is empty: a run that has begun, another's, is left alone. Its
        cause is `failed` (`exec` exits 1): no hook refused it, the cluster could not trust
        the request (a gateway with another key, most likely)."""
        start = blank(StartFrame, argv=(), cwd="", sandbox="")
        journal = MirrorJournal(run_id, 1 << 16)
        ended = await publish_ending(
            self.cluster, journal, 0, problem, cause=ErrorCause.FAILED, start=start
        )
        if not ended:
            logger.warning("run %s had begun already: left as it is", run_id)

    async def _keep_lease(self, msg: Any, run_id: str) -> None:
        """Renews the lease every third of it, the first a third after the take: the ack
        wait began when the request was delivered, and the gateways count the lease from
        the run's summary at its claim (a renewal at once was two messages a run for none)."""
        while True:
            await trio.sleep(self.options.lease_s / 3)
            try:
                await self.cluster.renew(msg)
                await self.cluster.core_publish(lease_subject(run_id), b"")
            except ClusterDown as exc:
                logger.warning("run %s: lease not renewed: %s", run_id, exc)

    async def _prepare(self, run_id: str, text: str | dict[str, Any]) -> tuple[Run, Config]:
        """The run of an exec request, admitted as a single `serve` admits it
        (`admission.admit`): its cwd inside the worker's roots (`[service] roots`, else where
        it started), its per-call layers over the worker's own files, its sandboxes allowed."""
        options = self.options
        caller = Caller.worker(
            self.runtime.config, options.cwd, options.environ, run_id, options.host
        )
        admitted = await trio.to_thread.run_sync(_admitted, text, caller)
        try:
            run = self.runtime.new_run(admitted.request)
        except BaseException:
            await release_cwd(admitted.request)
            raise
        return run, admitted.config

    async def _refuse(self, run_id: str, error: WireError) -> None:
        headers: dict[str, str] = {
            Header.REFUSED: str(int(error.code)),
            Header.MSG_ID: f"{run_id}.refused",
            Header.LAST_SUBJECT_SEQ: "0",
        }
        line = encode(to_json(error.payload)).encode()
        await self.publisher.send([(frames_subject(run_id), line, headers)], run_id)

    async def _run(self, run: Run, config: Config) -> None:
        run_id = run.request.run_id
        self.active[run_id] = run
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.publisher.publish, run)
                await self._execute(run, config)
        finally:
            del self.active[run_id]
            await release_cwd(run.request)

    async def _execute(self, run: Run, config: Config) -> None:
        runtime = self.runtime
        try:
            await execute(run, config=config, spawner=runtime.spawner, bus=runtime.bus)
        except* Exception as group:
            logger.error("run %s failed: %s", run.request.run_id, bug_summary(group))
            run.journal.seal(f"internal error: {group.exceptions[0]!r}")
        run.journal.seal("internal error: the run ended without an end frame")

    async def _serve_control(self, task_status: trio.TaskStatus[None]) -> None:
        """`cancel` and `answer` for the runs in progress here, on one subscription for every
        run's control subject (none made and torn down a run); a message for a run not
        running here is another worker's. A listen cut short is taken up again."""
        started, failures = False, 0
        while True:
            async with self.cluster.listen(every(control_subject("-"))) as messages:
                if not started:
                    task_status.started()
                    started = True
                async for msg in messages:
                    failures = 0
                    run = self.active.get(str(msg.subject).rsplit(".", 1)[-1])
                    if run is not None:
                        _act(run, msg.data)
            failures += 1
            await trio.sleep(retry_s(failures))


def _act(run: Run, data: bytes) -> None:
    """A control message's `cancel` or `answer`, done on `run`; anything else is ignored."""
    try:
        message = wire_loads(data)
    except ValueError:
        return
    if not isinstance(message, dict):
        return
    if message.get("type") == Control.CANCEL:
        why = message.get("why")  # (a gateway's: its shutdown, its client gone)
        run.cancel(why[:WHY_MAX] if isinstance(why, str) else None)
    elif message.get("type") == Control.ANSWER:
        run.asks.answer(str(message.get("askId")), str(message.get("answer")), AnsweredBy.CLIENT)


async def run_worker(config: Config, options: WorkerOptions, ready: Callable[[], Any]) -> None:
    """`worker`: until SIGINT or SIGTERM. The first signal stops taking requests and lets
    the runs in progress finish within `grace_s`, then cancels them (each still ends with
    its `error`, suffix hooks and `end`, published); a second stops at once."""
    async with (
        open_logged_runtime(config) as runtime,
        open_cluster(options.url, "mcpx-hooks worker", options.access) as cluster,
    ):
        await cluster.ensure_streams(stream_specs(config))
        await cluster.check_permissions(Part.WORKER, options.access.user)
        if options.access.insecure:  # (once it starts: a refusal above is its one line)
            logger.warning("%s", INSECURE_WARNING)
        worker = Worker(runtime, cluster, options)
        worker.publisher.max_payload = await cluster.max_payload()
        worker.publisher.artifact_bytes = config.runs_artifact_bytes
        async with trio.open_nursery() as nursery:

            async def grace() -> None:
                await trio.sleep(options.grace_s)
                worker.cancel_all()

            def first(sig: signal.Signals) -> None:
                logger.warning(
                    "%s: taking no new requests; %d run(s) may finish within %g s",
                    sig.name,
                    len(worker.active),
                    options.grace_s,
                )
                worker.stop()
                nursery.start_soon(grace)

            def second(_: signal.Signals) -> None:
                logger.warning("second signal: stopping at once")

            async def serving(task_status: trio.TaskStatus[None]) -> None:
                await worker.serve(task_status=task_status)
                nursery.cancel_scope.cancel()

            await nursery.start(forward_events, cluster, runtime.bus)
            await nursery.start(check_key, cluster, worker.key, Part.WORKER)
            await nursery.start(serve_stop_signals, nursery.cancel_scope, first, second)
            await nursery.start(serving)
            ready()


def _admitted(text: str | dict[str, Any], caller: Caller) -> Admitted:
    """An exec request parsed and admitted, in a worker thread (as `/v1/exec` does both):
    on the event loop, parsing up to a NATS message of JSON stalled the worker's leases."""
    return admit(parse_exec(text), caller)
