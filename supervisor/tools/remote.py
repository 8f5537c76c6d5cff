"""A remote tool server's life (`[servers.x] url`): MCP's streamable HTTP with the official
SDK's client (`mcp.client.streamable_http`), to a server the supervisor does not run.

The same life as a server it runs (`serverlife.serve_session`): `initialize` and
`tools/list` within `startTimeoutMs`, the `server.start` hooks, serving until idle for
`idleMs`, then the session is closed (the SDK's `DELETE`). What it cannot reach, what
answers with an HTTP error, and a connection lost while serving end the life with a reason,
and the manager's backoff follows as for a crashed server.

An answer is held to what one from a server it runs may be: a JSON body over
`MAX_MESSAGE_BYTES` fails its request as too large as soon as it passes that length (the
rest is not read), one server-sent event likewise (the SDK's bound, set to the same), and
a compressed body, never asked for, fails its request unread: a few kilobytes of gzip hold
gigabytes.

Beside the SDK's client session, a `RawChannel` sends requests of its own through the same
transport (each POSTed as the SDK's are), and their answers, progress and log messages are
taken from what the transport reads before the session sees them (`_divert`): a tool call's
answer, a prompt or a resource is kept as the server wrote it (`wireresult.py`), as from a
server on a child's pipes, rather than as the SDK's models write it again.

The headers' `${secret:NAME}` are expanded here, from the secrets the server lists, and
only into the HTTP client's headers: a reason says the url, the HTTP status and the error's
kind, never a header, and every secret value is redacted from it besides.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Final, Protocol

import anyio
import attrs
import httpx2
import trio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp.types import ErrorData, JSONRPCError, RequestId, jsonrpc_message_adapter

from ..core.passenv import pass_environment
from ..core.records import Record
from ..core.redact import Redactor
from ..core.servers import MAX_MESSAGE_BYTES, expand_headers
from .listings import ListingSession
from .mcpclient import ANSWER_UNREADABLE, CLIENT_INFO, too_large
from .rawchannel import RawChannel
from .serverentry import ServerEntry, StartHooks
from .serverlife import serve_session, words

#: Connecting (and each write) gives up after this long; a response stream may stay open
#: (a long call's progress) for `_READ_S`.
_CONNECT_S: Final = 10.0
_READ_S: Final = 300.0


@attrs.define(repr=False)
class _LastStatus(Record):
    """The last HTTP error status the server answered with (0: none)."""

    status: int = 0
    phrase: str = ""

    async def heard(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.status, self.phrase = response.status_code, response.reason_phrase

    def said(self) -> str:
        return f" (it answered HTTP {self.status} {self.phrase})" if self.status else ""


class _Held(httpx2.AsyncByteStream):
    """A response body read whole up to `MAX_MESSAGE_BYTES`, then given as one piece; past
    that, the error `too_large` of the request it answers in its place, the rest unread."""

    def __init__(self, body: httpx2.AsyncByteStream, rid: RequestId | None) -> None:
        self._body, self._rid = body, rid

    async def __aiter__(self) -> AsyncIterator[bytes]:
        held = bytearray()
        async for piece in self._body:
            held += piece
            if len(held) > MAX_MESSAGE_BYTES:
                yield _error_body(too_large(self._rid))
                return
        yield bytes(held)

    async def aclose(self) -> None:
        await self._body.aclose()


class _Said(httpx2.AsyncByteStream):
    """A body of our own in place of the server's (which is left unread)."""

    def __init__(self, body: httpx2.AsyncByteStream, said: bytes) -> None:
        self._body, self._said = body, said

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._said

    async def aclose(self) -> None:
        await self._body.aclose()


async def _bounded(response: httpx2.Response) -> None:
    """Holds `response`'s body to what a server's answer may be (the module's words)."""
    headers = response.headers
    if headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
        error = ErrorData(code=ANSWER_UNREADABLE, message="its answer is compressed, unasked")
        said = _error_body(JSONRPCError(jsonrpc="2.0", id=_request_id(response), error=error))
        del headers["content-encoding"]
        headers["content-type"] = "application/json"
        response.stream = _Said(_stream(response), said)
    elif not headers.get("content-type", "").lower().startswith("text/event-stream"):
        response.stream = _Held(_stream(response), _request_id(response))


def _stream(response: httpx2.Response) -> httpx2.AsyncByteStream:
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    return response.stream


def _request_id(response: httpx2.Response) -> RequestId | None:
    """The JSON-RPC id of the request `response` answers (None: a GET, a notification)."""
    try:
        sent = json.loads(response.request.content or b"null")
    except (ValueError, httpx2.RequestNotRead):
        return None
    rid = sent.get("id") if isinstance(sent, dict) else None
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def _error_body(error: JSONRPCError) -> bytes:
    return error.model_dump_json(by_alias=True, exclude_none=True).encode()


class _Sends(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


class _Posted:
    """Where a `url` server's `RawChannel` writes: each line handed to the SDK's transport
    as the message it is (the transport POSTs it). Never at once: the transport's stream
    takes a message only when its writer waits for one."""

    def __init__(self, write: _Sends) -> None:
        self._write = write

    def send_nowait(self, line: bytes) -> bool:
        return False

    async def send(self, line: bytes) -> None:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        try:
            await self._write.send(SessionMessage(message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise trio.ClosedResourceError from None  # (as a server's closed stdin)


async def _divert(
    read: AsyncIterator[SessionMessage | Exception],
    raw: RawChannel,
    session_in: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """What the transport reads, to the raw channel's routes when it is theirs, else to the
    SDK's session; when it ends, the routes still waiting are told."""
    try:
        async with session_in:
            async for message in read:
                if (
                    isinstance(message, SessionMessage)
                    and raw.routes
                    and await raw.divert(message.message)
                ):
                    continue
                try:
                    await session_in.send(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
    finally:
        raw.close()


async def remote_life(start_hooks: StartHooks, entry: ServerEntry) -> str | None:
    """Serves the remote server until it is idle (None) or fails (the reason)."""
    spec = entry.spec
    assert spec.url is not None
    passed = pass_environment((), spec.secrets, os.environ)
    if passed.problem is not None:
        return f"server {spec.name}: {passed.problem}"
    redactor = entry.redactor = Redactor(passed.secrets)
    last = _LastStatus()
    client = httpx2.AsyncClient(
        headers={
            **expand_headers(spec.headers, passed.secrets),
            "accept-encoding": "identity",
        },
        timeout=httpx2.Timeout(_CONNECT_S, read=_READ_S),
        event_hooks={"response": [last.heard, _bounded]},
    )
    where = f"server {spec.name} ({spec.url})"
    why: str | None = None
    try:
        with trio.move_on_after(spec.start_timeout_ms / 1000) as start_scope:
            session_in, session_read = anyio.create_memory_object_stream[
                SessionMessage | Exception
            ](0)
            async with (
                client,
                streamable_http_client(
                    spec.url, http_client=client, max_sse_event_size=MAX_MESSAGE_BYTES
                ) as (read, write),
                trio.open_nursery() as nursery,
            ):
                raw = RawChannel(_Posted(write), set(), nursery, entry.heard)
                nursery.start_soon(_divert, read, raw, session_in)
                async with ListingSession(
                    session_read,
                    write,
                    client_info=CLIENT_INFO,
                    logging_callback=entry.heard,
                    message_handler=entry.notified,
                ) as session:
                    entry.raw = raw
                    why = await serve_session(start_hooks, entry, session, start_scope)
                nursery.cancel_scope.cancel()
    except Exception as exc:  # the transport's and the SDK's: the server's failure, in words
        return redactor.text(f"{where} failed: {words(exc)}{last.said()}")
    if start_scope.cancelled_caught:
        return redactor.text(
            f"{where} did not answer MCP initialize within startTimeoutMs"
            f" ({spec.start_timeout_ms} ms){last.said()}"
        )
    return None if why is None else redactor.text(why)
