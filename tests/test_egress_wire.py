"""The egress proxy against a hostile client, byte by byte: the real proxy (a lease serving a
listening socket, as the spawner hands it one) and real sockets on both sides. One request a
connection reaches the upstream, framed as its head says, with the host the proxy judged;
nothing the client sends after it does."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
import trio

from mcpx_hooks.supervisor.process.egress import EgressProxy

#: Long enough for any answer on loopback; a connection still open past it hangs.
WAIT_S = 5.0


async def _keep_alive_upstream(
    *, task_status: trio.TaskStatus[tuple[int, list[bytes]]] = trio.TASK_STATUS_IGNORED
) -> None:
    """An upstream that answers every request it reads on a connection, and keeps the
    connection open whatever the request says (as some servers do); it keeps what it read."""
    got: list[bytes] = []
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        async with stream:
            while chunk := await stream.receive_some(65536):
                data += chunk
                got.append(chunk)
                while (end := _request_end(data)) is not None:
                    head, data = data[:end], data[end:]
                    body = head.split(b"\r\n", 1)[0] + b"\n"
                    await stream.send_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    )

    task_status.started((listeners[0].socket.getsockname()[1], got))
    await trio.serve_listeners(handle, listeners)


def _request_end(data: bytes) -> int | None:
    """Where the first whole request in `data` ends (its body read as the tests send one)."""
    if (at := data.find(b"\r\n\r\n")) < 0:
        return None
    head, end = data[:at].lower(), at + 4
    if b"content-length: " in head:
        end += int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
        return end if len(data) >= end else None
    if b"chunked" in head:
        last = data.find(b"\r\n0\r\n", at)
        return None if last < 0 or (tail := data.find(b"\r\n\r\n", last + 3)) < 0 else tail + 4
    return end


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[int, list[bytes]]]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(_keep_alive_upstream)
        nursery.cancel_scope.cancel()


async def _through(upstream_port: int, sent: bytes, network: tuple[str, ...] = ()) -> bytes:
    """What a client that sends `sent` to a proxy allowing `localhost:UPSTREAM` (and
    `network`) reads until the proxy ends the connection; `TooSlowError` if it never does."""
    async with EgressProxy().open_lease((f"localhost:{upstream_port}", *network)) as lease:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        lease.serve(listener.detach())
        got = b""
        with trio.fail_after(WAIT_S):
            async with await trio.open_tcp_stream("127.0.0.1", port) as client:
                await client.send_all(sent)
                while chunk := await client.receive_some(65536):
                    got += chunk
        return got


async def test_a_pipelined_request_for_another_port_never_reaches_the_allowed_upstream(
    upstream: tuple[int, list[bytes]],
) -> None:
    """A second request on the same keep-alive connection, naming another port, was passed
    on to the allowed upstream, which answered it as if it were the other port's (or, one
    that did not, left the client waiting until its hook's timeout). Now the upstream reads
    the one request the proxy judged, the client gets its answer with `Connection: close`,
    and the connection ends."""
    port, got = upstream
    other = port + 1
    sent = (
        f"GET http://localhost:{port}/a HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"
        f"GET http://localhost:{other}/b HTTP/1.1\r\nHost: localhost:{other}\r\n\r\n"
    ).encode()
    answer = await _through(port, sent)
    assert answer.count(b"HTTP/1.1 ") == 1
    assert b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b"\r\n\r\nGET /a HTTP/1.1\n")
    assert b"".join(got) == (
        f"GET /a HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n".encode()
    )


async def test_the_upstream_is_told_the_host_the_proxy_judged(
    upstream: tuple[int, list[bytes]],
) -> None:
    """A `Host` naming another site than the URL went to the allowed address as it was: a
    server with many sites (a CDN) served the one the proxy never judged."""
    port, got = upstream
    sent = f"GET http://localhost:{port}/a HTTP/1.1\r\nHost: evil.example\r\n\r\n".encode()
    await _through(port, sent)
    assert got[0].split(b"\r\n")[1] == f"Host: localhost:{port}".encode()
    assert b"evil.example" not in b"".join(got)


@pytest.mark.parametrize(
    ("body", "sent_on"),
    [
        (b"Content-Length: 5\r\n\r\nhello", b"GET http://x.example/ HTTP/1.1\r\n\r\n"),
        (
            b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
            b"GET http://x.example/ HTTP/1.1\r\n\r\n",
        ),
    ],
)
async def test_a_body_goes_up_as_its_head_frames_it_and_nothing_after(
    upstream: tuple[int, list[bytes]], body: bytes, sent_on: bytes
) -> None:
    port, got = upstream
    head = f"POST http://localhost:{port}/ HTTP/1.1\r\n".encode()
    await _through(port, head + body + sent_on)
    assert b"".join(got).endswith(b"Connection: close\r\n\r\n" + body.split(b"\r\n\r\n", 1)[1])


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: 5\r\nContent-Length: 6\r\n",
        b"Transfer-Encoding: gzip\r\n",
        b"Content-Length: -1\r\n",
    ],
)
async def test_a_request_framed_two_ways_is_refused(
    upstream: tuple[int, list[bytes]], framing: bytes
) -> None:
    """The way requests are smuggled past a proxy: the proxy and the upstream would read
    its end at different places, and the upstream a request the proxy never judged."""
    port, got = upstream
    sent = f"POST http://localhost:{port}/ HTTP/1.1\r\n".encode() + framing + b"\r\nhello"
    answer = await _through(port, sent)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(b"\r\n\r\nexpected one Content-Length, or chunked alone\n")
    assert got == []
