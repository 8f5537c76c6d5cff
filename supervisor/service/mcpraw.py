"""An MCP client's tool calls taken before the SDK's server reads them (`mcpx-hooks mcp`
on stdio, a client speaking a revision of the handshake era): the SDK's request machinery
(a task, a memory stream, its middleware, its models both ways) is not on their way.

A call no hook can touch is relayed as a line, as a byte relay would, with the ids swapped,
when all of these hold:

- the name is a tool the gateway lists: shown, its server running on a child's pipes (its
  `RawChannel`) and speaking the client's revision, not quarantined (its pin decided, what
  it had to say said); the tool declares no `outputSchema` (the SDK's client checks a result
  against one); no `call` hook fires for it; neither it nor its server has call limits;
- the request is plain (`mcpcalls.plain_call`): an `id`, `name`, `arguments` (an object, or
  none), a `_meta` object (or none) whose `progressToken` is a number or a string; strict JSON;
- its line, with the gateway's own id, goes whole onto the server's stdin at once.

It is written as the SDK's client would write it, with an id of the channel's
(`mcpx-relay-<n>`) and the client's `_meta` (its progress token, if any, made that id). Its
answer comes back through the channel, read as the SDK's client reads a tool result (or the
error the call point gives for one that is not, or for a JSON-RPC error); its `call` frame
is written as the call point writes an unhooked call's; then the answer goes to the client
under its id, as the server wrote it, with the server's progress (its token) and log
messages before it. A cancellation from the client is carried to the server, and the call is
never answered (as the SDK's server does): its `call` frame says the client cancelled it.
Past `callTimeoutMs` it is cancelled on the server and answered with why (the server's stdout
ended first: with why its life ended; the session ended first: its `call` frame says so).

Any other plain call (a hook fires for it, its server is not running yet, limits) is served
through the call point (`Gateway.call`) in a task of its own, its progress, log messages and
answer written as lines (`mcpcalls.answer_result`); the client's cancellation cancels the
task (a stop signal's is the session's end). A call whose hooks may ask, and `mcpx_exec`, are
the SDK's (to ask the client); one taken is unanswered till answered (`ClientWriter.asked`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import pydantic
import trio
from mcp import types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..core.records import Record
from ..core.servers import ServerSpec, exposed_targets
from ..run.callpoint import (
    Call,
    CallOutcome,
    EgressMark,
    answer_outcome,
    destructive_hint,
    too_slow,
)
from ..tools.jsonlines import json_line
from ..tools.servers import done_using, error_answer, gone_reason, not_a_result, strict_json
from .mcpcalls import (
    ClientCall,
    ClientLevel,
    Relays,
    answer_result,
    error_result,
    json_value,
    line_relays,
    plain_call,
)
from .mcpexec import EXEC_TOOL
from .mcplimits import unlimited
from .mcpnotes import PROGRESS_TOKEN
from .mcpwriter import ClientWriter

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from ..core.hooks import Config
    from ..run.runtime import Runtime
    from ..tools.serverentry import LogHearer, ServerEntry
    from .mcpsession import SessionRun

#: The kind in the ids of relayed calls on a server's pipe (`RawChannel.new_id`).
RELAYED: Final = "relay"
_CALL: Final = b'"tools/call"'
_CANCELLED: Final = b'"notifications/cancelled"'


class Face(Protocol):
    """What a relay asks of the gateway it relays for (`mcpface.Gateway`)."""

    config: Config
    runtime: Runtime
    session: SessionRun | None
    client: ServerSession | None  # the SDK's session with the client, from its handshake on
    level: ClientLevel  # the log messages the client hears

    def shows(self, spec: ServerSpec, tool: str) -> bool: ...

    async def call(
        self,
        session: SessionRun,
        call_id: Any,
        name: str,
        args: Mapping[str, Any],
        relays: Relays,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult: ...

    def settled(self, spec: ServerSpec, entry: ServerEntry) -> bool: ...


class RawCalls:
    """The relayed calls of one session of `gateway`, answered on `writer`; the tasks they
    need (their deadlines, the wait for a gone server's reason) run in `nursery`."""

    def __init__(self, gateway: Face, writer: ClientWriter, nursery: trio.Nursery) -> None:
        self._gateway = gateway
        self._writer = writer
        self._nursery = nursery
        #: The calls relayed, and those served through the call point in a task of their own,
        #: by the client's id as the SDK's server keys it (`coerce_request_id`: "7" is 7).
        self._calls: dict[types.RequestId, RawCall] = {}
        self._served: dict[types.RequestId, trio.CancelScope] = {}
        self._soonest = math.inf
        self._wake = trio.Event()
        self._closed = False
        nursery.start_soon(self._deadlines)

    async def take(self, line: bytes) -> bool:
        """Whether the client's `line` was taken here (a call, or a call's cancellation)."""
        if self._closed:
            return False
        if _CALL in line and self._start(line):
            return True
        if (self._calls or self._served) and _CANCELLED in line:
            return await self._cancel(line)
        return False

    def close(self) -> None:
        """The session ends (its run closes next): each call in flight is cancelled on its
        server, its `call` frame saying so; nothing more is answered."""
        self._closed = True
        for scope in self._served.values():
            scope.cancel()
        for call in list(self._calls.values()):
            if self._end(call, cancel=True):
                hint = destructive_hint(call.entry, call.call.tool)
                call.session.cancelled(call.call, call.started, hint, ended=True)

    def _start(self, line: bytes) -> bool:
        request = plain_call(line)
        session, client = self._gateway.session, self._gateway.client
        if request is None or session is None or client is None:
            return False
        if coerce_request_id(request.id) in self._calls.keys() | self._served.keys():
            return False  # (the SDK's server says what it says of an id in use)
        if client.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return False
        if request.name == EXEC_TOOL and self._gateway.config.mcp_exec:
            return False
        found = self._target(request.name, client.protocol_version)
        if found is not None and not session.hooked(found[0].name, found[1]):
            return self._relay(session, request, *found)
        return self._serve_soon(session, request)

    def _serve_soon(self, session: SessionRun, request: ClientCall) -> bool:
        """Serves the call through the call point in a task of its own; False for one whose
        hooks may ask (the question goes through the SDK's request context)."""
        config = self._gateway.config
        for server, tool in exposed_targets(request.name, config.servers, config.mcp_separator):
            if session.may_ask(server, tool):
                return False
        scope = self._served[coerce_request_id(request.id)] = trio.CancelScope()
        self._nursery.start_soon(self._serve, scope, session, request)
        self._writer.asked(request.id)
        return True

    async def _serve(
        self, scope: trio.CancelScope, session: SessionRun, request: ClientCall
    ) -> None:
        cid = request.id
        failed: types.JSONRPCError | None = None
        result: types.CallToolResult | None = None
        with scope:
            try:
                relays = line_relays(self._writer, request.token, self._gateway.level)
                by_client = lambda: scope.cancel_called and not self._closed  # noqa: E731
                relays = attrs.evolve(relays, by_client=by_client)
                result = await self._gateway.call(
                    session, cid, request.name, request.args, relays, meta=request.meta
                )
            except MCPError as exc:  # a tool not listed
                failed = types.JSONRPCError(jsonrpc="2.0", id=cid, error=exc.error)
            except Exception as exc:  # (as the SDK's server answers a handler's failure)
                said = types.ErrorData(code=types.INTERNAL_ERROR, message=str(exc) or repr(exc))
                failed = types.JSONRPCError(jsonrpc="2.0", id=cid, error=said)
            finally:
                del self._served[coerce_request_id(cid)]
        if failed is not None:
            await self._writer.send(SessionMessage(failed))
        elif result is not None:
            await answer_result(self._writer, cid, result)

    def _relay(
        self,
        session: SessionRun,
        request: ClientCall,
        spec: ServerSpec,
        tool: str,
        entry: ServerEntry,
    ) -> bool:
        """Relays the call as a line (the module's rules hold for it); False when the line
        cannot go to the server's stdin at once."""
        cid, args, token = request.id, request.args, request.token
        if entry.raw is None:
            return False
        rid = entry.raw.new_id(RELAYED)
        params: dict[str, Any] = {"name": tool, "arguments": args}
        meta = request.meta if token is None else {**request.meta, PROGRESS_TOKEN: rid}
        if meta:  # the client's own, its progress token made the channel's id
            params["_meta"] = meta
        request_line = json_line(
            {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        )
        if request_line is None:
            return False
        call = RawCall(
            self,
            Call(cid, spec.name, tool, args, session.client),
            rid,
            token,
            spec,
            entry,
            session,
            time.perf_counter(),
            session.egress_mark(spec.name),
            trio.current_time() + spec.call_timeout_ms / 1000,
            line_relays(self._writer, None, self._gateway.level).log,
        )
        if not entry.raw.send_nowait(rid, request_line, call):
            return False
        self._calls[coerce_request_id(cid)] = call
        self._writer.asked(cid)
        entry.in_use += 1
        entry.poke()
        entry.log_hearers.append(call.log)
        if call.deadline < self._soonest:
            self._wake.set()
        return True

    def _target(self, name: str, client: str) -> tuple[ServerSpec, str, ServerEntry] | None:
        """The (server, tool, its entry) `name` stands for when its call may be relayed as a
        line (the client speaking revision `client`)."""
        gateway = self._gateway
        config, manager = gateway.config, gateway.runtime.servers
        if manager is None:
            return None
        for server, tool in exposed_targets(name, config.servers, config.mcp_separator):
            spec = config.servers[server]
            if not gateway.shows(spec, tool):
                continue
            entry = manager.entries.get(spec)
            if entry is None or entry.session is None or entry.state != "running":
                return None  # the SDK's way: it starts the server, or says why it cannot
            listed = entry.tool(tool)
            if listed is None:
                continue
            relayable = (
                entry.raw is not None
                and entry.session.protocol_version == client
                and listed.output_schema is None
                and unlimited(spec, tool)
                and gateway.settled(spec, entry)
            )
            return (spec, tool, entry) if relayable else None
        return None

    async def _cancel(self, line: bytes) -> bool:
        message = json_value(line)
        if not isinstance(message, dict) or message.get("method") != "notifications/cancelled":
            return False
        params = message.get("params")
        rid = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            return False
        rid = coerce_request_id(rid)
        if (served := self._served.get(rid)) is not None:
            served.cancel()
        elif (call := self._calls.get(rid)) is not None and self._end(call, cancel=True):
            hint = destructive_hint(call.entry, call.call.tool)
            call.session.cancelled(call.call, call.started, hint)
        else:
            return False
        self._writer.dropped(rid)  # (a cancelled call is never answered)
        return True

    def _end(self, call: RawCall, *, cancel: bool = False) -> bool:
        """`call` ends now (`cancel`: given up, its server told): False if it had already."""
        if self._calls.get(key := coerce_request_id(call.call.id)) is not call:
            return False
        del self._calls[key]
        if cancel and call.entry.raw is not None:
            call.entry.raw.cancel(call.rid)
        call.entry.log_hearers.remove(call.log)
        done_using(call.entry)
        return True

    async def _finish(
        self, call: RawCall, outcome: CallOutcome, destructive: bool | None, raw: Any = None
    ) -> None:
        """`call`'s frames, and its answer to the client: `raw` (the server's result, as it
        wrote it) when it is given, else the tool result of `outcome`."""
        call.session.relayed(call.call, outcome, destructive, call.started, call.mark)
        cid = call.call.id
        line = None if raw is None else json_line({"jsonrpc": "2.0", "id": cid, "result": raw})
        if line is not None:
            await self._writer.send_line(line, answers=cid)
            return
        result = outcome.result if outcome.result is not None else error_result(outcome.error)
        await answer_result(self._writer, cid, result)

    async def _deadlines(self) -> None:
        """Ends each call past its server's `callTimeoutMs`: cancelled on the server, and
        answered with why."""
        while True:
            self._soonest = min((c.deadline for c in self._calls.values()), default=math.inf)
            with trio.move_on_at(self._soonest):
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            for call in [c for c in self._calls.values() if c.deadline <= now]:
                if self._end(call, cancel=True):
                    why = too_slow(call.spec.call_timeout_ms)
                    await self._finish(call, CallOutcome(False, error=why), None)


@attrs.define(repr=False, eq=False)
class RawCall(Record):
    """One relayed call: the client's (`call.id`), the gateway's id for it on the server
    (`rid`), the client's progress token, and what its frames need."""

    owner: RawCalls
    call: Call
    rid: str
    token: types.ProgressToken | None
    spec: ServerSpec
    entry: ServerEntry
    session: SessionRun
    started: float
    mark: EgressMark
    deadline: float
    #: What relays the server's log messages while the call is in flight to the client.
    log: LogHearer

    async def answered(self, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        owner = self.owner
        if not owner._end(self):
            return
        entry, tool = self.entry, self.call.tool
        if isinstance(message, types.JSONRPCError):
            why = error_answer(entry, tool, message.error.code, message.error.message)
            await owner._finish(self, CallOutcome(False, error=why), None)
            return
        try:
            result = types.CallToolResult.model_validate(message.result, by_name=False)
        except pydantic.ValidationError as exc:
            why = not_a_result(entry, tool, exc)
            await owner._finish(self, CallOutcome(False, error=why), None)
            return
        self.entry.failures = 0  # it served: a later failure starts the backoff again
        if not strict_json(result.structured_content):
            why = f"server {self.spec.name} answered {tool} with NaN or Infinity"
            await owner._finish(self, CallOutcome(False, error=why), None)
            return
        outcome = answer_outcome(result)
        await owner._finish(self, outcome, destructive_hint(self.entry, tool), message.result)

    async def progress(self, params: dict[str, Any]) -> None:
        calls = self.owner._calls
        if self.token is not None and calls.get(coerce_request_id(self.call.id)) is self:
            relayed = {**params, PROGRESS_TOKEN: self.token}
            line = json_line(
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": relayed}
            )
            if line is not None:
                await self.owner._writer.send_line(line)

    def gone(self) -> None:
        if not self.owner._closed:
            self.owner._nursery.start_soon(self._gone)

    async def _gone(self) -> None:
        owner = self.owner
        if owner._end(self):
            why = await gone_reason(self.entry, "Connection closed")
            await owner._finish(self, CallOutcome(False, error=why), None)
