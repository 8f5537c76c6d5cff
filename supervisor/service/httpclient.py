"""Plain HTTP from the client side, for `runs list` and `exec --artifacts` against a server:
`GET /v1/runs` and `GET /v1/runs/{runId}/artifacts/{id}` on the port of its WebSocket URL
(`ws://` is `http://`, `wss://` is `https://`), with the same token.

A body is read in pieces as it comes (an artifact goes to its file, never held whole), each
read bounded by `STALL_S`; a JSON answer is capped at `MAX_JSON_BYTES`. A refusal or an error
answer is a `RemoteError` saying what the server said.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final
from urllib.parse import quote, urlsplit

import h11
import trio

from .remote import CONNECT_TIMEOUT_S, Remote, RemoteError

#: The longest wait for the next bytes of an answer.
STALL_S: Final = 30.0
#: The largest JSON answer read (the run list).
MAX_JSON_BYTES: Final = 64 * 1024 * 1024
#: What of an error answer's body is read.
_ERROR_BYTES: Final = 64 * 1024
_RECEIVE: Final = 64 * 1024


def artifact_path(run_id: str, artifact_id: str) -> str:
    """The path of one artifact; each id one percent-encoded segment."""
    return f"/v1/runs/{quote(run_id, safe='')}/artifacts/{quote(artifact_id, safe='')}"


async def get_json(remote: Remote, path: str) -> Any:
    """The JSON value `path` answers with."""
    body = bytearray()
    async with open_get(remote, path) as pieces:
        async for piece in pieces:
            body += piece
            if len(body) > MAX_JSON_BYTES:
                raise RemoteError(f"{path}: the answer is over {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise RemoteError(f"{path}: the server's answer is not JSON") from None


@contextlib.asynccontextmanager
async def open_get(remote: Remote, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
    """GETs `path`; gives the pieces of a 200's body as they come. Any other status raises
    `RemoteError` with the server's message."""
    url = urlsplit(remote.endpoint(path))
    host, secure = url.hostname or "", url.scheme == "wss"
    port = url.port or (443 if secure else 80)
    target = path if not url.query else f"{path}?{url.query}"
    headers = [("Host", url.netloc), ("Connection", "close"), ("Accept", "*/*")]
    if remote.token is not None:
        headers.append(("Authorization", f"Bearer {remote.token}"))
    conn = h11.Connection(h11.CLIENT)
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream: trio.abc.Stream
            if secure:
                context = ssl.create_default_context()
                stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=context)
            else:
                stream = await trio.open_tcp_stream(host, port)
    except (OSError, trio.TooSlowError) as exc:
        raise RemoteError(f"cannot connect to {remote.url}: {exc or 'timed out'}") from None
    async with stream:
        try:
            request = h11.Request(method="GET", target=target, headers=headers)
            await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
            response = await _next(stream, conn)
            if not isinstance(response, h11.Response):
                raise RemoteError(f"{remote.url}: no answer to GET {path}")
            if response.status_code != 200:
                raise RemoteError(await _refusal(stream, conn, path, response.status_code))
            async with contextlib.aclosing(_body(stream, conn)) as body:
                yield body
        except (OSError, trio.BrokenResourceError, h11.ProtocolError) as exc:
            raise RemoteError(f"GET {path}: the connection failed: {exc}") from None


async def _next(stream: trio.abc.Stream, conn: h11.Connection) -> Any:
    """The next h11 event, reading as it needs (each read within `STALL_S`)."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            with trio.fail_after(STALL_S):
                data = await stream.receive_some(_RECEIVE)
        except trio.TooSlowError:
            raise RemoteError(f"the server sent nothing for {STALL_S:g} s") from None
        conn.receive_data(bytes(data))


async def _body(stream: trio.abc.Stream, conn: h11.Connection) -> AsyncGenerator[bytes, None]:
    while True:
        event = await _next(stream, conn)
        if isinstance(event, h11.Data):
            yield bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return
        else:
            raise RemoteError("the server's answer ended early")


async def _refusal(stream: trio.abc.Stream, conn: h11.Connection, path: str, status: int) -> str:
    body = bytearray()
    with contextlib.suppress(RemoteError, h11.ProtocolError):
        async for piece in _body(stream, conn):
            body += piece
            if len(body) > _ERROR_BYTES:
                break
    said = ""
    with contextlib.suppress(ValueError, AttributeError):
        said = str(json.loads(body).get("message", ""))
    hint = " (pass --token-file F or set MCPX_HOOKS_TOKEN)" if status == 401 else ""
    return f"GET {path}: HTTP {status} {said}{hint}".rstrip()
