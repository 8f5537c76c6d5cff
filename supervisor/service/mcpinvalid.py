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

#: The SDK's words for it, which the answer begins with.
INVALID_PARAMS: Final = "Invalid request parameters"
#: How many of the problems are said (the first ones).
SAID_PROBLEMS: Final = 3


def invalid_params(exc: pydantic.ValidationError) -> str:
    """`exc`, the params' validation error, said in a few words: each problem's place (from
    `params` down) and what was expected."""
    return f"{INVALID_PARAMS}: {problems(exc)}"


def problems(exc: pydantic.ValidationError) -> str:
    """`exc` in a few words, never the values: each of its first problems' place (from
    `params` down) and what was expected."""
    said = []
    for problem in exc.errors()[:SAID_PROBLEMS]:
        loc = [str(p) for p in problem["loc"]]
        where = ".".join(loc[1:] if loc[:1] == ["params"] else loc)
        said.append(f"{where}: {problem['msg']}" if where else problem["msg"])
    return "; ".join(said)


async def explain_invalid_params(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """The SDK server's middleware that answers a request whose params are not the method's
    with where they are wrong (`invalid_params`), the SDK's code kept."""
    try:
        return await call_next(ctx)
    except pydantic.ValidationError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=invalid_params(exc)) from None
