"""A small ASGI server for one plain request of the front door: the request as an ASGI `http`
scope, its answer written as the application sends it. What `/mcp` uses to put the MCP SDK's
streamable HTTP transport (an ASGI application) behind our own h11 front door, so that the
port keeps one listener, one access check and one shutdown.

- The body is read whole before the application sees the request, at most `max_body` bytes
  within `body_s` seconds. A client that waits for `100 Continue` before sending it (`Expect:
  100-continue`) is told to go on as the body is to be read; one refused before (its token,
  its method, its size) gets its refusal at once instead, and sends no body. A
  `Content-Length` over the bound is answered 413 at once (the
  rest of the body is read and dropped for a moment, so the client reads the answer rather
  than a reset), a chunked body that grows past it too; a body that does not come in time
  is 408, a broken one 400. While it comes, the body holds the service's budget of
  unfinished messages and bodies (`unfinished.py`, the connection's `holding`): one that
  would take it past its bound is 503 with `Retry-After: 1`, and what it held is given
  back, as it is once the body is all in.
- The answer goes out as it is sent: with its `Content-Length` when the application gives
  one, chunked otherwise (an event stream runs as long as the application sends). Its
  hop-by-hop headers are the server's (`Connection: close`: a request pipelined behind it is
  not read, `requestcycle.py`), and the port's own headers are added (`protocol.py`); the
  application's `Cache-Control` gives way to the port's `no-store`.
- After the body, `receive()` waits until the client closes its side, then says
  `http.disconnect`; a `send()` once the client is gone raises `ClientGone` (an `OSError`,
  as the ASGI spec asks).
- An application that answers again once it has answered (the MCP SDK's transport, a
  notification's 202 given, then a 500 when the session it was for ended under it) has the
  second answer dropped: the first one stands.
- An application that returns without answering gets a 500 for it (a 400 saying why, when
  the client had closed its side: a client that shuts its sending half after its request is
  taken for gone, as most servers take it, and the application gives up); one that raises ends
  the connection (the server's boundary logs it), as does an answer left unfinished. A
  `ClientGone` it lets through is the client's leaving, not a failure: nothing is logged.
  An application that catches it and logs it as an error of its own (the MCP SDK's
  transport: "SSE response error", each time a client closes an event stream) is kept
  from saying so by `ClientLeaving`, a filter of its logger's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import anyio
import trio

from ..core.errors import HooksError
from .access import header
from .connection import ServerConnection
from .protocolevents import BadBody, Request, error_body
from .wire import BUSY, ConnectionClosed

Scope = MutableMapping[str, Any]
AsgiMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[AsgiMessage]]
Send = Callable[[AsgiMessage], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
#: The body of a refusal of ours, given its status and what was wrong.
Refusing = Callable[[int, str], bytes]

#: After a 413, the rest of the body is read and dropped for at most this long and this many
#: bytes, so that the client, still sending, reads the answer instead of a reset.
LINGER_S: Final = 2.0
LINGER_BYTES: Final = 64 * 1024 * 1024
#: The application's headers the server sets itself (framing, the connection, caching).
_SERVERS_OWN: Final = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"cache-control"}
)


class ClientGone(HooksError, OSError):
    """The client has closed the connection: nothing more can be sent to it."""


class _TooBig(HooksError):
    pass


class _Busy(HooksError):
    pass


#: What the MCP SDK's transport logs when its writer of a POST's event stream fails: with
#: `anyio.BrokenResourceError`, the stream to the response is broken, the response having
#: ended with its client gone (it left before the answer, or the messages before it, came).
SSE_WRITER_FAILED: Final = "Error in SSE writer"
#: What it logs when a POST's message cannot reach its session: with
#: `anyio.ClosedResourceError` (or `BrokenResourceError`), the session's stream was closed
#: under it, the session ending (a DELETE, its idle end, `serve` stopping) as it came.
POST_FAILED: Final = "Error handling POST request"


class ClientLeaving(logging.Filter):
    """Drops a record whose exception is clients leaving and nothing else (`ClientGone`,
    alone or in groups): an application's log of its answer cut short by its client; the
    SDK's `SSE_WRITER_FAILED` for a broken stream, the same seen from its writer; and its
    `POST_FAILED` for a session's stream closed under a request, the session ending."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        broken = isinstance(error, anyio.BrokenResourceError) and record.msg == SSE_WRITER_FAILED
        ended = record.msg == POST_FAILED and isinstance(
            error, anyio.ClosedResourceError | anyio.BrokenResourceError
        )
        return not (broken or ended or _only_gone(error))


def _only_gone(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_only_gone(e) for e in error.exceptions)
    return isinstance(error, ClientGone)


def quiet_client_leaving(name: str) -> None:
    """Puts `ClientLeaving` on the logger `name` (once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, ClientLeaving) for f in logger.filters):
        logger.addFilter(ClientLeaving())


async def serve_asgi(
    conn: ServerConnection,
    request: Request,
    app: App,
    *,
    max_body: int,
    body_s: float,
    server: tuple[str, int] | None = None,
    body_of: Refusing = error_body,
) -> None:
    """Answers `request` on `conn` with `app`; the caller ends the connection afterwards
    (the client's next request, pipelined, is not read: the answer reads the socket).
    `body_of` gives the body of our own refusals and errors (the application's client
    reads it: `/mcp`'s are JSON-RPC errors)."""
    conn.protocol.last()
    declared = header(request.headers, b"content-length")
    if declared is not None and int(declared) > max_body:  # h11 checked it is a number
        await _too_big(conn, max_body, int(declared), body_of)
        return
    await conn.go_on()  # (a client that waits for it: curl waits a second otherwise)
    body = await _body_or_refusal(conn, max_body, body_s, body_of)
    if body is None:
        return
    exchange = _Exchange(conn, body)
    left = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(exchange.watch_client)
            await app(_scope(request, conn, server), exchange.receive, exchange.send)
            nursery.cancel_scope.cancel()
    except* ClientGone:  # the application's answer was cut short by the client: its own end
        left = True
    if not (left or exchange.started):
        if exchange.gone:  # (it may still read: a half-close is taken for leaving)
            said = "the client closed its side of the connection before its answer"
            await conn.respond(400, body_of(400, said))
        else:
            await conn.respond(500, body_of(500, "the request was not answered"))


async def _body_or_refusal(
    conn: ServerConnection, max_body: int, body_s: float, body_of: Refusing
) -> bytes | None:
    """The request's body, or None once it is refused. The refusal is written after the
    `except` that caught why: a refusal lingers (`respond_unread`), and the exception's
    traceback would keep the pieces of the body read so far alive meanwhile."""
    refusal: tuple[int, str, tuple[tuple[bytes, bytes], ...]] | None = None
    try:
        with trio.fail_after(body_s):
            return await _read_body(conn, max_body)
    except _TooBig:
        refusal = (413, f"the request body is over {max_body} bytes", ())
    except _Busy:
        refusal = (503, BUSY, ((b"Retry-After", b"1"),))
    except BadBody as exc:
        refusal = (400, str(exc), ())
    except trio.TooSlowError:
        refusal = (408, f"the request body did not come in {body_s:g} s", ())
    status, message, headers = refusal
    if status in (413, 503):  # (the client may still be sending: it is read and dropped)
        await respond_unread(conn, status, body_of(status, message), headers)
    else:
        await conn.respond(status, body_of(status, message))
    return None


async def _read_body(conn: ServerConnection, max_body: int) -> bytes:
    protocol = conn.protocol
    holding = conn.holding
    pieces: list[bytes] = []
    size = 0
    try:
        while True:
            piece, done = protocol.body()
            size += len(piece)
            if size > max_body:
                raise _TooBig
            if holding is not None and not holding.grow(len(piece)):
                raise _Busy
            pieces.append(piece)
            if done:
                return b"".join(pieces)
            protocol.receive_body(await conn.receive_raw())
    finally:
        if holding is not None:
            holding.release()  # (all in, refused, or cut short: unfinished no more)


async def _too_big(conn: ServerConnection, max_body: int, rest: int, body_of: Refusing) -> None:
    message = f"the request body is over {max_body} bytes"
    await respond_unread(conn, 413, body_of(413, message), rest=rest)


async def respond_unread(
    conn: ServerConnection,
    status: int,
    body: bytes,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    *,
    rest: int = LINGER_BYTES,
) -> None:
    """Answers a request whose body is not read (a refusal), then reads and drops up to
    `rest` bytes of it for at most `LINGER_S`: a socket closed with unread bytes is reset,
    and a reset can take the answer with it before the client reads it. It ends the
    connection: what is read is dropped, a pipelined request too."""
    conn.protocol.last()
    await conn.respond(status, body, headers)
    dropped = 0
    with trio.move_on_after(LINGER_S):
        while dropped < min(rest, LINGER_BYTES) and (data := await conn.receive_raw()):
            dropped += len(data)


def _scope(request: Request, conn: ServerConnection, server: tuple[str, int] | None) -> Scope:
    parts = urlsplit(request.target)
    host, _, port = conn.remote.rpartition(":")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": unquote(parts.path),
        "raw_path": parts.path.encode("ascii"),
        "query_string": parts.query.encode("ascii"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.headers],
        "client": (host, int(port)) if port.isascii() and port.isdigit() else None,
        "server": server,
        "state": {},
    }


class _Exchange:
    """One request's `receive` and `send`."""

    def __init__(self, conn: ServerConnection, body: bytes) -> None:
        self._conn = conn
        self._body: bytes | None = body
        self._gone = trio.Event()
        self.started = False
        self._ended = False
        self._dropping = False  # (a second answer, after one was started: dropped)
        #: The bytes of the answer's body still to send, where its head gave its length: at 0 a
        #: client may have read it whole and closed before the application's empty last body.
        self._left: int | None = None

    async def watch_client(self) -> None:
        """Reads what the client sends after its request (dropped) until it closes."""
        while await self._conn.receive_raw():
            pass
        self._gone.set()

    @property
    def gone(self) -> bool:
        """The client has closed its side (or the connection)."""
        return self._gone.is_set()

    async def receive(self) -> AsgiMessage:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: AsgiMessage) -> None:
        kind = message["type"]
        if self._gone.is_set():
            if self._left == 0 and kind == "http.response.body" and not message.get("body"):
                self._ended = True  # (nothing was left to send: the client had it all)
                return
            raise ClientGone("the client has closed the connection")
        protocol = self._conn.protocol
        if kind == "http.response.start" and self.started:
            self._dropping = True  # (the connection carries one answer: the first stands)
            return
        if kind == "http.response.start":
            self.started = True
            given: list[tuple[bytes, bytes]] = [(bytes(k), bytes(v)) for k, v in message["headers"]]
            length = next((v for k, v in given if k.lower() == b"content-length"), None)
            kept = tuple((k, v) for k, v in given if k.lower() not in _SERVERS_OWN)
            size = int(length) if length is not None else None
            self._left = size
            data = protocol.respond_head(int(message["status"]), size, kept, None)
        elif kind == "http.response.body" and self._dropping:
            return
        elif kind == "http.response.body":
            assert self.started and not self._ended, "a body outside an answer"
            body = bytes(message.get("body", b""))
            if self._left is not None:
                self._left -= len(body)
            data = protocol.respond_body(body)
            if not message.get("more_body", False):
                self._ended = True
                data += protocol.respond_end()
        else:
            return  # nothing else is asked of an `http` server
        try:
            await self._conn.write_answer(data)
        except ConnectionClosed:
            self._gone.set()
            raise ClientGone("the client has closed the connection") from None
