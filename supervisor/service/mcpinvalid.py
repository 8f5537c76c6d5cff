"""What a client is told of a request whose params are not the method's: where, and what
was expected, as the transport's own refusals say it (`mcpstdio.unreadable`), never the
values it sent. The SDK's server answers every such request -32602 `Invalid request
parameters` with empty `data`, and a client's developer is left to guess which of its fields
was wrong."""

from __future__ import annotations

from typing import Any, Final

import pydantic
from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError

from ..tools.mcpclient import problems

#: The SDK's words for it, which the answer begins with.
INVALID_PARAMS: Final = "Invalid request parameters"


def invalid_params(exc: pydantic.ValidationError) -> str:
    """`exc`, the params' validation error, said in a few words: each problem's place (from
    `params` down) and what was expected."""
    return f"{INVALID_PARAMS}: {problems(exc)}"


async def explain_invalid_params(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """The SDK server's middleware that answers a request whose params are not the method's
    with where they are wrong (`invalid_params`), the SDK's code kept."""
    try:
        return await call_next(ctx)
    except pydantic.ValidationError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=invalid_params(exc)) from None
