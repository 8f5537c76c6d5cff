"""An MCP client's tool call: read from its line when it is plain (`plain_call`), and what
it gets back, on its way (the server's progress, its log messages, a hook's question) and at
its end (the tool result). Each relay comes two ways: on the SDK's request context
(`sdk_relays`, a call the SDK's server dispatched), or as lines written straight to the
client (`line_relays`, a call the gateway took before the SDK read it: `mcpraw.py`)."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import attrs
import orjson
import pydantic
from mcp import MCPDeprecationWarning, types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from ..core.effects import NO, YES, AnsweredBy
from ..core.jsontext import JsonError, loads
from ..core.records import Record
from ..run.callpoint import CallOutcome
from ..tools.hearing import GONE, Progress
from ..tools.jsonlines import json_line
from ..tools.serverentry import LogHearer
from ..tools.wireresult import log_as_written
from .answering import Responder
from .mcpnotes import PROGRESS_TOKEN, log_as_sent, progress_as_written
from .mcpoutbox import Outbox, Telling
from .mcpwriter import ClientWriter
from .mcpwritten import wire_result

#: A line that is a JSON object (JSON's whitespace before it).
_OBJECT: Final = re.compile(rb"[ \t\r\n]*\{")
_REQUEST_KEYS: Final = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_KEYS: Final = frozenset({"name", "arguments", "_meta"})
#: What a notification's envelope (`jsonrpc`, `method`, its event on the wire) adds to what
#: it holds, about, in bytes: a burst of empty ones is bounded too.
_ENVELOPE_BYTES: Final = 100
#: The form an `ask` is put to the person at the client in: one answer, yes or no.
ASK_FORM: Final = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": [YES, NO]}},
    "required": ["answer"],
}
#: The keys a value shaped as a tool result may have.
_RESULT_KEYS: Final = frozenset({"content", "structuredContent", "isError", "_meta"})


#: MCP's log levels, the least severe first.
LOG_LEVELS: Final[tuple[types.LoggingLevel, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


class ClientLevel:
    """The least severe level of log message a client hears: the one it asked for with
    `logging/setLevel` (the servers are shared: each client's is its own), every level until
    it asks. One per client, whichever way its calls go: what a `ClientLog` knows the client
    by."""

    def __init__(self) -> None:
        self._least = 0

    def set(self, level: types.LoggingLevel) -> None:
        self._least = LOG_LEVELS.index(level)

    def hears(self, level: types.LoggingLevel) -> bool:
        return LOG_LEVELS.index(level) >= self._least


@attrs.frozen(repr=False, eq=False)
class Relays(Record):
    """Where what comes back on a call's way goes: the server's progress on it (None: the
    client asked for none), its log messages, a hook's question (None: the client cannot be
    asked, and an ask gets its default); and whether the client cancelled the call, once it
    is cancelled (None: a cancellation is never the client's)."""

    progress: Progress | None
    log: LogHearer
    responder: Responder | None
    by_client: Callable[[], bool] | None = None


def sdk_relays(ctx: ServerRequestContext[Any, Any], outbox: Outbox, level: ClientLevel) -> Relays:
    """The relays of a call the SDK's server dispatched, through its request context; the
    server's progress and log messages (those of `level` or above) queued in the client's
    `outbox`."""
    log = _log_relay(ctx, outbox, level)
    return Relays(_progress_relay(ctx, outbox), log, _asker(ctx), _cancel_heard(ctx))


def _cancel_heard(ctx: ServerRequestContext[Any, Any]) -> Callable[[], bool] | None:
    """Whether the client cancelled the request of `ctx` (its `notifications/cancelled`),
    rather than its session ending: the SDK's dispatch context of the request knows, which
    its request context does not show (the SDK's server session holds it)."""
    heard = getattr(getattr(ctx.session, "_request_outbound", None), "cancel_requested", None)
    return heard.is_set if isinstance(heard, anyio.Event) else None


def line_relays(
    writer: ClientWriter, token: types.ProgressToken | None, level: ClientLevel
) -> Relays:
    """The relays of a call taken before the SDK read it, written to the client as lines
    (the client's progress `token`, if it gave one; the log messages of `level` or above),
    as the server wrote them where it was read from its line (`mcpnotes.py`); no questions
    (such a call has no hook that may ask)."""

    async def tell(params: types.LoggingMessageNotificationParams) -> None:
        written = log_as_written(params)
        sent = log_as_sent(written) if written is not None else None
        await _notify(writer, sent or types.LoggingMessageNotification(params=params))

    log = ClientLog(level, tell)
    if token is None:
        return Relays(None, log, None)

    async def relay(
        progress: float,
        total: float | None,
        message: str | None,
        written: Mapping[str, Any] | None = None,
    ) -> None:
        if written is not None:
            await _notify(writer, progress_as_written(written, token))
            return
        params = types.ProgressNotificationParams(
            progress_token=token, progress=progress, total=total, message=message
        )
        await _notify(writer, types.ProgressNotification(params=params))

    return Relays(relay, log, None)


async def _notify(writer: ClientWriter, notification: types.ServerNotification) -> None:
    dumped = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
    line = json_line({"jsonrpc": "2.0", **dumped})
    if line is not None:
        await writer.send_line(line)
    else:  # (a lone surrogate in a text: the SDK's writer says it as it can)
        message = types.JSONRPCNotification(jsonrpc="2.0", **dumped)
        await writer.send(SessionMessage(message))


def _progress_relay(ctx: ServerRequestContext[Any, Any], outbox: Outbox) -> Progress | None:
    """What passes the server's progress on a call to the client, with the client's progress
    token, in the call's own request (over HTTP, on the call's response, which a client that
    opened no other stream reads too, and before its answer); None when the client asked for
    none."""
    meta: Mapping[str, Any] = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    if not isinstance(token, str | int):
        return None
    session = ctx.session
    # (any id makes it the request's; the SDK's annotation asks for a string)
    related = None if ctx.request_id is None else str(ctx.request_id)

    async def relay(
        progress: float,
        total: float | None,
        message: str | None,
        written: Mapping[str, Any] | None = None,
    ) -> None:
        warn = _warner(session, related)
        if written is not None:  # (as the server wrote it, its token the client's)
            sent = progress_as_written(written, token)
            await outbox.tell(
                lambda: session.send_notification(sent, related_request_id=related),
                _size(written),
                warn,
            )
            return
        await outbox.tell(
            lambda: session.send_progress_notification(
                token, progress, total, message, related_request_id=related
            ),
            _size(message),
            warn,
        )

    return relay


@attrs.frozen(repr=False, eq=False)
class ClientLog(Record):
    """A `LogHearer` that tells a client the messages of its `level` and above. The client
    (its `level`, one per client: `sink`) hears each of a server's log messages once
    however many of its calls to the server are in flight, whichever way each went
    (`ServerEntry.heard`)."""

    level: ClientLevel
    tell: Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]

    @property
    def sink(self) -> object:
        return self.level

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        if self.level.hears(params.level):
            await self.tell(params)


def _log_relay(
    ctx: ServerRequestContext[Any, Any], outbox: Outbox, level: ClientLevel
) -> LogHearer:
    """What passes the server's log messages, while the call is in flight, to the client."""
    session, request_id = ctx.session, ctx.request_id

    async def relay(params: types.LoggingMessageNotificationParams) -> None:
        written = log_as_written(params)
        warn = _warner(session, request_id)
        if written is not None:  # (as the server wrote it: `send_log`'s level is the client's)
            sent = log_as_sent(written)
            await outbox.tell(
                lambda: session.send_notification(sent, related_request_id=request_id),
                _size(written),
                warn,
            )
            return
        level, data, logger = params.level, params.data, params.logger
        await outbox.tell(
            lambda: send_log(session, level, data, logger, request_id), _size(data), warn
        )

    return ClientLog(level, relay)  # (not by the SDK's session: one for each request)


def _warner(session: Any, request_id: types.RequestId | None) -> Callable[[str], Telling]:
    """What tells the client a `warning` of mcpx-hooks' own, in the request `request_id`."""
    return lambda words: lambda: send_log(session, "warning", words, "mcpx-hooks", request_id)


def _size(said: object) -> int:
    """About how many bytes a message holding `said` takes as JSON (its queue's bound): by
    orjson, a twentieth of the standard library's time on a notification's few keys; by the
    standard library where orjson refuses (an integer past 64 bits, a lone surrogate)."""
    try:
        written = len(orjson.dumps(said, default=str))
    except (orjson.JSONEncodeError, TypeError):
        written = len(json.dumps(said, ensure_ascii=False, default=str))
    return _ENVELOPE_BYTES + written


def send_log(
    session: Any,
    level: types.LoggingLevel,
    data: Any,
    logger: str | None,
    request_id: types.RequestId | None,
) -> Awaitable[None]:
    """A log message to the client (`session`, the SDK's `ServerSession`), in the call's own
    request. The SDK marks MCP's logging capability deprecated (as of protocol 2026-07-28,
    where it becomes a per-request opt-in); the versions served here have it, and it is how a
    client hears a run's frames and its servers' logs, so its warning, which says nothing to
    the operator, is not raised. (It is raised when the method is called, not awaited: no
    other task runs while it is set aside.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        sent: Awaitable[None] = session.send_log_message(level, data, logger, request_id)
    return sent


def _asker(ctx: ServerRequestContext[Any, Any]) -> Responder | None:
    """What asks the person at the client a hook's question, as an elicitation in the call's
    own request; None when the client cannot be asked (it declared no `elicitation`). A
    question the client answers with a JSON-RPC error (its form could not be shown) counts as
    `no`, as a form dismissed; one whose client is gone before it answers is let be (the
    session ends)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return None
    session, request_id = ctx.session, ctx.request_id

    async def ask(frame: Mapping[str, Any]) -> tuple[str, AnsweredBy] | None:
        try:
            said = await session.elicit_form(str(frame["question"]), ASK_FORM, request_id)
        except GONE:  # (the client is gone: nobody is left to answer, the session ends)
            return None
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                return None
            return NO, AnsweredBy.CLIENT  # (the client could not ask: as a form dismissed)
        content = said.content or {}
        answer = content.get("answer") if said.action == "accept" else None
        return (YES if answer == YES else NO), AnsweredBy.CLIENT

    return ask


def tool_result(outcome: CallOutcome) -> types.CallToolResult:
    """What the client gets for a call that ended in `outcome`."""
    if outcome.result is not None:  # the server's own answer, no hook replaced it
        return outcome.result
    if not outcome.ok:
        return error_result(outcome.error)
    return applied_result(outcome.value)


def applied_result(value: Any) -> types.CallToolResult:
    """A value a hook applied, as a tool result: as it is when it is shaped as one, else its
    JSON as text (and it as `structuredContent` when it is an object)."""
    shaped = isinstance(value, dict) and isinstance(value.get("content"), list)
    if shaped and set(value) <= _RESULT_KEYS:
        try:
            return types.CallToolResult.model_validate(value, by_name=False)
        except pydantic.ValidationError:
            pass  # not a tool result after all: a value like any other
    text = json.dumps(value, ensure_ascii=False)
    structured = value if isinstance(value, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


async def answer_result(
    writer: ClientWriter, cid: types.RequestId, result: types.CallToolResult
) -> None:
    """Answers the client's call `cid` with `result` (`wire_result`)."""
    dumped = wire_result(result)
    line = json_line({"jsonrpc": "2.0", "id": cid, "result": dumped})
    if line is not None:
        await writer.send_line(line, answers=cid)
    else:  # (a lone surrogate in a text: the SDK's writer says it as it can)
        await writer.send(
            SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=cid, result=dumped))
        )


def error_result(text: str) -> types.CallToolResult:
    """A tool result saying why a call failed, as the agent reads it."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


@attrs.frozen(repr=False, eq=False)
class ClientCall(Record):
    """A client's `tools/call` as plain as this module takes: its id, the tool's name as the
    client knows it, the arguments, the client's progress token (None: none), and the rest
    of the request's `_meta` (what a client adds of its own: an id of its tool use, a trace
    context), for a server the call is relayed to."""

    id: types.RequestId
    name: str
    args: dict[str, Any]
    token: types.ProgressToken | None
    meta: dict[str, Any] = attrs.Factory(dict)


def plain_call(line: bytes) -> ClientCall | None:
    """`line` as a `ClientCall` when it is one as plain as this module's rules ask, else
    None."""
    if not _OBJECT.match(line):  # (a batch, say: not parsed here for nothing)
        return None
    message = json_value(line)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    if b"\\u" in line and json_line(message) is None:  # an escaped lone surrogate
        return None  # (the SDK's server refuses it: -32700)
    cid, params = message.get("id"), message.get("params")
    if message.get("method") != "tools/call" or set(message) != _REQUEST_KEYS:
        return None
    if isinstance(cid, bool) or not isinstance(cid, int | str) or not isinstance(params, dict):
        return None
    name, args, meta = params.get("name"), params.get("arguments", {}), params.get("_meta", {})
    if not set(params) <= _PARAM_KEYS or not isinstance(name, str) or not isinstance(args, dict):
        return None
    if not isinstance(meta, dict):
        return None
    token = meta.get(PROGRESS_TOKEN)
    if token is not None and (isinstance(token, bool) or not isinstance(token, int | str)):
        return None
    return ClientCall(
        cid, name, args, token, {k: v for k, v in meta.items() if k != PROGRESS_TOKEN}
    )


def json_value(line: bytes) -> Any:
    """`line` as strict JSON (`jsontext.loads`), or None when it is not."""
    try:
        return loads(line)
    except JsonError:
        return None
