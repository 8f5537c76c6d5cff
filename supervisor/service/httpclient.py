"""Plain HTTP from the client side, for `runs list` and `exec --artifacts` against a server:
`GET /v1/runs` and `GET /v1/runs/{runId}/artifacts/{id}` on the port of its WebSocket URL
(`ws://` is `http://`, `wss://` is `https://`), with the same token; httpx speaks it.

A body is read in pieces as it comes (an artifact goes to its file, never held whole), each
read bounded by `STALL_S`; a JSON answer is capped at `MAX_JSON_BYTES`. A refusal or an error
answer (a redirect too: none is followed) is a `RemoteError` saying what the server said. The
environment is not consulted (no proxy, no netrc, no other CA file): the server is the one
`--remote` names, its certificate checked against the system's CAs.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import trio

from .remote import CONNECT_TIMEOUT_S, Remote
from .remoteread import RemoteError
from .remotewords import said_in
from .wsopen import connect_failure

#: The longest wait for the next bytes of an answer.
STALL_S: Final = 30.0
#: The largest JSON answer read (the run list).
MAX_JSON_BYTES: Final = 64 * 1024 * 1024
#: What of an error answer's body is read.
_ERROR_BYTES: Final = 64 * 1024


def artifact_path(run_id: str, artifact_id: str) -> str:
    """The path of one artifact; each id one percent-encoded segment."""
    return f"/v1/runs/{quote(run_id, safe='')}/artifacts/{quote(artifact_id, safe='')}"


async def get_json(remote: Remote, path: str, query: Mapping[str, Any] | None = None) -> Any:
    """The JSON value `path` (with `query`) answers with."""
    body = bytearray()
    async with open_get(remote, path, query) as pieces:
        async for piece in pieces:
            body += piece
            if len(body) > MAX_JSON_BYTES:
                raise RemoteError(f"{path}: the answer is over {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # (nested past what the reader takes is not JSON here)
        raise RemoteError(f"{path}: the server's answer is not JSON") from None


@contextlib.asynccontextmanager
async def open_get(
    remote: Remote, path: str, query: Mapping[str, Any] | None = None
) -> AsyncIterator[AsyncIterator[bytes]]:
    """GETs `path` (with `query`, its None values left out); gives the pieces of a 200's body
    as they come (as sent: no content decoding). Any other status raises `RemoteError` with
    the server's message. The client and its connection are closed on every way out."""
    url = urlsplit(remote.endpoint(path, query))
    secure = url.scheme == "wss"
    target = urlunsplit(("https" if secure else "http", url.netloc, path, url.query, ""))
    headers = {"Connection": "close", "Accept": "*/*"}
    if remote.token is not None:
        headers["Authorization"] = f"Bearer {remote.token}"
    timeout = httpx.Timeout(STALL_S, connect=CONNECT_TIMEOUT_S)
    verify: ssl.SSLContext | bool = ssl.create_default_context() if secure else False
    async with httpx.AsyncClient(timeout=timeout, verify=verify, trust_env=False) as client:
        request = client.build_request("GET", target, headers=headers)
        # What this client sent before httpx: no User-Agent, no Accept-Encoding.
        del request.headers["User-Agent"], request.headers["Accept-Encoding"]
        try:
            try:
                response = await client.send(request, stream=True)
            except httpx.ConnectTimeout:
                raise RemoteError(f"cannot connect to {remote.url}: timed out") from None
            except httpx.ConnectError as exc:
                why = connect_failure(exc)
                raise RemoteError(f"cannot connect to {remote.url}: {why}") from None
            async with contextlib.aclosing(response):
                if response.status_code != 200:
                    raise RemoteError(await _refusal(response, path))
                async with _open_body(response) as pieces:
                    yield pieces
        except httpx.TimeoutException:
            raise RemoteError(f"the server sent nothing for {STALL_S:g} s") from None
        except httpx.TransportError as exc:
            raise RemoteError(f"GET {path}: the connection failed: {exc}") from None


@contextlib.asynccontextmanager
async def _open_body(response: httpx.Response) -> AsyncIterator[AsyncIterator[bytes]]:
    """The pieces of `response`'s body as they come, as sent (no content decoding).

    httpx reads a body through a chain of async generators, and closing the outermost leaves
    the inner ones suspended (trio warns when they are collected). So a body left before its
    end is ended from below: the connection is closed, and the chain read to the error that
    gives, which ends each of them (a body never read ends at once: `StreamClosed`). Closing
    and reading a closed connection do not block; they are shielded so that a cancellation
    does not leave the chain half-ended.
    """
    pieces = response.aiter_raw()
    try:
        yield pieces
    finally:
        with trio.CancelScope(shield=True):
            await response.aclose()
            with contextlib.suppress(httpx.HTTPError, httpx.StreamError):
                async for _ in pieces:
                    pass


async def _refusal(response: httpx.Response, path: str) -> str:
    body = bytearray()
    with contextlib.suppress(httpx.HTTPError):
        async with _open_body(response) as pieces:
            async for piece in pieces:
                body += piece
                if len(body) > _ERROR_BYTES:
                    break
    said = said_in(body)
    status = response.status_code
    hint = " (pass --token-file F or set MCPX_HOOKS_TOKEN)" if status == 401 else ""
    return f"GET {path}: HTTP {status} {said}{hint}".rstrip()
