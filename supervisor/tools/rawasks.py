"""A tool server's answers to the requests other than tool calls that a client's are relayed
as (a prompt, a resource, a completion: `service/mcprelay.py`), kept as the server wrote
them. Asked on the server's `RawChannel` when it has one and speaks a revision of the
handshake era, as the SDK's client would ask; read by the SDK's model of the answer, as the
SDK's client reads it (its checks, its errors), and returned with the `result` object the
server wrote, which is what the client is sent. Elsewhere (a `url` server), asked through
the SDK's client, and nothing is kept."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pydantic
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from .mcpclient import CLOSED
from .serverentry import ServerEntry

_M = TypeVar("_M", bound=pydantic.BaseModel)


async def ask_as_written(
    entry: ServerEntry,
    session: ClientSession,
    kind: str,
    request: pydantic.BaseModel,
    *,
    model: type[_M],
    sdk: Callable[[], Awaitable[_M]],
) -> tuple[_M, dict[str, Any] | None]:
    """The server's answer to `request` (the SDK's model of it, written as the SDK's client
    writes it), read as `model`, and its `result` as written (None when asked through the
    SDK's client, `sdk`). The request's id
    on the pipe is `mcpx-<kind>-<n>`. Raises the SDK's `MCPError` for the server's JSON-RPC
    error, or for its connection ended first ("Connection closed"), and what `model`'s
    validation raises for an answer that is not one, as the SDK's client does."""
    channel = entry.raw
    if channel is None or session.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return await sdk(), None
    sent = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    try:
        answer = await channel.request(kind, sent["method"], sent.get("params") or {})
    except ValueError:  # not strict JSON: the SDK's client says what it says of it
        return await sdk(), None
    if answer is None:
        raise MCPError(code=types.CONNECTION_CLOSED, message=CLOSED)
    if isinstance(answer, types.JSONRPCError):
        raise MCPError.from_error_data(answer.error)
    return model.model_validate(answer.result, by_name=False), answer.result
