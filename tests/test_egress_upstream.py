"""The egress proxy against a stalled or unusual upstream: the real proxy (a lease serving a
listening socket, as the spawner hands it one) and real sockets on both sides. An exchange in
which nothing passes either way for `IDLE_S` is ended (`504` when no answer was sent yet) and
kept as a refusal of its host; `1xx` answers and answers to `HEAD` reach the child whole, in
a plain request and in one read inside a tunnel (a child with a secret)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trio
from test_egress_bounds import proxy, read_all

from mcpx_hooks.supervisor.process import egress, egressca
from mcpx_hooks.supervisor.process.egress import Lease

IDLE_S = egress.http.IDLE_S
#: Long enough for any answer on loopback (real time); a connection still open past it hangs.
WAIT_S = 5.0

Handler = Callable[[trio.SocketStream], Awaitable[None]]


@contextlib.asynccontextmanager
async def _upstream(
    handle: Handler, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback server running `handle` on each connection (in TLS with `tls`); its port,
    and each request head it read first."""
    heads: list[bytes] = []

    async def serve(plain: trio.SocketStream) -> None:
        stream: trio.abc.Stream = (
            plain if tls is None else trio.SSLStream(plain, tls, server_side=True)
        )
        data = b""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async with stream:
                while b"\r\n\r\n" not in data and (chunk := await stream.receive_some()):
                    data += chunk
                heads.append(data)
                await handle(stream)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, serve, listeners)
        yield listeners[0].socket.getsockname()[1], heads
        nursery.cancel_scope.cancel()


async def _never_answer(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def test_an_upstream_that_never_answers_is_answered_504_after_idle(
    autojump_clock: trio.abc.Clock,
) -> None:
    """An upstream that read the request and never answered held the child's connection
    (one of its 64) until the hook's timeout; a tool server's, for as long as it ran. Now the
    child reads `504` after `IDLE_S`, and its run hears why (a refusal of the host)."""
    async with (
        _upstream(_never_answer) as (up, _),
        proxy((f"127.0.0.1:{up}",)) as (lease, port),
        await trio.open_tcp_stream("127.0.0.1", port) as client,
    ):
        start = trio.current_time()
        await client.send_all(f"GET http://127.0.0.1:{up}/ HTTP/1.1\r\n\r\n".encode())
        with trio.fail_after(10 * IDLE_S):
            answer = await read_all(client)
        assert trio.current_time() - start == pytest.approx(IDLE_S)
    said = (
        f"nothing passed to or from 127.0.0.1:{up} for {IDLE_S:g} s: the proxy ended the connection"
    )
    assert answer.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n")
    assert answer.endswith(said.encode() + b"\n")
    assert lease.refused == {"127.0.0.1": up}
    assert lease.notes == {"127.0.0.1": said}


async def test_a_silent_tunnel_is_ended_after_idle_and_a_busy_one_is_not(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A tunnel to an upstream that went silent was held as long as the child lived. Now one
    in which nothing passes either way for `IDLE_S` is ended; one in which bytes pass goes on
    however long it lasts."""

    async def echo(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some():
            await stream.send_all(data)

    async with (
        _upstream(echo) as (up, _),
        proxy((f"127.0.0.1:{up}",)) as (lease, port),
        await trio.open_tcp_stream("127.0.0.1", port) as busy,
    ):
        await busy.send_all(f"CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n".encode())
        assert (await busy.receive_some()).startswith(b"HTTP/1.1 200 ")
        await busy.send_all(b"\r\n\r\n")  # (read by the echo as the end of a head)
        for _ in range(5):
            await trio.sleep(IDLE_S * 0.9)
            await busy.send_all(b"ping")
            assert await busy.receive_some() == b"ping"
        assert lease.refused == {}
        start = trio.current_time()
        with trio.fail_after(10 * IDLE_S):
            assert await read_all(busy) == b""
        assert trio.current_time() - start == pytest.approx(IDLE_S, abs=0.1)
    assert lease.notes["127.0.0.1"].startswith(f"nothing passed to or from 127.0.0.1:{up} for ")


async def test_an_upstream_that_stalls_in_its_body_ends_the_connection_after_idle(
    autojump_clock: trio.abc.Clock,
) -> None:
    """After the answer's head, no `504` can be said: the child reads the head and the
    bytes that came, and then the end of the connection."""

    async def stall(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
        await trio.sleep_forever()

    async with (
        _upstream(stall) as (up, _),
        proxy((f"127.0.0.1:{up}",)) as (lease, port),
        await trio.open_tcp_stream("127.0.0.1", port) as client,
    ):
        await client.send_all(f"GET http://127.0.0.1:{up}/ HTTP/1.1\r\n\r\n".encode())
        with trio.fail_after(10 * IDLE_S):
            answer = await read_all(client)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\nhalf")
    assert "127.0.0.1" in lease.notes


EARLY = (
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
)


async def _early_then_hello(stream: trio.SocketStream) -> None:
    await stream.send_all(EARLY + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")


async def _head_answer(stream: trio.SocketStream) -> None:
    """Answers `HEAD` as a server does: the head a `GET` would have, no body, and the
    connection kept open (it reads the next request)."""
    await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nKeep-Alive: timeout=5\r\n\r\n")
    await trio.sleep_forever()


async def _chunked_head_answer(stream: trio.SocketStream) -> None:
    await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    await trio.sleep_forever()


CASES = [
    (b"GET", _early_then_hello, EARLY + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"),
    (b"HEAD", _head_answer, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n"),
    (b"HEAD", _chunked_head_answer, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"),
]


@pytest.mark.parametrize(("method", "handle", "starts"), CASES)
async def test_1xx_and_head_answers_reach_a_plain_request_whole(
    method: bytes, handle: Handler, starts: bytes
) -> None:
    async with _upstream(handle) as (up, heads), proxy((f"localhost:{up}",)) as (_, port):
        with trio.fail_after(WAIT_S):
            async with await trio.open_tcp_stream("127.0.0.1", port) as client:
                await client.send_all(b"%s http://localhost:%d/ HTTP/1.1\r\n\r\n" % (method, up))
                answer = await read_all(client)
    assert heads[0].startswith(method + b" / HTTP/1.1\r\n")
    assert answer.startswith(starts)
    assert answer.count(b"Connection: close\r\n") == 1
    assert answer.endswith(b"hello" if method == b"GET" else b"\r\n\r\n")


async def _in_tunnel(lease: Lease, port: int, up: int, request: bytes) -> bytes:
    """`request` sent in a tunnel to `localhost:up` whose TLS the proxy terminates (the
    child trusting the run's CA alone), and the answer read to the connection's end (a
    ragged one raises BrokenResourceError)."""
    assert lease.ca is not None
    trusted = ssl.create_default_context(cadata=lease.ca.pem.decode())
    with trio.fail_after(WAIT_S):
        async with await trio.open_tcp_stream("127.0.0.1", port) as plain:
            await plain.send_all(f"CONNECT localhost:{up} HTTP/1.1\r\n\r\n".encode())
            assert (await plain.receive_some()).startswith(b"HTTP/1.1 200 ")
            client = trio.SSLStream(plain, trusted, server_hostname="localhost")
            await client.send_all(request)
            return await read_all(client)


@pytest.mark.parametrize(("method", "handle", "starts"), CASES)
async def test_1xx_and_head_answers_reach_a_request_read_in_a_tunnel_whole(
    tmp_path: Path, method: bytes, handle: Handler, starts: bytes
) -> None:
    """A child with a secret: the proxy terminates its TLS, reads its request, swaps the
    placeholder, and sends the answer back in the child's TLS; the child reads it to a clean
    end (a `close_notify`, as curl and `ssl` expect of a body that ends with the connection)."""
    test_ca = egressca.RunCA()
    (ca_file := tmp_path / "ca.pem").write_bytes(test_ca.pem)
    async with (
        _upstream(handle, test_ca.server_context("localhost")) as (up, heads),
        proxy((f"localhost:{up}",)) as (lease, port),
    ):
        placeholder = lease.add_secret("TOKEN", "s3cr3t", (f"localhost:{up}",))
        lease.upstream = egressca.upstream_context(str(ca_file))
        request = f"{method.decode()} / HTTP/1.1\r\nAuthorization: {placeholder}\r\n\r\n"
        answer = await _in_tunnel(lease, port, up, request.encode())
    assert heads[0].startswith(method + b" / HTTP/1.1\r\n")
    assert b"Authorization: s3cr3t\r\n" in heads[0]
    assert answer.startswith(starts)
    assert answer.endswith(b"hello" if method == b"GET" else b"\r\n\r\n")


async def test_a_body_that_ends_with_the_connection_ends_cleanly_in_a_tunnel(
    tmp_path: Path,
) -> None:
    """An answer framed by the end of its connection (no length, not chunked), read inside
    a tunnel whose TLS the proxy terminates: the child must read a `close_notify` to know
    the body is whole."""

    async def until_close(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\n\r\nall of it")

    test_ca = egressca.RunCA()
    (ca_file := tmp_path / "ca.pem").write_bytes(test_ca.pem)
    async with (
        _upstream(until_close, test_ca.server_context("localhost")) as (up, _),
        proxy((f"localhost:{up}",)) as (lease, port),
    ):
        lease.add_secret("TOKEN", "s3cr3t", (f"localhost:{up}",))
        lease.upstream = egressca.upstream_context(str(ca_file))
        answer = await _in_tunnel(lease, port, up, b"GET / HTTP/1.1\r\n\r\n")
    assert answer.endswith(b"\r\n\r\nall of it")
