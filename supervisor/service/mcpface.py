"""The MCP face: the supervisor as an MCP server (the official SDK's low-level `Server`), so
an MCP client's tool calls pass through the hooks, the sandbox and the run history.

It lists every tool of every configured tool server as `<server><separator><tool>` (`[mcp]
separator`, default `__`), each as the server wrote it (`mcplisted.py`), those its `[servers.x]
expose` globs match and its `hide` globs do not. A call to a tool not listed that way is an
unknown tool (-32602). A call fires the `call` point as a script's does (`run/callpoint.py`),
`when.client` being the client's name:

- a refusal (or any failure before an answer) is a tool result with `isError: true` and
  the reason as its text, so the agent reads why;
- an answer no hook replaced is passed on as the server gave it (every content item,
  `structuredContent`, `isError`, `_meta`);
- a value an `onSuccess` / `onError` hook applied: one shaped as a tool result (`content`,
  optional `structuredContent`, `isError`) is the result as it is; any other is the
  result's `structuredContent` (when it is an object) with its JSON as the text.

Around the call: a server whose tools differ from their pin is quarantined (`tools/pins.py`:
its tools hidden, its calls answered with why); a call past a server's or a tool's limits is
answered at once (`mcplimits.py`); the server's progress and log messages on the call go to
the client, and a hook's `ask` is put to the client as an elicitation when it can take one.
Its own tool `mcpx_exec` runs a script as `/v1/exec` does (`mcpexec.py`). The servers'
prompts and resources are relayed without hooks (`mcprelay.py`). One `Gateway` serves one
session (`serve`); its run is `mcpsession.SessionRun`.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from typing import Any, Final

import trio
from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from ..core.frames import WarningFrame, blank
from ..core.hooks import Config
from ..core.servers import ServerSpec, exposed_targets, unportable_names
from ..process.signals import serve_stop_signals
from ..run.runtime import Runtime
from ..tools.serverentry import ServerEntry, ServerFailing
from .logredact import open_logged_runtime
from .mcpcalls import ClientLevel, Relays, sdk_relays, tool_result
from .mcpexec import EXEC_TOOL, RunSlots, exec_tool, run_exec
from .mcpinvalid import explain_invalid_params
from .mcplimits import CallLimiter
from .mcplisted import (
    SHOWN_KEPT,
    add_tools,
    keep_listed,
    open_each,
    refuse_cursors,
    tell_changed,
)
from .mcpoutbox import Outbox
from .mcppins import SessionPins
from .mcpraw import RawCalls
from .mcprelay import Relay
from .mcpsession import SessionRun, client_name
from .mcpstdio import open_stdio
from .mcpwritten import answer_as_written, kept_as_written

logger = logging.getLogger("mcpx_hooks.mcp")

#: What a request before an accepted `initialize` is answered (MCP: the handshake comes
#: first; only a `ping` may come before it is done).
NOT_INITIALIZED: Final = "not initialized: send initialize first (and have it accepted)"
#: What an `initialize` after an accepted one is answered (-32600): a session has one.
ALREADY_INITIALIZED: Final = "already initialized: a session has one initialize"
_BEFORE_INITIALIZE: Final = frozenset({"initialize", "ping"})


class Gateway:
    """One MCP session: the tools it lists, its calls through the `call` point, its run."""

    def __init__(
        self,
        runtime: Runtime,
        served_from: str | None = None,
        slots: RunSlots | None = None,
        limiter: CallLimiter | None = None,
    ) -> None:
        self.runtime, self.config = runtime, runtime.config
        #: The service whose runs in progress `mcpx_exec` runs count among (None: `mcp`).
        self.slots = slots
        #: Where `mcpx_exec` runs are admitted from (their default root, by `serve`'s rule).
        self.served_from = served_from or os.getcwd()
        self.session: SessionRun | None = None
        self.relay = Relay(runtime)
        self.limiter = limiter or CallLimiter()  # (one service's sessions share one)
        self.pins = SessionPins()
        self._shown: dict[tuple[str, str], bool] = {}  # (server, tool): `expose` and not `hide`
        self._renames: dict[tuple[str, str], tuple[types.Tool, types.Tool]] = {}  # `add_tools`
        self._said: set[str] = set()
        self.level = ClientLevel()  # (`logging/setLevel`)
        self.client: ServerSession | None = None  # the SDK's session, from the handshake on
        self.raw: RawCalls | None = None  # the calls relayed around the SDK (`mcpraw.py`)
        #: What the client is told on its calls' way, sent by a task of `serve`'s.
        self.outbox = Outbox()

    def server(self) -> Server[Any]:
        version = str(importlib.import_module("mcpx_hooks").__version__)
        server: Server[Any] = Server(
            "mcpx-hooks",
            version=version,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_completion=self._complete,
        )
        if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            # The SDK's span around each request goes nowhere without an exporter: not made.
            server.middleware[:] = [m for m in server.middleware if not _sdk_span(m)]
        server.middleware.append(self._after_initialize)
        server.middleware.append(explain_invalid_params)
        server.middleware.append(refuse_cursors)
        server.middleware.append(answer_as_written)
        # Frames of `mcpx_exec` runs go as log messages: the capability, and its level.
        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._level)
        return server

    async def _level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self.level.set(params.level)
        return types.EmptyResult()

    async def serve(self, read: Any, write: Any) -> None:
        """Serves the session on `read` / `write` (streams of the SDK's `SessionMessage`)
        until the client closes it or the caller's scope is cancelled; then its run gets
        `result` and `end`."""
        server = self.server()
        # (`tell_changed`)
        told = NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
        try:
            async with trio.open_nursery() as nursery:
                if self.runtime.servers is not None:
                    nursery.start_soon(tell_changed, self.runtime.servers, lambda: self.client)
                nursery.start_soon(self.outbox.serve_outbox)
                await server.run(read, write, server.create_initialization_options(told))
                nursery.cancel_scope.cancel()
        finally:
            if self.raw is not None:
                self.raw.close()
            if self.session is not None:
                self.session.close()

    def _session(self, ctx: ServerRequestContext[Any, Any]) -> SessionRun:
        """The session's run, started at the first request that names the client."""
        if self.session is None:
            self.session = SessionRun(self.runtime, client_name(ctx))
        return self.session

    async def _after_initialize(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """The handshake's gate: until an `initialize` is accepted, every request but a
        `ping` is answered with an error, and notifications are dropped (the SDK's gate
        opens on a bare `notifications/initialized`). An `initialize` after an accepted one
        is refused (-32600, as the TypeScript SDK's HTTP transport refuses it): the SDK's
        server would answer it again and take its version and capabilities, mid-way."""
        if ctx.method == "initialize" and self.client is not None:
            raise MCPError(code=types.INVALID_REQUEST, message=ALREADY_INITIALIZED)
        if self.client is None and ctx.method not in _BEFORE_INITIALIZE:
            if ctx.method.startswith("notifications/"):
                return None
            raise MCPError(code=types.INVALID_PARAMS, message=NOT_INITIALIZED)
        result = await call_next(ctx)
        if ctx.method == "initialize":  # the handshake was accepted: the session starts
            self._session(ctx)
            self.client = ctx.session
        return result

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = self._session(ctx)
        manager = self.runtime.servers
        listed: dict[str, types.Tool] = {}
        if self.config.mcp_exec:
            listed[EXEC_TOOL] = exec_tool()
        specs = self.config.servers.values() if manager is not None else ()
        for spec, entry in await open_each(manager, specs, session.run_id):
            if isinstance(entry, ServerFailing):
                why = f"the tools of server {spec.name} are not listed: {entry}"
                session.journal.append(blank(WarningFrame, message=why))
                logger.warning("%s", session.journal.redactor.text(why))
                continue
            if await self._quarantined(spec, entry, session) is not None:
                continue  # its tools are hidden
            sep, renames = self.config.mcp_separator, self._renames
            names, left_out = add_tools(listed, spec, entry.tools, self.shows, sep, renames=renames)
            for odd in (unportable_names(names, spec.name), left_out):
                if odd is not None:
                    self._say(session, odd)
        return keep_listed(types.ListToolsResult(tools=list(listed.values())))

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return keep_listed(await self.relay.list_prompts(self._session(ctx).journal))

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        self._session(ctx)
        return await self.relay.get_prompt(params.name, params.arguments)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return keep_listed(await self.relay.list_resources(self._session(ctx).journal))

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        journal = self._session(ctx).journal
        return keep_listed(await self.relay.list_resource_templates(journal))

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await self.relay.read_resource(str(params.uri), self._session(ctx).journal)

    async def _complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        return await self.relay.complete(params, self._session(ctx).journal)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        session = self._session(ctx)
        if params.name == EXEC_TOOL and self.config.mcp_exec:
            args = params.arguments or {}
            return await run_exec(
                self.runtime,
                self.served_from,
                ctx,
                args,
                log_frames=self.level.hears("info"),
                slots=self.slots,
            )
        call_id = ctx.request_id if ctx.request_id is not None else session.counts.calls + 1
        relays = sdk_relays(ctx, self.outbox, self.level)
        meta = {k: v for k, v in (params.meta or {}).items() if k != "progress_token"}
        args = params.arguments or {}
        result = await self.call(session, call_id, params.name, args, relays, meta=meta)
        await self.outbox.wait_told()  # (its progress and log messages before its answer)
        return kept_as_written(result)

    async def call(
        self,
        session: SessionRun,
        call_id: Any,
        name: str,
        args: Mapping[str, Any],
        relays: Relays,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult:
        """The client's call `call_id` of the tool it knows as `name`, through the `call`
        point (`relays`: where what comes back on the way goes; `meta`: the client's own keys
        of its request's `_meta`, sent on with the call); raises `MCPError` (-32602) for a
        tool not listed."""
        server, tool = await self._target(name, session.run_id)
        spec = self.config.servers[server]
        manager = self.runtime.servers
        entry = manager.entries.get(spec) if manager is not None else None
        if entry is not None and entry.session is not None:
            quarantined = await self._quarantined(spec, entry, session)
            if quarantined is not None:
                return tool_result(session.not_made(quarantined))
        with self.limiter.take(spec, tool, name, trio.current_time()) as past_limit:
            if past_limit is not None:
                return tool_result(session.not_made(past_limit))
            outcome = await session.call(
                call_id,
                server,
                tool,
                dict(args),
                progress=relays.progress,
                log=relays.log,
                responder=relays.responder,
                meta=meta,
                by_client=relays.by_client,
            )
        return tool_result(outcome)

    async def _quarantined(
        self, spec: ServerSpec, entry: ServerEntry, session: SessionRun
    ) -> str | None:
        """Why `spec`'s server is quarantined (its tools differ from their pin, or it has none
        and must), else None; pinned now at its first use. What there is to say about it is
        said once: a `warning` frame in the session's run, and a line on stderr."""
        decided = await self.pins.decide(self.runtime.servers, spec, entry, session.run_id)
        for said in (decided.warning, decided.quarantined):
            if said is not None:
                self._say(session, said)
        return decided.quarantined

    def _say(self, session: SessionRun, said: str) -> None:
        """A `warning` frame in the session's run and a line on stderr, once."""
        if said not in self._said:
            self._said.add(said)
            session.journal.append(blank(WarningFrame, message=said))
            logger.warning("%s", session.journal.redactor.text(said))

    def settled(self, spec: ServerSpec, entry: ServerEntry) -> bool:
        """Whether `_quarantined` knows, without a wait, that `spec`'s server (with the tools
        `entry` lists) is not quarantined, and has said what it had to say about its pin."""
        decided = self.pins.known(spec, entry)
        return (
            decided is not None
            and decided.quarantined is None
            and (decided.warning is None or decided.warning in self._said)
        )

    def shows(self, spec: ServerSpec, tool: str) -> bool:
        shown = self._shown.get((spec.name, tool))
        if shown is None:
            if len(self._shown) >= SHOWN_KEPT:  # (a server renaming its tools at each listing)
                self._shown.clear()
            shown = self._shown[spec.name, tool] = spec.shows(tool)
        return shown

    async def _target(self, name: str, run_id: str) -> tuple[str, str]:
        """The (server, tool) an exposed `name` stands for; raises `MCPError` (-32602) for
        a tool not listed. A server that cannot start is not asked: the call fires and
        fails with its reason."""
        manager = self.runtime.servers
        specs = self.config.servers
        for server, tool in exposed_targets(name, specs, self.config.mcp_separator):
            spec = specs[server]
            if not self.shows(spec, tool) or manager is None:
                continue
            try:
                entry = await manager.open(spec, run_id=run_id)
            except ServerFailing:
                return server, tool
            if entry.tool(tool) is not None:
                return server, tool
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")


def _sdk_span(middleware: object) -> bool:
    return type(middleware).__name__ == "OpenTelemetryMiddleware"


async def serve_stdio(config: Config, read_fd: int, write_fd: int) -> None:
    """`mcpx-hooks mcp`: the runtime, and one session on `read_fd` / `write_fd` until the
    client closes it or a stop signal (SIGINT, SIGTERM) comes; then the session's run ends,
    and every tool server and hook is stopped and reaped."""
    async with open_logged_runtime(config) as runtime, trio.open_nursery() as nursery:
        await nursery.start(serve_stop_signals, nursery.cancel_scope)
        async with open_stdio(read_fd, write_fd) as (read, write):
            gateway = Gateway(runtime)
            gateway.outbox.patient = True  # (its servers' messages are this client's alone)
            gateway.raw = RawCalls(gateway, write, nursery)
            read.taker = gateway.raw.take
            await gateway.serve(read, write)
        nursery.cancel_scope.cancel()
