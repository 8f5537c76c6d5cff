"""The WebSocket service: runs streamed to many clients, losing nothing.

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
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketRequest

from ..config.loading import load_config
from ..core.errors import ConfigError, bug_summary
from ..core.events import EventKind
from ..core.frames import EndFrame, ErrorFrame, blank
from ..core.hooks import Config, Profile, SourceKind
from ..run.journal import RunJournal, UnknownRun
from ..run.runtime import Runtime, open_runtime
from ..run.scriptrun import DEFAULT_SCRIPT_TIMEOUT_MS, Run, RunRequest, execute
from .access import Refusal, check_access, normal_origin, own_origins
from .streams import Streams, Wake, complete
from .targets import (
    Endpoint,
    Target,
    check_from,
    check_query,
    parse_events,
    parse_from,
    parse_target,
    query_token,
)
from .wire import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    Close,
    ExecRequest,
    WireError,
    encode,
    parse_exec,
    sources,
)
from .wsconn import CLOSE_S, ServerConnection

logger = logging.getLogger("mcpx_hooks.server")


@attrs.frozen
class Limits:
    """Every bound the service keeps; each is a `serve` flag or a named default."""

    #: A client message larger than this is refused (1009).
    max_message_bytes: int = 1024 * 1024
    #: Admitted sockets (handshake done, token checked); past it the upgrade is refused (503).
    max_connections: int = 1024
    #: Sockets still in their handshake, not yet admitted. A new one past it drops the oldest,
    #: so stalled handshakes can never keep a client that completes its own out.
    max_pending: int = 512
    #: Admitted sockets that carry no run: `/v1/events`, `/v1/hooks`. Past it such an upgrade
    #: is refused (503): runs and their followers always have room.
    max_idle: int = 256
    #: An idle socket is pinged this often; one that has not answered by the next ping is
    #: gone, and is closed.
    ping_s: float = 30.0
    #: Runs in progress; past it a request is refused (1013, try again later).
    max_runs: int = 64
    #: A stream must complete its WebSocket handshake within this.
    handshake_s: float = 5.0
    #: An exec socket must send its request within this (4408).
    request_s: float = 30.0
    #: One message taking longer than this to send: the client is gone (aborted).
    send_stall_s: float = 60.0
    #: Shutdown: runs in progress may finish within this before they are cancelled.
    grace_s: float = 10.0
    #: Shutdown: once runs have ended, streams may send their last frames within this.
    drain_s: float = 5.0
    #: A message from the server holds frames up to about this many bytes (at least one).
    coalesce_bytes: int = 256 * 1024
    #: Events sent in one message at most.
    coalesce_events: int = 256
    #: Messages a second the streams of the whole service aim to stay under. A stream gets
    #: its next message no sooner than `streams / send_rate` seconds after its last one
    #: began, so what arrives meanwhile goes out together (see `Streams`). A message costs
    #: the server ~15 µs of write(2) here and a local client several times that to read.
    send_rate: float = 12_500.0


@attrs.frozen
class ServiceOptions:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: None: no token is asked for (`--no-auth`).
    token: str | None = None
    allow_origins: tuple[str, ...] = ()
    limits: Limits = Limits()
    #: The working directory of `serve`: the default `cwd` of a run.
    cwd: str = attrs.field(factory=os.getcwd)
    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))


@attrs.frozen
class Listening:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"


_SHUTTING_DOWN: Final = "the server is shutting down"
#: Endpoints whose sockets carry no run: `max_idle`. (An exec socket waits at most
#: `request_s` for its request, then carries its run.)
_IDLE: Final = frozenset({Endpoint.EVENTS, Endpoint.HOOKS})


class Service:
    """One listening service over a runtime. See the module docstring for the lifecycle."""

    def __init__(self, runtime: Runtime, options: ServiceOptions) -> None:
        self.runtime = runtime
        self.options = options
        self.limits = options.limits
        self.stopping = False
        self._stop = trio.Event()
        self._ids = itertools.count(1)
        self._origins: frozenset[str] = frozenset()
        self._open = 0
        self._open_changed = trio.Event()
        #: Connections still in their handshake, oldest first: the scope that ends each.
        self._pending: dict[int, trio.CancelScope] = {}
        self._admitted = 0
        self._idle = 0
        self._active: dict[str, Run] = {}
        self._runs_changed = trio.Event()
        self._wakes: weakref.WeakSet[Wake] = weakref.WeakSet()
        self.streams = Streams(
            send_rate=self.limits.send_rate,
            send_stall_s=self.limits.send_stall_s,
            message_bytes=self.limits.coalesce_bytes,
        )
        self._runs: trio.Nursery | None = None
        self._too_big = encode(
            WireError(
                Close.TOO_BIG,
                f"message over {self.limits.max_message_bytes} bytes; the socket is closed",
            ).to_json()
        )

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
        async with trio.open_nursery() as runs, trio.open_nursery() as conns:
            self._runs = runs
            accepting = trio.CancelScope()

            async def accept(task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
                with accepting:
                    await trio.serve_listeners(
                        self._handle, listeners, handler_nursery=conns, task_status=task_status
                    )

            await conns.start(accept)
            task_status.started(Listening(self.options.host, port))
            await self._stop.wait()
            accepting.cancel()
            await self._shut_down()
            conns.cancel_scope.cancel()

    async def _shut_down(self) -> None:
        self.stopping = True
        going = WireError(Close.GOING_AWAY, _SHUTTING_DOWN)
        for wake in list(self._wakes):
            if wake.idle:
                wake.set(going)
        with trio.move_on_after(self.limits.grace_s):
            await self._wait_runs()
        for run in list(self._active.values()):
            run.cancel()
        await self._wait_runs()  # suffix hooks and `end`, bounded by the hooks' timeouts
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

    async def _handle(self, stream: trio.SocketStream) -> None:
        """The boundary of one connection: whatever it raises ends it alone."""
        self._open += 1
        number = next(self._ids)
        try:
            async with trio.open_nursery() as nursery:
                conn = ServerConnection(
                    stream, max_message_size=self.limits.max_message_bytes, too_big=self._too_big
                )
                nursery.start_soon(conn.serve_reader)
                try:
                    await self._connection(conn, number)
                finally:
                    await conn.abort()
        except* Exception as group:
            logger.error("connection %d failed: %s", number, bug_summary(group))
            logger.debug("connection %d failed", number, exc_info=group)
        finally:
            self._open -= 1
            self._open_changed.set()
            self._open_changed = trio.Event()

    async def _connection(self, conn: ServerConnection, number: int) -> None:
        """One socket: its handshake within `handshake_s`, as one of at most `max_pending`
        (past it the oldest pending one is dropped: a client that completes its handshake is
        never kept out by ones that stall), then admitted or refused, then its endpoint."""
        if len(self._pending) >= self.limits.max_pending:
            oldest = next(iter(self._pending))
            self._pending.pop(oldest).cancel()
        request: WebSocketRequest | None = None
        with trio.CancelScope() as pending:
            self._pending[number] = pending
            try:
                with trio.move_on_after(self.limits.handshake_s):
                    request = await conn.wait_request()
            finally:
                self._pending.pop(number, None)
        if pending.cancelled_caught or request is None:
            return  # dropped, no handshake in time, or not a WebSocket request (answered 400)
        target = parse_target(request.path)
        refusal = self._admit(request, target)
        if refusal is not None or target is None:
            refusal = refusal or Refusal(404, f"no such endpoint: {request.path.split('?')[0]}")
            await _reject(request, refusal)
            return
        await request.accept()
        self._admitted += 1
        try:
            await self._admitted_connection(conn, number, target)
        finally:
            self._admitted -= 1

    async def _admitted_connection(
        self, conn: ServerConnection, number: int, target: Target
    ) -> None:
        bus = self.runtime.bus
        bus.publish(
            EventKind.CLIENT_CONNECTED,
            {"connection": number, "endpoint": target.endpoint.value, "remote": _peer(conn)},
        )
        code: int | None = None
        try:
            code = await self._endpoint(conn, target)
        finally:
            bus.publish(EventKind.CLIENT_CLOSED, {"connection": number, "code": code})

    def _admit(self, request: WebSocketRequest, target: Target | None) -> Refusal | None:
        if self.stopping:
            return Refusal(503, _SHUTTING_DOWN)
        refusal = check_access(
            request.headers,
            query_token(request.path),
            token=self.options.token,
            origins=self._origins,
        )
        if refusal is not None:
            return refusal
        retry = ((b"Retry-After", b"1"),)
        if self._admitted >= self.limits.max_connections:
            return Refusal(
                503, f"too many connections (the cap is {self.limits.max_connections})", retry
            )
        if target is not None and target.endpoint in _IDLE and self._idle >= self.limits.max_idle:
            return Refusal(
                503,
                f"too many sockets that carry no run (events, hooks; the cap is"
                f" {self.limits.max_idle})",
                retry,
            )
        return None

    async def _endpoint(self, conn: ServerConnection, target: Target) -> int | None:
        """Serves one accepted socket and closes it; the close code, None if aborted.
        A socket that carries no run counts against `max_idle` and is pinged every
        `ping_s`; one that does not answer by the next ping is gone (aborted)."""
        wake = Wake(idle=target.endpoint is not Endpoint.RUNS)
        self._wakes.add(wake)
        idle = target.endpoint in _IDLE
        self._idle += idle
        ending: WireError | None = None
        try:
            async with trio.open_nursery() as nursery:
                if idle:
                    nursery.start_soon(self._keep_alive, conn, wake)
                try:
                    ending = await self._route(conn, target, wake)
                except WireError as exc:
                    ending = exc
                except ConnectionClosed:
                    wake.client_gone()
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self._idle -= idle
        if wake.gone or conn.broken or ending is None:
            await conn.abort()
            return None
        if ending.code is not Close.NORMAL:
            await self._send_error(conn, ending)
        await conn.close(ending.code, ending.reason)
        return int(ending.code)

    async def _route(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        if target.endpoint is Endpoint.EXEC:
            return await self._exec(conn, target, wake)
        if target.endpoint is Endpoint.RUNS:
            return await self._follow(conn, target, wake)
        if target.endpoint is Endpoint.EVENTS:
            return await self._events(conn, target, wake)
        return await self._hooks(conn, target)

    async def _keep_alive(self, conn: ServerConnection, wake: Wake) -> None:
        """Pings an idle socket every `ping_s`; no pong by the next ping: the client is gone."""
        while True:
            await trio.sleep(self.limits.ping_s)
            with trio.move_on_after(self.limits.ping_s) as waiting:
                try:
                    await conn.ping()
                except ConnectionClosed:
                    return  # the stream hears of it itself
            if waiting.cancelled_caught:
                wake.client_gone()
                return

    async def _send_error(self, conn: ServerConnection, error: WireError) -> None:
        with contextlib.suppress(ConnectionClosed), trio.move_on_after(self.limits.send_stall_s):
            await conn.send_text(encode(error.to_json()))

    # ---- endpoints: each returns how to close (a WireError; NORMAL for a complete one) ----

    async def _hooks(self, conn: ServerConnection, target: Target) -> WireError | None:
        check_query(target)
        config = self.runtime.config
        message = {
            "type": "hooks",
            "hooks": [h.to_json() for h in config.hooks],
            "files": list(config.files),
        }
        return complete() if await self.streams.send(conn, encode(message)) else None

    async def _exec(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        check_query(target)
        with wake.waiting(), trio.move_on_after(self.limits.request_s) as timer:
            text = await conn.get_message()
        if wake.reason is not None:
            return wake.reason
        if timer.cancelled_caught:
            return WireError(
                Close.TIMEOUT, f"no request within {self.limits.request_s:g} s of the upgrade"
            )
        request = parse_exec(text)
        if self.stopping:
            return WireError(Close.GOING_AWAY, f"{_SHUTTING_DOWN}; no new runs")
        cwd = request.cwd or self.options.cwd
        if not await trio.Path(cwd).is_dir():
            return WireError(Close.BAD_REQUEST, f"cwd: no such directory: {cwd}")
        config = await self._config_for(request, cwd)
        profile = allowed_sandboxes(request, config)
        if len(self._active) >= self.limits.max_runs:
            return WireError(
                Close.TRY_AGAIN,
                f"too many runs in progress (the cap is {self.limits.max_runs}); try again later",
            )
        run = self.runtime.new_run(
            RunRequest(
                script=request.script,
                cwd=cwd,
                stdin=request.stdin,
                input=request.input,
                env=request.env,
                timeout_ms=request.timeout_ms or DEFAULT_SCRIPT_TIMEOUT_MS,
                autonomy=request.autonomy,
                sandbox=profile,
                sources=sources(config),
                # A client's cwd is its choice, not the operator's grant, unless it lies
                # where `serve` runs (docs/sandbox.md).
                cwd_granted=_within(cwd, self.options.cwd),
            )
        )
        self._start_run(run, config)
        wake.idle = False
        ending = await self.streams.stream_run(conn, run.journal, 0, wake, run=run)
        if request.cancel_on_disconnect and not run.journal.finished:
            run.cancel()
        return ending

    async def _follow(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        start = parse_from(target)
        assert target.run_id is not None
        try:
            journal = self.runtime.journals.get(target.run_id)
        except UnknownRun:
            raise WireError(
                Close.NOT_FOUND,
                f"no run {target.run_id!r} is retained (the server keeps the last "
                f"{self.runtime.journals.retain} runs)",
            ) from None
        check_from(start, len(journal))
        return await self.streams.stream_run(conn, journal, start, wake)

    async def _events(self, conn: ServerConnection, target: Target, wake: Wake) -> WireError | None:
        kinds, since = parse_events(target)
        bus = self.runtime.bus
        if since is not None and since > bus.next_seq:
            raise WireError(
                Close.OUT_OF_RANGE,
                f"since={since} was never published here (the next seq is {bus.next_seq})",
            )
        async with bus.subscribe(kinds=kinds, since=since) as sub:
            return await self.streams.stream_events(conn, sub, wake, self.limits.coalesce_events)

    # ---- runs ------------------------------------------------------------------------------

    async def _config_for(self, request: ExecRequest, cwd: str) -> Config:
        """The server's config, or for a request with per-call hooks or script lines, the
        server's files layered again under them (per-call hooks declare in the run's cwd)."""
        config = self.runtime.config
        if not request.per_call:
            return config
        load = partial(
            load_config,
            config.files,
            cwd=Path(cwd),
            environ=self.options.environ,
            per_call_hooks=request.hooks,
            script=request.script_lines,
            discover=False,
        )
        try:
            return await trio.to_thread.run_sync(load)
        except ConfigError as exc:
            raise WireError(
                Close.BAD_REQUEST,
                f"the per-call hooks or script are invalid: {exc.problems[0]}",
                [str(p) for p in exc.problems],
            ) from None

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
                    await execute(run, config=config, spawner=runtime.spawner, bus=runtime.bus)
                except* Exception as group:
                    logger.error("run %s failed: %s", run.request.run_id, bug_summary(group))
                    logger.debug("run %s failed", run.request.run_id, exc_info=group)
                    _seal(run.journal, f"internal error: {group.exceptions[0]!r}")
                _seal(run.journal, "internal error: the run ended without an end frame")
            finally:
                del self._active[run.request.run_id]
                self._runs_changed.set()
                self._runs_changed = trio.Event()


def _within(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies beneath it, symlinks resolved."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def allowed_sandboxes(request: ExecRequest, config: Config) -> Profile:
    """The run's profile, once the run's and every per-call hook's profile is one the
    server's `[service] sandboxes` allows; else `WireError` (4400) naming the allowed ones,
    and where each refused profile came from, before anything runs. A per-call hook may
    not raise `maxOutputBytes` past the server's own default either (its stdout is held in
    memory)."""
    allowed = config.service_sandboxes
    words = ", ".join(p.value for p in allowed) or "none at all"
    problems: list[str] = []
    profile = request.sandbox or config.script_sandbox
    if profile not in allowed:
        where = "the request's sandbox" if request.sandbox else "the server's [script] sandbox"
        problems.append(f'sandbox: the run\'s profile "{profile}" ({where}) is not allowed')
    cap = config.defaults.max_output_bytes
    for hook in config.hooks:
        if hook.source.kind is not SourceKind.PER_CALL:
            continue
        label = f"hooks[{hook.source.index}] ({hook.name})"
        if hook.sandbox not in allowed:
            declared = request.hooks[hook.source.index or 0].get("sandbox") is not None
            where = "declared" if declared else "the server's [defaults] sandbox"
            problems.append(f'{label}: the profile "{hook.sandbox}" ({where}) is not allowed')
        if hook.max_output_bytes > cap:
            problems.append(
                f"{label}: maxOutputBytes {hook.max_output_bytes} is over the server's {cap}"
            )
    if problems:
        problems.append(
            f"this server's requests may use the sandboxes: {words} ([service] sandboxes)"
        )
        raise WireError(Close.BAD_REQUEST, "; ".join(problems), problems)
    return profile


def _seal(journal: RunJournal, message: str) -> None:
    """Ends a journal a run left open, keeping the order: an `error` if no outcome yet."""
    if journal.finished:
        return
    if journal.outcome is None:
        journal.append(blank(ErrorFrame, message=message))
    journal.append(blank(EndFrame, exit_code=None, duration_ms=0))


def _peer(conn: ServerConnection) -> str:
    remote = conn.remote
    return str(remote) if isinstance(remote, str) else f"{remote.address}:{remote.port}"


async def _reject(request: WebSocketRequest, refusal: Refusal) -> None:
    body = encode({"type": "error", "code": refusal.status, "message": refusal.message})
    headers = [(b"Content-Type", b"application/json"), *refusal.headers]
    with contextlib.suppress(ConnectionClosed):
        await request.reject(refusal.status, extra_headers=headers, body=body.encode())


# ---- `mcpx-hooks serve` --------------------------------------------------------------------


async def run_service(
    config: Config, options: ServiceOptions, ready: Callable[[Listening], Any]
) -> None:
    """`serve`: the runtime and the service until SIGINT or SIGTERM. The first signal shuts
    down in two phases (see `Service`); a second one stops at once. `ready` is called once
    the socket is listening, and only then."""
    async with open_runtime(config) as runtime:
        service = Service(runtime, options)
        # Taken before listening and kept to the end: a signal is never the default action.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def serving(task_status: trio.TaskStatus[Listening]) -> None:
                    await service.serve(task_status=task_status)
                    nursery.cancel_scope.cancel()

                async def on_signals() -> None:
                    async for signum in signals:
                        if service.stop_requested:
                            logger.warning("second signal: stopping at once")
                            nursery.cancel_scope.cancel()
                            return
                        logger.warning(
                            "%s: no new connections; %d run(s) may finish within %g s",
                            signal.Signals(signum).name,
                            service.runs_in_progress,
                            options.limits.grace_s,
                        )
                        service.stop()

                nursery.start_soon(on_signals)
                ready(await nursery.start(serving))
