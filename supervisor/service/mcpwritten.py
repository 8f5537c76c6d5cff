"""An answer sent as it was written: a server's (a tool's answer, a prompt, a resource, a
completion) or the gateway's listing of its servers' items (`mcplisted.py`), in place of
the SDK's dump of the handler's model of it.

The SDK's server checks a handler's result and dumps it again, adding what the server never
wrote (`isError: false`), writing a number as its field's type (`1` as `1.0`), sorting the
keys, dropping the keys its model does not know. So a handler keeps the answer as written
(`keep_written`) and returns, for the SDK to check and dump, the least answer of its kind
(`unread`): `answer_as_written`, the innermost middleware, sends the kept one instead. What
the SDK checks of the client's request is checked all the same; the work its dump of a
whole answer would cost (a listing of 900 tools, a tool's answer of megabytes) is not
done for an answer nobody reads.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, Final, TypeVar

import pydantic
from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..tools.wireresult import as_written

_M = TypeVar("_M", bound=pydantic.BaseModel)

#: Where a handler puts its answer as written (`keep_written`), for the request
#: `answer_as_written` wraps.
_WRITTEN: Final[contextvars.ContextVar[list[dict[str, Any]] | None]] = contextvars.ContextVar(
    "mcpx_hooks_written", default=None
)

#: The requests whose answer may be what was kept (`keep_written`).
_AS_WRITTEN: Final = frozenset(
    {"tools/call", "prompts/get", "resources/read", "completion/complete"}
    | {"tools/list", "prompts/list", "resources/list", "resources/templates/list"}
)


def kept_as_written(result: types.CallToolResult) -> types.CallToolResult:
    """`result`, the answer of the SDK's call handler, kept as the client gets it
    (`wire_result`) for `answer_as_written` to send; what the handler returns."""
    return unread(result) if keep_written(wire_result(result)) else result


def keep_written(written: dict[str, Any]) -> bool:
    """`written`, the `result` of the request being handled as the client is to get it,
    kept for `answer_as_written` to send; whether it was kept (not for a request it does
    not wrap: then the handler's model is the answer)."""
    box = _WRITTEN.get()
    if box is None:
        return False
    box.append(written)
    return True


def unread(result: _M) -> _M:
    """What a handler whose answer was kept returns in place of `result`: the least answer
    of its kind, which the SDK checks and dumps, and nobody reads."""
    for kind, least in _LEAST.items():
        if isinstance(result, kind):
            made: _M = least()
            return made
    return result


#: The least answer of each kind `unread` stands for.
_LEAST: Final[dict[type[pydantic.BaseModel], Callable[[], Any]]] = {
    types.CallToolResult: lambda: types.CallToolResult(content=[]),
    types.GetPromptResult: lambda: types.GetPromptResult(messages=[]),
    types.ReadResourceResult: lambda: types.ReadResourceResult(contents=[]),
    types.CompleteResult: lambda: types.CompleteResult(completion=types.Completion(values=[])),
    types.ListToolsResult: lambda: types.ListToolsResult(tools=[]),
    types.ListPromptsResult: lambda: types.ListPromptsResult(prompts=[]),
    types.ListResourcesResult: lambda: types.ListResourcesResult(resources=[]),
    types.ListResourceTemplatesResult: lambda: types.ListResourceTemplatesResult(
        resource_templates=[]
    ),
}


async def answer_as_written(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """The SDK server's middleware (its innermost: what it returns is sent as it is) that
    sends the answer its handler kept (`keep_written`) in place of the SDK's dump of the
    handler's result. (`mcpx_exec`'s is the SDK's; so is an answer made here, such as no
    completions.)"""
    if ctx.method not in _AS_WRITTEN or ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return await call_next(ctx)
    box: list[dict[str, Any]] = []
    token = _WRITTEN.set(box)
    try:
        result = await call_next(ctx)
    finally:
        _WRITTEN.reset(token)
    return box[0] if box else result


def wire_result(result: types.CallToolResult) -> dict[str, Any]:
    """`result` as the client gets it: a server's own answer as the server wrote it
    (`wireresult.as_written`), any other with the fields it was given (the SDK's dump adds
    `isError` and `resultType` no one set)."""
    written = as_written(result)
    if written is not None:
        return written
    return result.model_dump(by_alias=True, mode="json", exclude_unset=True, exclude_none=True)
