"""The service: runs streamed to many WebSocket clients, losing nothing, and plain HTTP on
the same port.

`Service.serve` listens, answers each connection in its own task and returns once a
`Service.stop()` shutdown has finished: it stops accepting, lets the runs in progress finish
within `Limits.grace_s`, then cancels the rest (each still sends its `error` "cancelled", its
suffix hooks and its `end`), lets the streams send their last frames within `Limits.drain_s`,
and closes what is left with 1001. `run_service` wraps that for `mcpx-hooks serve`: signals,
readiness, and the runtime (spawner, bus, observers) under it.

Every connection reads at its own pace (`streams.py`): a run's stream sends what is waiting
in its journal as one message, and while it keeps up, the run's broadcaster writes each new
message once for all such clients (`broadcast.py`). An exception in one connection's handler
is logged and ends that connection only.

Each accepted socket is a `ServerConnection` (h11 and wsproto under a thin trio layer): its
request within `Limits.handshake_s`, then a plain HTTP answer (`routes.py`; `/mcp` is MCP's
HTTP transport, `mcphttp.py`), a refused upgrade, or the upgrade and its endpoint (`endpoints.py`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from ..core.errors import bug_summary
from ..core.events import EventKind
from ..core.hooks import Config
from ..process.signals import serve_stop_signals
from ..run.runtime import Runtime
from ..run.scriptrun import Run
from . import routes
from .accepting import Handshakes, serve_accepting
from .access import Refusal, check_access, normal_origin, own_origins, server_names
from .connection import CLOSE_S, ServerConnection
from .endpoints import SHUTTING_DOWN, Endpoints
from .hooksanswer import HooksAnswers
from .logredact import open_logged_runtime
from .mcphttp import McpHttp
from .options import Limits, Listening, ServiceOptions
from .plain import serve_plain
from .protocolevents import Request
from .roots import release_cwd
from .seats import Seat, Seats
from .streams import Streams, Wake, keep_alive
from .targets import TAKES_MESSAGES, Endpoint, Target, parse_target, query_tokens
from .unfinished import Unfinished
from .wire import Close, ConnectionClosed, WireError

__all__ = ["Limits", "Listening", "Service", "ServiceOptions", "run_service"]

logger = logging.getLogger("mcpx_hooks.server")
#: What the log says of runs a stop's grace left, once cancelled: why the stop takes longer.
_ON = "their suffix hooks still run, each within its timeoutMs; a second signal stops them now"


class Service(Endpoints):
    """One listening service over a runtime. See the module docstring for the lifecycle."""

    #: How long a stop waits for the cancelled runs' `end`: its own runs' suffix hooks are
    #: bounded by their timeouts (a gateway's are on workers, past a NATS that may be gone).
    cancelled_s: float = math.inf
    after_grace: str = _ON  # (what the log says of them meanwhile)

    def __init__(self, runtime: Runtime, options: ServiceOptions) -> None:
        self.runtime = runtime
        self.options = options
        self.limits = options.limits
        if runtime.recorder is not None:
            # Said once: at the start when the history could not be opened, or when it fails.
            if runtime.recorder.fault is not None:
                logger.warning("%s", runtime.recorder.not_kept())
            runtime.recorder.on_fault = partial(logger.warning, "%s")
            # (a run that ended before the history failed)
            runtime.recorder.on_unsaid = partial(logger.warning, "run %s: %s")
        self.stopping = False
        self._stop = trio.Event()
        self._origins: frozenset[str] = frozenset()
        #: The names a request's `Host` may give a server without a token; None: any.
        self._names: frozenset[str] | None = None
        self._open = 0
        self._open_changed = trio.Event()
        self._handshakes = Handshakes(self.limits.max_pending)
        self.seats = Seats(self.limits.max_connections, self.limits.max_idle)
        self._active: dict[str, Run] = {}
        self._runs_changed = trio.Event()
        self._wakes: weakref.WeakSet[Wake] = weakref.WeakSet()
        self.streams = Streams(
            send_rate=self.limits.send_rate,
            send_stall_s=self.limits.send_stall_s,
            message_bytes=self.limits.coalesce_bytes,
        )
        self._runs: trio.Nursery | None = None
        self.route_state: routes.RouteState = runtime.journals  # a gateway's: the cluster's
        limits = self.limits
        self.mcp = McpHttp(
            runtime, options.cwd, self, max_body=limits.max_message_bytes, body_s=limits.handshake_s
        )
        said = f"message over {limits.max_message_bytes} bytes (--max-message-bytes): send less"
        self._too_big = WireError(Close.TOO_BIG, said).text
        #: What every connection's unfinished message or body holds, together.
        self.unfinished = Unfinished(limits.max_unfinished_bytes)
        self.hooks_answers = HooksAnswers()

    @property
    def runs_in_progress(self) -> int:
        return len(self._active)

    @property
    def connections(self) -> int:
        return self._open

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Starts the shutdown (idempotent); `serve` returns when it is complete."""
        self._stop.set()

    async def serve(
        self, *, task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listens on `options.host:port`, reports `Listening` once accepting, and returns
        when a `stop()` has shut everything down. Cancelled, it stops at once: runs are cut
        short and sockets aborted."""
        listeners = await trio.open_tcp_listeners(self.options.port, host=self.options.host)
        port = listeners[0].socket.getsockname()[1]
        self._origins = own_origins(self.options.host, port) | {
            normal_origin(o) for o in self.options.allow_origins
        }
        self._names = server_names(self._origins) if self.options.token is None else None
        async with trio.open_nursery() as runs, trio.open_nursery() as conns:
            self._runs = runs
            await runs.start(self.mcp.serve)
            accepting = trio.CancelScope()

            async def accept(task_status: trio.TaskStatus[None]) -> None:
                with accepting:
                    # (what a full descriptor table takes: `accepting.py`)
                    room = lambda: self._handshakes.make_room(self._open_changed)  # noqa: E731
                    await serve_accepting(
                        listeners, self._handle, conns, room, task_status=task_status
                    )

            await conns.start(accept)
            task_status.started(Listening(self.options.host, port))
            if self.runtime.config.servers:  # (once listening: the start line goes first)
                runs.start_soon(self.mcp.preload)
            await self._stop.wait()
            accepting.cancel()
            await self._shut_down()
            conns.cancel_scope.cancel()

    async def serve_until_signalled(
        self, nursery: trio.Nursery, ready: Callable[[Listening], Any]
    ) -> None:
        """Serves in `nursery` until SIGINT or SIGTERM: the first shuts down in two phases
        (`stop`), a second cancels `nursery`. `ready` is called once the socket listens."""

        def first(sig: signal.Signals) -> None:
            said = (sig.name, self.runs_in_progress, self.options.limits.grace_s)
            logger.warning("%s: no new connections; %d run(s) may finish within %g s", *said)
            self.stop()

        def second(_: signal.Signals) -> None:
            logger.warning("second signal: stopping at once")
            for run in list(self._active.values()):  # (suffix hooks run shielded: killed now)
                run.ending_scope.cancel()

        async def serving(task_status: trio.TaskStatus[Listening]) -> None:
            await self.serve(task_status=task_status)
            nursery.cancel_scope.cancel()

        # Taken before listening: from then on a signal is never the default action.
        await nursery.start(serve_stop_signals, nursery.cancel_scope, first, second)
        ready(await nursery.start(serving))

    async def _shut_down(self) -> None:
        self.stopping = True
        going = WireError(Close.GOING_AWAY, SHUTTING_DOWN)
        for wake in list(self._wakes):
            if wake.idle:
                wake.set(going)
        await self.mcp.close()  # each session's run: `result` and `end`
        with trio.move_on_after(self.limits.grace_s):
            await self._wait_runs()
        for run in list(self._active.values()):
            run.cancel(SHUTTING_DOWN)
        if left := len(self._active):  # (an operator waiting on a stop should know why)
            logger.warning("%d run(s) cancelled after the grace; %s", left, self.after_grace)
        with trio.move_on_after(self.cancelled_s):
            await self._wait_runs()  # suffix hooks and `end`, bounded by the hooks' timeouts
        self._leave_going(list(self._wakes), going, self.cancelled_s)
        with trio.move_on_after(self.limits.drain_s):
            await self._wait_connections()
        for wake in list(self._wakes):
            wake.set(going)
        with trio.move_on_after(CLOSE_S + 1):
            await self._wait_connections()

    async def _wait_runs(self) -> None:
        while self._active:
            await self._runs_changed.wait()

    async def _wait_connections(self) -> None:
        while self._open:
            await self._open_changed.wait()

    # ---- one connection ------------------------------------------------------------------

    async def _handle(self, stream: trio.SocketStream, number: int) -> None:
        """The boundary of one connection (`number`: its place in the order the connections
        were accepted): whatever it raises ends it alone."""
        self._open += 1
        try:
            async with trio.open_nursery() as nursery:
                conn = ServerConnection(
                    stream,
                    max_message_size=self.limits.max_message_bytes,
                    too_big=self._too_big,
                    stall_s=self.limits.send_stall_s,
                    unfinished=self.unfinished,
                    message_s=self.limits.message_s,
                )
                nursery.start_soon(conn.serve_reader)
                try:  # (its requests in turn while the client pipelines plain ones)
                    while await self._connection(conn, number) and conn.next_request():
                        pass
                finally:
                    conn.drop()
        except* Exception as group:
            logger.error("connection %d failed: %s", number, bug_summary(group))
            logger.debug("connection %d failed", number, exc_info=group)
        finally:
            self._open -= 1
            self._open_changed.set()
            self._open_changed = trio.Event()

    async def _connection(self, conn: ServerConnection, number: int) -> bool:
        """One request: its head within `handshake_s`, as one of at most `max_pending`
        (past it the oldest pending one is dropped: a client that completes its handshake is
        never kept out by ones that stall), admitted or refused, then its endpoint. True
        for a plain request answered (another may follow)."""
        request: Request | None = None
        with self._handshakes.pending(number, self.limits.handshake_s) as pending:
            request = await conn.wait_request()
        cut = pending.scope.cancelled_caught
        late = cut and not pending.dropped
        # A slow head is told so; a socket opened ahead (a browser's) and unused, not.
        if late and conn.protocol.head.begun:
            said = f"the request head did not come within {self.limits.handshake_s:g} s"
            conn.protocol.refuse(408, said)
            with trio.move_on_after(CLOSE_S), contextlib.suppress(ConnectionClosed):
                await conn.write_answer(conn.protocol.data_to_send())
        if (cut and pending.dropped) or request is None:
            return False  # dropped, no request in time, or a malformed one (answered 400)
        if not request.websocket:
            await serve_plain(
                conn,
                request,
                seats=self.seats,
                token=self.options.token,
                origins=self._origins,
                names=self._names,
                stopping=self.stopping,
                state=self.route_state,
                mcp=self.mcp,
            )
            return True
        target = parse_target(request.target)
        seat = self._admit(request, target)
        if isinstance(seat, Refusal):
            answer = routes.refused(seat)
            await conn.respond(answer.status, answer.body, answer.headers)
            return False
        assert target is not None  # a seat is only ever for an endpoint
        try:
            try:
                frame = await self.answer_at_upgrade(target)
                await conn.accept(target.endpoint in TAKES_MESSAGES, frame)
            except ConnectionClosed:
                return False  # gone before its 101 was written
            await self._admitted_connection(conn, number, target, seat)
        finally:
            seat.give_back()
        return False

    async def _admitted_connection(
        self, conn: ServerConnection, number: int, target: Target, seat: Seat
    ) -> None:
        bus = self.runtime.bus
        bus.publish(
            EventKind.CLIENT_CONNECTED,
            {"connection": number, "endpoint": target.endpoint.value, "remote": conn.remote},
        )
        code: int | None = None
        try:
            code = await self._endpoint(conn, target, seat)
        finally:
            bus.publish(EventKind.CLIENT_CLOSED, {"connection": number, "code": code})

    def _admit(self, request: Request, target: Target | None) -> Seat | Refusal:
        """The socket's seat (`seats.py`), taken now, or why it is refused."""
        if self.stopping:
            return Refusal(503, SHUTTING_DOWN)
        refusal = check_access(
            request.headers,
            query_tokens(request.target),
            token=self.options.token,
            origins=self._origins,
            names=self._names,
        )
        if refusal is not None:
            return refusal
        if target is None:
            return Refusal(404, f"no such endpoint: {request.target.split('?')[0]}")
        return self.seats.take(target.endpoint)

    async def _endpoint(self, conn: ServerConnection, target: Target, seat: Seat) -> int | None:
        """Serves one accepted socket and closes it; the close code, None if aborted.
        Every socket is pinged every `ping_s` (`keep_alive`): one that does not answer is
        gone (aborted), a run's follower too, however quiet its run. A socket that carries
        no run counts against `max_idle` as well."""
        wake = Wake(idle=target.endpoint is not Endpoint.RUNS)
        self._wakes.add(wake)
        ending: WireError | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    keep_alive, conn, wake, self.limits.ping_s, self.limits.send_stall_s
                )
                try:
                    ending = await self._route(conn, target, wake)
                except WireError as exc:
                    ending = exc
                except ConnectionClosed:
                    wake.client_gone()
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            seat.leave_idle()
        if wake.gone or conn.broken or ending is None:
            return await conn.abort()  # (the client's close code, when it closed first)
        said = ending.text if ending.code is not Close.NORMAL else None
        await conn.close(ending.code, ending.reason, said)
        return int(ending.code)

    async def _route(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        if target.endpoint is Endpoint.EXEC:
            return await self._exec(conn, target, wake)
        if target.endpoint is Endpoint.RUNS:
            return await self._follow(conn, target, wake)
        if target.endpoint is Endpoint.EVENTS:
            return await self._events(conn, target, wake)
        return await self._hooks(conn, target)

    # ---- runs ------------------------------------------------------------------------------

    def _start_run(self, run: Run, config: Config) -> None:
        assert self._runs is not None
        self._active[run.request.run_id] = run
        self._runs.start_soon(self._execute, run, config)

    async def _execute(self, run: Run, config: Config) -> None:
        """One run and its broadcaster, which returns within a round of the run's `end`.
        The boundary of the run: a bug in it ends it with `error` and `end`, nothing else."""
        runtime = self.runtime
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.streams.serve_broadcaster, run.journal)
            try:
                try:
                    await runtime.execute(run, config)
                except* Exception as group:
                    logger.error("run %s failed: %s", run.request.run_id, bug_summary(group))
                    logger.debug("run %s failed", run.request.run_id, exc_info=group)
                    run.journal.seal(f"internal error: {group.exceptions[0]!r}")
                run.journal.seal("internal error: the run ended without an end frame")
            finally:
                self._forget_run(run)
                await release_cwd(run.request)


async def run_service(
    config: Config, options: ServiceOptions, ready: Callable[[Listening], Any]
) -> None:
    """`serve`: the runtime and the service until signalled (`serve_until_signalled`)."""
    async with open_logged_runtime(config) as runtime:
        service = Service(runtime, options)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.mcp.freeze_once_loaded)
            await service.serve_until_signalled(nursery, ready)
