"""MCP sessions over streamable HTTP: the SDK's own transport (`StreamableHTTPServerTransport`,
an ASGI application) for each session, and behind it a `Gateway` exactly as `mcpx-hooks mcp`
serves one over stdio: the same tools, the same `call` point (with `when.client`), asks as
elicitations, `mcpx_exec`, and the session as a run.

A request without `Mcp-Session-Id` that opens a session (an `initialize` POST the transport
accepts and the gateway answers without an error) starts one; a request that names a session
goes to its transport; an unknown or ended session is 404 (the client starts another). A
session ends when the client ends it (DELETE), when no request of it has been in flight for
`idle_s` (a client that went away without a word), when its `initialize` was answered with
an error, when it makes room for a new one (below), or when the server stops (`close`): its
transport is terminated, the gateway's session returns, and its run (if it has one yet) gets
`result` and `end`. With `max_sessions` open, a new one takes the place of the session idle
longest (none of its requests in flight: no POST under way, no GET stream open), whose run
gets a `warning` saying so first: a client that opened sessions and left them (or one that
opens them in a loop) holds no one else out for `idle_s`, and one whose session was ended
so is told 404 at its next request and starts another, as MCP has it. Only when every open
session has a request in flight is a new one refused (503). Only the handshake protocol
versions are served: a request whose `mcp-protocol-version` header names another is 400 (an
`initialize` naming another in its params is answered with the server's own, as MCP
allows). No event is kept for a client to resume a lost stream from: a GET naming
`Last-Event-ID` opens a new stream, as one naming none does (the SDK's transport, with no
event store, would leave it unanswered).

The sessions' tasks run in a nursery the caller owns (`Sessions(…, nursery)`); a bug in one
session ends that session alone.
"""

from __future__ import annotations

import logging
import uuid
from typing import Final

import anyio
import attrs
import pydantic
import pydantic_core
import trio
from mcp.server.streamable_http import (
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.types import jsonrpc_message_adapter
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..core.errors import bug_summary
from ..core.frames import WarningFrame, blank
from ..core.records import Record
from ..run.runtime import Runtime
from .asgi import AsgiMessage, Receive, Scope, Send, quiet_client_leaving
from .mcpexec import RunSlots
from .mcpface import Gateway
from .mcplimits import CallLimiter
from .mcpstdio import BATCH_REFUSED, ODD_ID, odd_id_in, unreadable

logger = logging.getLogger("mcpx_hooks.mcp")

_SESSION: Final = MCP_SESSION_ID_HEADER.lower().encode("ascii")
_VERSION: Final = MCP_PROTOCOL_VERSION_HEADER.lower().encode("ascii")
_LAST_EVENT: Final = LAST_EVENT_ID_HEADER.lower().encode("ascii")


@attrs.define(repr=False)
class _Open(Record):
    """An open session: its transport, its gateway, and whether it is idle (no request of it
    in flight) and since when (`trio.current_time`)."""

    transport: StreamableHTTPServerTransport
    gateway: Gateway
    in_flight: int = 1  # (its `initialize`, until answered)
    idle_since: float = 0.0


class Sessions:
    """The open sessions of `/mcp`, by id; `app` is the ASGI application that serves them."""

    def __init__(
        self,
        runtime: Runtime,
        served_from: str,
        nursery: trio.Nursery,
        *,
        idle_s: float,
        max_sessions: int,
        slots: RunSlots | None = None,
    ) -> None:
        self.runtime = runtime
        self.served_from = served_from
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self.slots = slots
        self._nursery = nursery
        self._open: dict[str, _Open] = {}
        self._ended = trio.Event()
        self._running = 0
        #: The limits on calls (`callsPerMinute`, `maxConcurrent`), counted over every session:
        #: a server's limit is the server's, however many clients share it.
        self.limiter = CallLimiter()
        quiet_client_leaving(StreamableHTTPServerTransport.__module__)

    def __len__(self) -> int:
        return len(self._open)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        version = headers.get(_VERSION)
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            said = version.decode("latin-1")[:40]
            await _error(send, 400, INVALID_REQUEST, f"unsupported protocol version {said!r}")
            return
        if scope["method"] == "POST":
            body, receive = await _whole_body(receive)
            send = _in_our_words(body, send)
        named = headers.get(_SESSION)
        if named is None:
            await self._open_session(scope, receive, send)
            return
        held = self._open.get(named.decode("latin-1"))
        if held is None:
            await _error(send, 404, INVALID_REQUEST, "Session not found")
            return
        if _LAST_EVENT in headers:  # no event is kept to replay: the stream starts afresh
            scope = {**scope, "headers": [h for h in scope["headers"] if h[0] != _LAST_EVENT]}
        held.in_flight += 1
        try:
            await _ending_under(held.transport, scope, receive, send)
        finally:
            _settled(held)
        if held.transport.is_terminated:  # the client ended it (DELETE)
            await self._discard(held.transport)

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _error(send, 400, INVALID_REQUEST, "Bad Request: Missing session ID")
            return
        room = self._make_room() if len(self._open) >= self.max_sessions else None
        if len(self._open) >= self.max_sessions:
            said = (
                f"too many MCP sessions open (the cap is {self.max_sessions}),"
                " each with a request in flight: try again once one ends"
            )
            await _error(send, 503, INTERNAL_ERROR, said)
            return
        transport = StreamableHTTPServerTransport(
            mcp_session_id=uuid.uuid4().hex, idle_timeout=self.idle_s
        )
        assert transport.mcp_session_id is not None
        gateway = Gateway(self.runtime, self.served_from, self.slots, self.limiter)
        held = _Open(transport, gateway)
        self._open[transport.mcp_session_id] = held  # (the place, taken before any wait)
        if room is not None:
            await self._discard(room)
        status: list[int] = []

        async def watched(message: AsgiMessage) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                if status[0] >= 400:  # no session was opened: none is named
                    kept = [h for h in message["headers"] if h[0].lower() != _SESSION]
                    message = {**message, "headers": kept}
            await send(message)

        try:
            await self._nursery.start(self._serve, transport, gateway)
            await transport.handle_request(scope, receive, watched)
        finally:
            _settled(held)
            # Nothing was opened: refused by the transport (4xx), cut short, or an `initialize`
            # answered with an error (under a 200 that named the session already). The session
            # ends now, not at its idle bound: it holds no place among `max_sessions`.
            if not status or status[0] >= 400 or gateway.client is None:
                await self._discard(transport)

    async def _serve(
        self,
        transport: StreamableHTTPServerTransport,
        gateway: Gateway,
        *,
        task_status: trio.TaskStatus[None],
    ) -> None:
        """One session until it ends (see the module docstring); its run is closed then."""
        self._running += 1
        try:
            async with transport.connect() as (read, write):
                task_status.started()
                with transport.idle_scope or anyio.CancelScope():
                    await gateway.serve(read, write)
        except* Exception as group:
            logger.error("MCP session failed: %s", bug_summary(group))
            logger.debug("MCP session failed", exc_info=group)
        finally:
            await self._discard(transport)
            self._running -= 1
            if not self._running:
                self._ended.set()
                self._ended = trio.Event()

    def _make_room(self) -> StreamableHTTPServerTransport | None:
        """The session idle longest, forgotten (its place free) and its run told why, for
        the caller to end; None when every session has a request in flight."""
        idle = [held for held in self._open.values() if not held.in_flight]
        if not idle:
            return None
        oldest = min(idle, key=lambda held: held.idle_since)
        if oldest.gateway.session is not None:
            for_s = f"{trio.current_time() - oldest.idle_since:.0f} s"
            said = (
                f"this MCP session was ended to make room for a new one: {self.max_sessions}"
                f" were open (the cap), and none of its requests had been in flight for {for_s},"
                " the longest of those open"
            )
            oldest.gateway.session.journal.append(blank(WarningFrame, message=said))
        assert oldest.transport.mcp_session_id is not None
        del self._open[oldest.transport.mcp_session_id]
        return oldest.transport

    async def _discard(self, transport: StreamableHTTPServerTransport) -> None:
        """Forgets the session (its id is 404 from now on) and ends its transport."""
        assert transport.mcp_session_id is not None
        self._open.pop(transport.mcp_session_id, None)
        if not transport.is_terminated:
            with trio.CancelScope(shield=True):
                await transport.terminate()

    async def close(self) -> None:
        """Ends every session and waits until each one's run has its `end`."""
        for held in list(self._open.values()):
            await self._discard(held.transport)
        while self._running:
            await self._ended.wait()


def _settled(held: _Open) -> None:
    """One request of the session is no longer in flight."""
    held.in_flight -= 1
    if not held.in_flight:
        held.idle_since = trio.current_time()


async def _ending_under(
    transport: StreamableHTTPServerTransport, scope: Scope, receive: Receive, send: Send
) -> None:
    """The request served by `transport`. A session that ends under it (its streams closed:
    a DELETE at the same moment, its idle end, `serve` stopping) is a 404, as a request
    after its end is; or, where the transport had answered already (a notification's 202),
    that answer, the transport's failure to hand the message on being no one's bug."""
    started: list[bool] = []

    async def watched(message: AsgiMessage) -> None:
        if message["type"] == "http.response.start":
            started.append(True)
        await send(message)

    try:
        await transport.handle_request(scope, receive, watched)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        if not started:
            await _error(send, 404, INVALID_REQUEST, "Session not found")


async def _whole_body(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body (read whole, and bounded, by the front door: `asgi.py`), and a
    `receive` that gives it again, then what `receive` gives."""
    message = await receive()
    body = bytes(message.get("body", b"")) if message["type"] == "http.request" else b""
    given = [message]

    async def again() -> AsgiMessage:
        return given.pop() if given else await receive()

    return body, again


def _in_our_words(body: bytes, send: Send) -> Send:
    """`send`, for the answer to a POST of `body`, with the transport's refusal of a body
    that holds no message this server serves (a 400: pydantic's whole report) said as
    `_unreadable_body` says it; and its 202 for a message that only looks like a
    notification (a request whose `id` MCP does not take: `mcpstdio.odd_id_in`) a 400 saying
    so. The transport parses each body: this parses it again only then (a 400, or a 202 for
    a message with an `id`), never on a request's way."""
    held: list[AsgiMessage] = []

    async def said(message: AsgiMessage) -> None:
        if message["type"] == "http.response.start" and message["status"] in (400, 202):
            held.append(message)  # (until its body: said as it is, or in our words)
            return
        if not held or message["type"] != "http.response.body":
            await send(message)
            return
        start = held.pop()
        odd = start["status"] == 400 or b'"id"' in body or b"\\u" in body
        refused = _unreadable_body(body) if odd else None
        if refused is not None:
            await _error(send, 400, *refused)
            return
        await send(start)
        await send(message)

    return said


def _unreadable_body(body: bytes) -> tuple[int, str] | None:
    """The JSON-RPC error for a POST body that holds no message this server serves (a batch
    is refused whole, and a request whose `id` MCP does not take, `mcpstdio.odd_id_in`), in the
    words `mcpx-hooks mcp` answers a line with (`mcpstdio.unreadable`); None when it holds
    one. The body is parsed once, as the SDK's transport parses it (`from_json`, then the
    model): the model's `validate_json` over a union costs four times that on a large
    body, and each check here reads the one parse."""
    try:
        value = pydantic_core.from_json(body)
    except ValueError as exc:
        return PARSE_ERROR, f"Parse error: Invalid JSON: {exc}"
    if isinstance(value, list):
        return INVALID_REQUEST, BATCH_REFUSED
    try:
        message = jsonrpc_message_adapter.validate_python(value, by_name=False)
    except pydantic.ValidationError:
        pass  # (said in the words of JSON, "an object", as over stdio: read again, as JSON)
    else:
        return (INVALID_REQUEST, ODD_ID) if odd_id_in(message, value) else None
    try:
        jsonrpc_message_adapter.validate_json(body, by_name=False)
    except (pydantic.ValidationError, ValueError) as exc:
        return unreadable(exc)
    return None  # (never: what the model refused as parsed it refuses as JSON)


async def _error(send: Send, status: int, code: int, message: str) -> None:
    """A JSON-RPC error (no request id) as the HTTP answer, as the SDK's manager gives one."""
    error = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))
    body = error.model_dump_json(by_alias=True, exclude_unset=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
