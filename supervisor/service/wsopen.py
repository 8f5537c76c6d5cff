"""Opening a client WebSocket for the remote commands: the TCP (or TLS) connection and the
handshake bounded as a whole, and the socket closed however it ends.

trio-websocket's own `open_websocket_url` does neither for a server that accepts the TCP
connection and never answers: its `connect_timeout` ends its wait for the handshake but not
the reader task it started beside it, which reads on forever (the command hung); and the
socket of a handshake that failed, or of a connection the server closed first, is left to
the garbage collector. Here the stream is ours: opened, then given to `wrap_client_stream`,
and closed when the socket is done with.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import trio
from trio_websocket import (
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)


@contextlib.asynccontextmanager
async def open_websocket(
    url: str,
    headers: list[tuple[bytes, bytes]],
    *,
    max_message_size: int,
    connect_s: float,
    close_s: float,
    wrap: Callable[[trio.abc.Stream], trio.abc.Stream] | None = None,
) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket to `url` (ws:// or wss://, checked by the caller), open within
    `connect_s` or `ConnectionTimeout`; `HandshakeError` (its cause the `OSError`) when no
    connection could be made, `ConnectionRejected` when the server refused the handshake.
    The caller's exception comes out as itself, not in a group. `wrap`: the stream the
    socket is to read and write, given the connection's."""
    parts = urlsplit(url)
    secure = parts.scheme == "wss"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    ws: WebSocketConnection | None = None
    try:
        with trio.fail_after(connect_s) as connecting:
            async with trio.open_nursery() as nursery:  # (the reader task's)
                stream: trio.abc.Stream
                try:
                    if secure:
                        context = ssl.create_default_context()
                        stream = await trio.open_ssl_over_tcp_stream(
                            host, port, ssl_context=context, https_compatible=True
                        )
                    else:
                        stream = await trio.open_tcp_stream(host, port)
                except OSError as exc:
                    raise HandshakeError from exc
                try:
                    # (any stream serves: only its `local`/`remote`, unused, read more of it)
                    ws = await wrap_client_stream(
                        nursery,
                        stream if wrap is None else wrap(stream),  # type: ignore[arg-type]
                        host_header,
                        resource,
                        extra_headers=headers,
                        max_message_size=max_message_size,
                    )
                    connecting.deadline = math.inf
                    yield ws
                finally:
                    # Cancelled (the caller's scope: the reader task's too), no closing
                    # handshake can be heard: the close would wait `close_s` for nothing
                    # (2 s at the end of every `exec --remote`, whose events socket is left
                    # so). The stream is closed at once then, as the server sees it.
                    heard = trio.current_effective_deadline() != -math.inf
                    with trio.CancelScope(shield=True):
                        if ws is not None and heard:
                            with trio.move_on_after(close_s):
                                await ws.aclose()
                        # (which ends the reader task, whatever state it is in)
                        await trio.aclose_forcefully(stream)
    except trio.TooSlowError:  # (ours: the caller's would come in a group)
        raise ConnectionTimeout from None
    except BaseExceptionGroup as group:
        single = _single(group)
        # (its own cause kept: a `HandshakeError` says what the connection met by it)
        raise single from single.__cause__


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception of `group` that is not a cancellation (the caller's, or the reader
    task's: a refused handshake), else the group itself."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


def connect_failure(exc: BaseException) -> str:
    """Why no connection could be made, in a few words: the system's (`Connection refused`,
    `No route to host`, `Name or service not known`) rather than trio's "all attempts to
    connect to … failed", whose reasons are in its cause (one per address tried; each
    different one said once, in order). `exc` may wrap the `OSError` (httpx's errors)."""
    found: BaseException | None = exc
    while found is not None and not isinstance(found, OSError):
        found = found.__cause__ or found.__context__
    exc = found or exc
    if isinstance(exc, socket.gaierror):  # (its errno is getaddrinfo's, not errno's)
        return exc.strerror or str(exc)
    tried = exc.__cause__
    attempts = list(tried.exceptions) if isinstance(tried, BaseExceptionGroup) else [exc]
    reasons: dict[str, None] = {}
    for attempt in attempts:
        errno = getattr(attempt, "errno", None)
        reasons[os.strerror(errno) if isinstance(errno, int) and errno > 0 else str(attempt)] = None
    return "; ".join(reasons)
