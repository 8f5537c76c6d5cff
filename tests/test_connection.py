"""The prebuilt fan-out frame is byte for byte what wsproto would send; a message `offer`
cannot write whole goes out before anything else, so the wire stays a valid frame stream.
(`tests/test_protocol.py` holds the protocol under it, without a socket.)"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
import wsproto
import wsproto.events
from wsproto.frame_protocol import FrameProtocol

from mcpx_hooks.supervisor.service.broadcast import text_frame
from mcpx_hooks.supervisor.service.connection import ServerConnection
from mcpx_hooks.supervisor.service.wire import ConnectionClosed

SIZES = [0, 1, 125, 126, 65535, 65536, 300_000]


@pytest.mark.parametrize("text", ["x" * n for n in SIZES] + ["é" * 100, "a\nb"])
def test_text_frame_equals_wsproto(text: str) -> None:
    expected = FrameProtocol(client=False, extensions=[]).send_data(text, fin=True)
    assert text_frame(text.encode()) == expected


class _Client:
    """The other end of a socket pair, speaking WebSocket with wsproto."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.texts: list[str] = []
        self.pongs = 0
        self._parts: list[str] = []

    async def handshake(self, conn: ServerConnection) -> None:
        await self.sock.send(self.ws.send(wsproto.events.Request(host="test", target="/")))
        request = await conn.wait_request()
        assert request is not None and request.websocket
        await conn.accept()
        while not isinstance(await self.next(), wsproto.events.AcceptConnection):
            pass

    async def read(self, texts: int) -> None:
        """Reads until `texts` text messages have come (every frame checked by wsproto)."""
        while len(self.texts) < texts:
            await self.next()

    async def next(self) -> wsproto.events.Event:
        while True:
            for event in self.ws.events():
                if isinstance(event, wsproto.events.TextMessage):
                    self._parts.append(event.data)
                    if event.message_finished:
                        self.texts.append("".join(self._parts))
                        self._parts = []
                elif isinstance(event, wsproto.events.Pong):
                    self.pongs += 1
                return event
            data = await self.sock.recv(1 << 16)
            assert data, "the server closed the socket"
            self.ws.receive_data(data)


@contextlib.asynccontextmanager
async def _pair(max_message_size: int = 1 << 20) -> AsyncIterator[tuple[ServerConnection, _Client]]:
    """A server connection after its handshake, and its client; both closed on the way out."""
    server_sock, client_sock = trio.socket.socketpair()
    # Small buffers, so a few messages fill the socket.
    server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    client_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    conn = ServerConnection(
        trio.SocketStream(server_sock), max_message_size=max_message_size, too_big=""
    )
    with client_sock:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.serve_reader)
            client = _Client(client_sock)
            try:
                with trio.fail_after(10):
                    await client.handshake(conn)
                yield conn, client
            finally:
                await conn.abort()
                nursery.cancel_scope.cancel()


def _fill(conn: ServerConnection) -> list[str]:
    """Offers messages until the socket does not take one whole; the messages offered. The
    first is larger than the socket's buffer, so the socket takes a part of it."""
    offered = []
    for i in range(1000):
        offered.append(f"{i}:" + "x" * (100_000 if i == 0 else 5000))
        frame = text_frame(offered[-1].encode())
        if not conn.offer(frame):
            assert conn.unsent
            if i == 0:
                assert 0 < len(frame) - len(conn._unsent or b"") < len(frame)  # a part went
            return offered
    raise AssertionError("the socket never filled")


async def test_offer_leaves_the_rest_to_flush_and_a_later_message_after_it() -> None:
    async with _pair() as (conn, client):
        offered = _fill(conn)

        async def write() -> None:
            await conn.flush()
            assert not conn.unsent
            await conn.send_text("after")

        with trio.fail_after(10):
            async with trio.open_nursery() as both:
                both.start_soon(write)
                await client.read(len(offered) + 1)
        assert client.texts == [*offered, "after"]


async def test_the_librarys_own_writes_wait_for_the_rest_of_an_offered_message() -> None:
    """A pong (the library's reader task writes it) never lands inside an offered message."""
    async with _pair() as (conn, client):
        offered = _fill(conn)
        await client.sock.send(client.ws.send(wsproto.events.Ping(b"p")))
        with trio.fail_after(10):
            while not client.pongs:
                await client.next()
        # wsproto parsed every frame: the pong came after the whole of the message begun.
        assert client.texts == offered
        assert not conn.unsent


async def test_flush_to_a_client_gone_raises_connection_closed() -> None:
    async with _pair() as (conn, client):
        _fill(conn)
        client.sock.close()
        with pytest.raises(ConnectionClosed), trio.fail_after(10):
            await conn.flush()


# ---- the rest of a connection's life, over a socket pair --------------------------------------


async def test_a_close_waits_for_the_clients_reply_then_the_socket_ends() -> None:
    async with _pair() as (conn, client):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.close, 1001, "going")
            with trio.fail_after(10):
                while not isinstance(close := await client.next(), wsproto.events.CloseConnection):
                    pass
            assert (close.code, close.reason) == (1001, "going")
            await client.sock.send(client.ws.send(close.response()))
        assert await client.sock.recv(10) == b""  # the server closed TCP after the reply
        with pytest.raises(ConnectionClosed):
            await conn.send_text("late")


async def test_the_clients_close_is_answered_after_its_messages_are_taken() -> None:
    async with _pair() as (conn, client):
        await client.sock.send(
            client.ws.send(wsproto.events.TextMessage(data="last"))
            + client.ws.send(wsproto.events.CloseConnection(code=1000, reason="bye"))
        )
        with trio.fail_after(10):
            assert await conn.get_message() == "last"
            with pytest.raises(ConnectionClosed) as closed:
                await conn.get_message()
            assert (closed.value.code, closed.value.reason) == (1000, "bye")
            reply = await client.next()
        assert isinstance(reply, wsproto.events.CloseConnection) and reply.code == 1000


async def test_a_ping_is_answered_when_its_pong_comes() -> None:
    async with _pair() as (conn, client):
        with trio.fail_after(10):
            pong = await conn.send_ping()
            while not isinstance(ping := await client.next(), wsproto.events.Ping):
                pass
            assert not pong.is_set()
            await client.sock.send(client.ws.send(ping.response()))
            await pong.wait()


@pytest.mark.parametrize(
    ("head", "status"),
    [(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200), (b"GET / HTTP/1.1\r\n\r\n", 400)],
)
async def test_a_plain_request_is_answered_on_the_socket_and_ends_it(
    head: bytes, status: int
) -> None:
    server_sock, client_sock = trio.socket.socketpair()
    conn = ServerConnection(trio.SocketStream(server_sock), max_message_size=1, too_big="")
    with client_sock:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.serve_reader)
            await client_sock.send(head)
            with trio.fail_after(10):
                request = await conn.wait_request()
                if request is not None:  # a malformed one is answered by the reader
                    assert not request.websocket and request.target == "/healthz"
                    await conn.respond(200, b"{}")
                    await conn.abort()  # as the service does: one request per connection
                got = b""
                while chunk := await client_sock.recv(1 << 16):  # to the end: the server closed
                    got += chunk
        assert got.startswith(f"HTTP/1.1 {status} ".encode()), got
        assert b"connection: close" in got.lower()


async def test_a_send_once_an_oversized_message_came_raises_connection_closed() -> None:
    """The reader still holds a message for the handler when the one over the cap ends the
    connection: a send meanwhile must not write after the 1009 close frame."""
    async with _pair(max_message_size=10) as (conn, client):
        await client.sock.send(
            b"".join(
                client.ws.send(wsproto.events.TextMessage(data=text))
                for text in ("a", "b", "x" * 20)
            )
        )
        await trio.testing.wait_all_tasks_blocked()  # the reader waits to hand "b" over
        with pytest.raises(ConnectionClosed):
            await conn.send_text("now")
        assert not conn.offer(text_frame(b"now"))


async def test_a_send_cut_short_after_waiting_for_another_is_marked_broken() -> None:
    # Each send marked the connection broken before it waited for the lock and clean after
    # its write: one that waited behind another (a ping behind a message, a message behind a
    # ping) was marked clean by the other's end, and then, cut short mid-write, left a
    # broken frame on the wire with the connection taken for sound (and written to again).
    async with _pair() as (conn, client), trio.open_nursery() as nursery:
        nursery.start_soon(conn.send_text, "a" * 200_000)  # (the client does not read yet)
        await trio.testing.wait_all_tasks_blocked()
        behind = trio.CancelScope()

        async def second() -> None:
            with behind:
                await conn.send_text("b" * 200_000)

        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(10):
            while not client.texts:  # the first whole; the second begun, not done
                await client.next()
        await trio.testing.wait_all_tasks_blocked()
        behind.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert conn.broken


async def test_a_whole_answer_the_client_does_not_read_is_cut_after_the_send_bound() -> None:
    # An answer made whole (the run list, a search, /metrics) was written without a bound:
    # a client that asked and never read held its connection (and the answer) for good,
    # where a download's pieces are each held to the bound.
    server_sock, client_sock = trio.socket.socketpair()
    server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    client_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    conn = ServerConnection(
        trio.SocketStream(server_sock), max_message_size=1, too_big="", stall_s=0.5
    )
    with client_sock:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.serve_reader)
            await client_sock.send(b"GET /v1/runs HTTP/1.1\r\nHost: x\r\n\r\n")
            assert await conn.wait_request() is not None
            with trio.fail_after(5):
                await conn.respond(200, b"[" + b" " * 2_000_000 + b"]")
            assert conn.broken
            await conn.abort()
