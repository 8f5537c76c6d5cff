"""The ASGI bridge under `/mcp` (`service/asgi.py`) over a socket pair, with a real HTTP
client's bytes: an answer without a body that the client reads whole and closes on before
the application sends its empty last body (as Starlette sends a 202) is an answer given, not
a client gone; and a `ClientGone` the application lets through is the client's leaving,
not a failure of the connection."""

from __future__ import annotations

import logging
import sys

import anyio
import trio
import trio.testing

from mcpx_hooks.supervisor.service.asgi import (
    AsgiMessage,
    ClientGone,
    ClientLeaving,
    Receive,
    Scope,
    Send,
    serve_asgi,
)
from mcpx_hooks.supervisor.service.connection import ServerConnection

REQUEST = b"POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"


async def _answered(
    head: list[tuple[bytes, bytes]], last: bytes, let_through: bool = False
) -> tuple[bytes, list[str]]:
    """What the client read of an answer with `head` whose last body is `last`, sent once the
    client has closed; and what the application's sends raised (`let_through`: the
    application does not catch it, as an event stream's sender does not)."""
    server_sock, client_sock = trio.socket.socketpair()
    conn = ServerConnection(trio.SocketStream(server_sock), max_message_size=1 << 20, too_big="")
    raised: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["body"] == b"{}"
        start: AsgiMessage = {"type": "http.response.start", "status": 202, "headers": head}
        await send(start)
        assert (await receive())["type"] == "http.disconnect"  # the client has closed
        try:
            await send({"type": "http.response.body", "body": last, "more_body": False})
        except ClientGone as exc:
            raised.append(str(exc))
            if let_through:
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve_reader)
        await client_sock.send(REQUEST)
        request = await conn.wait_request()
        assert request is not None
        read = b""

        async def client() -> None:
            nonlocal read
            while b"\r\n\r\n" not in read:
                read += await client_sock.recv(1 << 16)
            client_sock.close()

        nursery.start_soon(client)
        await serve_asgi(conn, request, app, max_body=1 << 20, body_s=5)
        nursery.cancel_scope.cancel()
    server_sock.close()
    return read, raised


async def test_an_answer_read_whole_before_its_empty_last_body_is_given() -> None:
    read, raised = await _answered([(b"content-length", b"0")], b"")
    assert read.startswith(b"HTTP/1.1 202 ")
    assert raised == []


async def test_a_body_still_to_send_to_a_client_gone_raises() -> None:
    read, raised = await _answered([(b"content-length", b"4")], b"late")
    assert read.startswith(b"HTTP/1.1 202 ")
    assert raised == ["the client has closed the connection"]


async def test_a_client_gone_the_application_lets_through_ends_the_answer_quietly() -> None:
    read, raised = await _answered([], b"an event", let_through=True)  # (chunked)
    assert read.startswith(b"HTTP/1.1 202 ") and b" 500 " not in read
    assert raised == ["the client has closed the connection"]


def _record(message: str, error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except type(error):
        exc_info = sys.exc_info()
    name = "mcp.server.streamable_http"
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, (), exc_info)


def test_the_sdk_s_event_stream_writer_failing_on_a_client_gone_is_not_logged() -> None:
    # A client that closed its POST's connection before its answer (or the log messages
    # before it) came: the SDK's writer of that event stream finds its stream to the response
    # broken, and its log reached serve's stderr as 'Error in SSE writer: BrokenResourceError:
    # (a bug: MCPX_HOOKS_DEBUG=1 logs its traceback)'.
    leaving = ClientLeaving()
    assert not leaving.filter(_record("Error in SSE writer", anyio.BrokenResourceError()))
    assert not leaving.filter(_record("SSE response error", ClientGone("gone")))
    # Anything else the writer or another part meets is said as it was.
    assert leaving.filter(_record("Error in SSE writer", ValueError("odd")))
    assert leaving.filter(_record("Error handling POST", anyio.BrokenResourceError()))


async def test_a_client_that_expects_100_continue_is_told_to_go_on_at_once() -> None:
    # curl sends `Expect: 100-continue` with a body of more than 1 KiB (and with -H for any
    # POST), then waits up to a second for the `100 Continue` before it sends the body.
    server_sock, client_sock = trio.socket.socketpair()
    conn = ServerConnection(trio.SocketStream(server_sock), max_message_size=1 << 20, too_big="")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body = (await receive())["body"]
        length = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    head = b"POST /mcp HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    read = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve_reader)
        await client_sock.send(head)
        request = await conn.wait_request()
        assert request is not None

        async def client() -> None:
            nonlocal read
            with trio.fail_after(2):  # (the body bound is 5 s: past it, a 408)
                while b"\r\n\r\n" not in read:
                    read += await client_sock.recv(1 << 16)
            assert read == b"HTTP/1.1 100 Continue\r\n\r\n"
            await client_sock.send(b"{}")
            while chunk := await client_sock.recv(1 << 16):
                read += chunk

        nursery.start_soon(client)
        await serve_asgi(conn, request, app, max_body=1 << 20, body_s=5)
        await conn.abort()
    client_sock.close()
    assert read.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert read.endswith(b"\r\n\r\n{}")


async def test_a_client_that_closes_its_side_before_its_answer_is_told_why_not_500() -> None:
    # A client that shuts its sending side after its request (`nc -N`, a script's
    # socket.shutdown) is taken for gone: the application hears `http.disconnect` and gives
    # up. It was answered 500 "the request was not answered", a fault of the server's.
    server_sock, client_sock = trio.socket.socketpair()
    conn = ServerConnection(trio.SocketStream(server_sock), max_message_size=1 << 20, too_big="")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["body"] == b"{}"
        assert (await receive())["type"] == "http.disconnect"  # and answers nothing

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve_reader)
        await client_sock.send(REQUEST)
        client_sock.shutdown(trio.socket.SHUT_WR)
        request = await conn.wait_request()
        assert request is not None
        await serve_asgi(conn, request, app, max_body=1 << 20, body_s=5)
        await conn.abort()
    read = b""
    with trio.fail_after(5):
        while chunk := await client_sock.recv(1 << 16):
            read += chunk
    client_sock.close()
    assert read.startswith(b"HTTP/1.1 400 Bad Request\r\n"), read
    assert read.endswith(b'the client closed its side of the connection before its answer"}')


async def test_a_second_answer_after_one_was_given_is_dropped_not_a_crash() -> None:
    # A notification POSTed as its session ends (a DELETE at the same moment): the SDK's
    # transport answers 202, then finds the session's stream closed and answers again, 500.
    # The second `http.response.start` failed an assertion here, and serve's log said
    # 'connection N failed: AssertionError: http.response.start sent twice (a bug: …)'.
    server_sock, client_sock = trio.socket.socketpair()
    conn = ServerConnection(trio.SocketStream(server_sock), max_message_size=1 << 20, too_big="")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["body"] == b"{}"
        for status, body in ((202, b""), (500, b'{"error": "Error handling POST request"}')):
            head = [(b"content-length", b"%d" % len(body))]
            await send({"type": "http.response.start", "status": status, "headers": head})
            await send({"type": "http.response.body", "body": body, "more_body": False})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve_reader)
        await client_sock.send(REQUEST)
        request = await conn.wait_request()
        assert request is not None
        await serve_asgi(conn, request, app, max_body=1 << 20, body_s=5)
        await conn.abort()
    read = b""
    with trio.fail_after(5):
        while chunk := await client_sock.recv(1 << 16):
            read += chunk
    client_sock.close()
    assert read.startswith(b"HTTP/1.1 202 ") and b"500" not in read, read


def test_the_sdk_failing_a_post_as_its_session_ends_is_not_logged_as_a_bug() -> None:
    # The same race seen from the SDK's POST handler: its message could not reach the
    # session, whose stream was closed as the session ended; serve's log said 'Error handling
    # POST request: ClosedResourceError: (a bug: …)', once for each such POST.
    leaving = ClientLeaving()
    for ended in (anyio.ClosedResourceError(), anyio.BrokenResourceError()):
        assert not leaving.filter(_record("Error handling POST request", ended))
    assert leaving.filter(_record("Error handling POST request", ValueError("odd")))
