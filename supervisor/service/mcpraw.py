"""Tool calls of an MCP client that no hook can touch, relayed as lines around both of the
SDK's sessions (`mcpx-hooks mcp` on stdio), as a byte relay would, with the ids swapped.

The client's `tools/call` line is taken here before the SDK's server reads it when all of
these hold; otherwise the SDK's server serves it, as it serves every other message:

- the session has started, and the client and the tool server speak the same revision of
  the protocol, one of the handshake era (the server on a child's pipes: `RawChannel`);
- the name is a tool the gateway lists: shown, its server running, not quarantined (its pin
  already decided, what it had to say said); the tool declares no `outputSchema` (the SDK's
  client checks a result against one); no `call` hook fires for it; neither it nor its
  server has call limits;
- the request is plain: an `id` (a number or a string), `name`, `arguments` (an object, or
  none), in `_meta` at most a `progressToken`; strict JSON;
- its line, with the gateway's own id, goes whole onto the server's stdin at once.

It is written as the SDK's client would write it, with an id of the gateway's own
(`mcpx-relay-<n>`, a string, where the SDK's client numbers its requests). Its answer comes
back through the server's channel: read as the SDK's client reads a tool result (or the
error the call point gives for an answer that is not one, or a JSON-RPC error); its `call`
frame written as the call point writes an unhooked call's; then sent to the client under the
client's id, as the server wrote it. On the way, the server's progress on it goes to the
client with the client's token (when it gave one), and its log messages while it is in
flight. A cancellation from the client is carried to the server, and the call is never
answered (as the SDK's server does). Past the server's `callTimeoutMs` the call is cancelled
on the server and answered with why; when the server's stdout ends first, with the reason
its life ended.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import pydantic
import trio
from mcp import types
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..core.jsontext import JsonError, loads
from ..core.records import Record
from ..core.servers import NO_CALL_LIMITS, ServerSpec, exposed_targets
from ..run.callpoint import (
    Call,
    CallOutcome,
    EgressMark,
    answer_outcome,
    destructive_hint,
    too_slow,
)
from ..tools.rawchannel import cancellation
from ..tools.servers import done_using, error_answer, gone_reason, not_a_result, strict_json
from .mcpexec import EXEC_TOOL
from .mcpstdio import ClientWriter

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from ..core.hooks import Config
    from ..run.runtime import Runtime
    from ..tools.serverentry import ServerEntry
    from .mcpsession import SessionRun

#: The kind in the ids of relayed calls on a server's pipe (`RawChannel.new_id`).
RELAYED: Final = "relay"
_CALL: Final = b'"tools/call"'
_CANCELLED: Final = b'"notifications/cancelled"'
_PARAM_KEYS: Final = frozenset({"name", "arguments", "_meta"})


class Face(Protocol):
    """What a relay asks of the gateway it relays for (`mcpface.Gateway`)."""

    config: Config
    runtime: Runtime
    session: SessionRun | None
    #: The SDK's session with the client, once the handshake is done.
    client: ServerSession | None

    def shows(self, spec: ServerSpec, tool: str) -> bool: ...

    def settled(self, spec: ServerSpec, entry: ServerEntry) -> bool: ...


def error_result(text: str) -> types.CallToolResult:
    """A tool result saying why a call failed, as the agent reads it."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class RawCalls:
    """The relayed calls of one session of `gateway`, answered on `writer`; the tasks they
    need (their deadlines, the wait for a gone server's reason) run in `nursery`."""

    def __init__(self, gateway: Face, writer: ClientWriter, nursery: trio.Nursery) -> None:
        self._gateway = gateway
        self._writer = writer
        self._nursery = nursery
        self._count = 0
        self._calls: dict[types.RequestId, RawCall] = {}  # by the client's id
        self._soonest = math.inf
        self._wake = trio.Event()
        self._closed = False
        nursery.start_soon(self._deadlines)

    async def take(self, line: bytes) -> bool:
        """Whether the client's `line` was taken here (a call relayed, or the cancellation of
        one); else it is the SDK's to read."""
        if self._closed:
            return False
        if _CALL in line:
            return self._start(line)
        if self._calls and _CANCELLED in line:
            return await self._cancel(line)
        return False

    def close(self) -> None:
        """The session ends: each call in flight is cancelled on its server (when its stdin
        has room at once), and nothing more is answered."""
        self._closed = True
        for call in list(self._calls.values()):
            if self._end(call):
                channel = call.entry.raw
                if channel is not None:
                    channel.forget(call.rid)
                    channel.notify_nowait(cancellation(call.rid))

    def _start(self, line: bytes) -> bool:
        request = _plain_call(line)
        session = self._gateway.session
        if request is None or session is None or request[0] in self._calls:
            return False
        cid, name, args, token = request
        found = self._target(name)
        if found is None or session.hooked(found[0].name, found[1]):
            return False
        spec, tool, entry = found
        if entry.raw is None:
            return False
        rid = entry.raw.new_id(RELAYED)
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if token is not None:
            params["_meta"] = {"progressToken": rid}
        request_line = _line(
            {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        )
        if request_line is None:
            return False
        now = trio.current_time()
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
            now + spec.call_timeout_ms / 1000,
        )
        if not entry.raw.send_nowait(rid, request_line, call):
            return False
        self._calls[cid] = call
        entry.in_use += 1
        entry.poke()
        entry.log_hearers.append(call.log)
        if call.deadline < self._soonest:
            self._wake.set()
        return True

    def _target(self, name: str) -> tuple[ServerSpec, str, ServerEntry] | None:
        """The (server, tool, its entry) `name` stands for when its call may be relayed."""
        gateway = self._gateway
        config, manager = gateway.config, gateway.runtime.servers
        client = None if gateway.client is None else gateway.client.protocol_version
        if manager is None or client not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None
        if name == EXEC_TOOL and config.mcp_exec:
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
                and spec.call_limits == NO_CALL_LIMITS
                and spec.tool_limits.get(tool, NO_CALL_LIMITS) == NO_CALL_LIMITS
                and gateway.settled(spec, entry)
            )
            return (spec, tool, entry) if relayable else None
        return None

    async def _cancel(self, line: bytes) -> bool:
        message = _json(line)
        if not isinstance(message, dict) or message.get("method") != "notifications/cancelled":
            return False
        params = message.get("params")
        if not isinstance(params, dict):
            return False
        rid = params.get("requestId")
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            return False
        call = self._calls.get(rid)
        if call is None and isinstance(rid, str) and rid.isascii() and rid.isdigit():
            call = self._calls.get(int(rid))  # (the SDK's server reads "5" as 5 here too)
        if call is None or not self._end(call):
            return False
        channel = call.entry.raw
        if channel is not None:
            channel.forget(call.rid)
            await channel.notify(cancellation(call.rid))
        return True

    def _end(self, call: RawCall) -> bool:
        """`call` ends now: False when it had ended already."""
        if self._calls.get(call.call.id) is not call:
            return False
        del self._calls[call.call.id]
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
        line = None if raw is None else _line({"jsonrpc": "2.0", "id": cid, "result": raw})
        if line is not None:
            await self._writer.send_line(line)
            return
        result = outcome.result if outcome.result is not None else error_result(outcome.error)
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._writer.send(
            SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=cid, result=dumped))
        )

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
                if self._end(call):
                    channel = call.entry.raw
                    if channel is not None:
                        channel.forget(call.rid)
                        await channel.notify(cancellation(call.rid))
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

    async def answered(self, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        owner = self.owner
        if not owner._end(self):
            return
        spec, tool = self.spec, self.call.tool
        if isinstance(message, types.JSONRPCError):
            why = error_answer(spec, tool, message.error.code, message.error.message)
            await owner._finish(self, CallOutcome(False, error=why), None)
            return
        try:
            result = types.CallToolResult.model_validate(message.result, by_name=False)
        except pydantic.ValidationError as exc:
            await owner._finish(self, CallOutcome(False, error=not_a_result(spec, tool, exc)), None)
            return
        self.entry.failures = 0  # it served: a later failure starts the backoff again
        if not strict_json(result.structured_content):
            why = f"server {spec.name} answered {tool} with NaN or Infinity"
            await owner._finish(self, CallOutcome(False, error=why), None)
            return
        outcome = answer_outcome(result)
        await owner._finish(self, outcome, destructive_hint(self.entry, tool), message.result)

    async def progress(self, params: dict[str, Any]) -> None:
        if self.token is not None and self.owner._calls.get(self.call.id) is self:
            relayed = {**params, "progressToken": self.token}
            line = _line({"jsonrpc": "2.0", "method": "notifications/progress", "params": relayed})
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

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        notification = types.JSONRPCNotification(
            jsonrpc="2.0", method="notifications/message", params=dumped
        )
        await self.owner._writer.send(SessionMessage(notification))


def _plain_call(line: bytes) -> tuple[types.RequestId, str, dict[str, Any], Any] | None:
    """A `tools/call` request's id, name, arguments and progress token (None: none) when it
    is as plain as a relayed call must be (this module's rules), else None."""
    message = _json(line)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    cid, params = message.get("id"), message.get("params")
    if message.get("method") != "tools/call" or set(message) != {
        "jsonrpc",
        "id",
        "method",
        "params",
    }:
        return None
    if isinstance(cid, bool) or not isinstance(cid, int | str) or not isinstance(params, dict):
        return None
    name, args, meta = params.get("name"), params.get("arguments", {}), params.get("_meta", {})
    if not set(params) <= _PARAM_KEYS or not isinstance(name, str):
        return None
    if (
        not isinstance(args, dict)
        or not isinstance(meta, dict)
        or not set(meta) <= {"progressToken"}
    ):
        return None
    token = meta.get("progressToken")
    if token is not None and (isinstance(token, bool) or not isinstance(token, int | str)):
        return None
    return cid, name, args, token


def _json(line: bytes) -> Any:
    """`line` as strict JSON (`jsontext.loads`), or None when it is not."""
    try:
        return loads(line)
    except JsonError:
        return None


def _line(message: dict[str, Any]) -> bytes | None:
    """`message` as one line of strict JSON, or None when it cannot be one."""
    try:
        text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode() + b"\n"
    except (ValueError, UnicodeEncodeError):
        return None
