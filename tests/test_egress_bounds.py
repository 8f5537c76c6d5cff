"""The egress proxy against a child that opens connections without end: the real proxy (a
lease serving a listening socket, as the spawner hands it one) and real sockets. A child has
at most `CONNECTIONS_MAX` connections served at once, past which it is answered `503`; the
proxy holds a bounded number of descriptors for it however many it opens; a connection has
`HEAD_TIMEOUT_S` to send its request's head; a refusal is read by the client, not reset; and
the proxy goes on accepting after `accept` finds no descriptor left."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from mcpx_hooks.supervisor.process import egress
from mcpx_hooks.supervisor.process.egress import EgressProxy, Lease

#: Long enough for any answer on loopback; a connection still open past it hangs.
WAIT_S = 5.0
#: A request the proxy answers itself (`403`: the lease allows no host).
REFUSED = b"GET http://blocked.example/ HTTP/1.1\r\nHost: blocked.example\r\n\r\n"


@contextlib.asynccontextmanager
async def proxy(network: tuple[str, ...] = ()) -> AsyncIterator[tuple[Lease, int]]:
    """A lease allowing `network` (no host), serving a loopback listener; its port."""
    async with EgressProxy().open_lease(network) as lease:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(256)
        port = listener.getsockname()[1]
        lease.serve(listener.detach())
        yield lease, port


async def read_all(stream: trio.abc.Stream) -> bytes:
    got = b""
    while chunk := await stream.receive_some(65536):
        got += chunk
    return got


async def _ask(port: int, sent: bytes = REFUSED) -> bytes:
    """What a client sending `sent` reads until the proxy ends the connection."""
    with trio.fail_after(WAIT_S):
        async with await trio.open_tcp_stream("127.0.0.1", port) as client:
            await client.send_all(sent)
            return await read_all(client)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_head_over_its_bound_is_answered_431_the_client_reads() -> None:
    """The proxy answered `431` and closed while the client was still sending its head: the
    client read a reset, not the answer. Now it reads the answer, then the end."""
    sent = b"GET http://blocked.example/ HTTP/1.1\r\nX: " + b"a" * (4 * egress.http.HEAD_BYTES)
    async with proxy() as (_, port):
        with trio.fail_after(WAIT_S):
            async with await trio.open_tcp_stream("127.0.0.1", port) as client:
                await client.send_all(sent)
                await client.send_eof()
                answer = await read_all(client)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert answer.endswith(f"request head over {egress.http.HEAD_BYTES} bytes\n".encode())


async def test_a_connection_that_sends_no_head_is_answered_408(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A connection that sent nothing was held until the child's timeout (a tool server's
    child has none: for as long as the server ran). Now it has `HEAD_TIMEOUT_S`."""
    async with proxy() as (_, port), await trio.open_tcp_stream("127.0.0.1", port) as client:
        start = trio.current_time()
        with trio.fail_after(10 * egress.HEAD_TIMEOUT_S):
            answer = await read_all(client)
        assert trio.current_time() - start == pytest.approx(egress.HEAD_TIMEOUT_S)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert answer.endswith(f"no request head within {egress.HEAD_TIMEOUT_S:g} s\n".encode())


async def test_connections_past_the_bound_are_answered_503_and_a_freed_place_serves() -> None:
    """A child could have any number of connections served at once, each holding one of the
    supervisor's descriptors (two with its upstream). Now the one past `CONNECTIONS_MAX` is
    answered `503`, saying why, and kept as a refusal of its host with those words (what the
    run's `egress` frame says); a host not listed is still `403`; once one ends, the next is
    served."""
    listed = b"GET http://localhost:1/ HTTP/1.1\r\nHost: localhost:1\r\n\r\n"
    async with proxy(("localhost:1",)) as (lease, port), contextlib.AsyncExitStack() as held:
        idle = [
            await held.enter_async_context(await trio.open_tcp_stream("127.0.0.1", port))
            for _ in range(egress.CONNECTIONS_MAX)
        ]
        await trio.testing.wait_all_tasks_blocked()
        answer = await _ask(port, listed)
        assert answer.startswith(b"HTTP/1.1 503 Too Many Connections\r\n")
        assert f"{egress.CONNECTIONS_MAX} connections".encode() in answer
        assert lease.refused == {"localhost": 1}
        assert lease.notes["localhost"].startswith("too many connections at once: ")
        assert (await _ask(port)).startswith(b"HTTP/1.1 403 Forbidden\r\n")
        await idle[0].aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert (await _ask(port, listed)).startswith(b"HTTP/1.1 502 Bad Gateway\r\n")


async def test_a_flood_of_connections_holds_a_bounded_number_of_descriptors() -> None:
    """Each connection the child opened was accepted at once: a child opening thousands held
    as many of the supervisor's descriptors. Now the proxy holds at most `HELD_MAX` for it
    (those it serves and those it is refusing); the rest wait in the child's own queue."""
    flood = egress.HELD_MAX + 100
    async with proxy() as (_, port), contextlib.AsyncExitStack() as held:
        before = _fds()
        for _ in range(flood):
            await held.enter_async_context(await trio.open_tcp_stream("127.0.0.1", port))
        await trio.testing.wait_all_tasks_blocked()
        assert _fds() - before - flood <= egress.HELD_MAX


async def test_the_proxy_accepts_again_after_running_out_of_descriptors() -> None:
    """`accept` failing for want of a descriptor (EMFILE) ended the child's proxy for good:
    every later connection was refused. Now it waits and tries again."""
    async with proxy() as (_, port):
        # (connected before the proxy first accepts: in its queue, a descriptor each here)
        waiting = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))
            await trio.testing.wait_all_tasks_blocked()  # (the proxy met EMFILE)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for sock in waiting:
            sock.close()
        assert (await _ask(port)).startswith(b"HTTP/1.1 403 Forbidden\r\n")


async def test_children_flooding_together_hold_a_bounded_share_of_the_descriptors() -> None:
    """Each child's bound held, but children flooding together held `HELD_MAX` connections
    each, without end in all: a thousand at once, more than the supervisor's open-files limit
    (the database, the service's clients, the next child's pipes then failed). Now all of
    them hold at most the limit's `TOTAL_SHARE`-th: past it, a child's next connection waits
    (in its own queue) until another child's ends, and is then served."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    share = getattr(egress, "TOTAL_SHARE", 4)
    resource.setrlimit(resource.RLIMIT_NOFILE, (2 * egress.HELD_MAX * share, hard))
    try:
        proxy = EgressProxy()  # (room for two children's connections, no more)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    ports = []
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):
            lease = await stack.enter_async_context(proxy.open_lease(()))
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(256)
            ports.append(listener.getsockname()[1])
            lease.serve(listener.detach())
        floods: list[list[trio.SocketStream]] = [[], []]
        for port, flood in zip(ports, floods, strict=False):
            for _ in range(egress.HELD_MAX):
                flood.append(await trio.open_tcp_stream("127.0.0.1", port))
        third = socket.create_connection(("127.0.0.1", ports[2]))
        third.sendall(REFUSED)
        await trio.testing.wait_all_tasks_blocked()
        third.setblocking(False)
        with pytest.raises(BlockingIOError):
            third.recv(100)  # (not accepted: the two floods hold every place)
        for stream in floods[0]:
            await stream.aclose()
        sock = trio.socket.from_stdlib_socket(third)
        with trio.fail_after(WAIT_S):
            assert (await sock.recv(100)).startswith(b"HTTP/1.1 403 Forbidden\r\n")
        sock.close()
        for stream in floods[1]:
            await stream.aclose()


async def test_a_tunnel_to_a_host_that_cannot_be_reached_is_answered_502_not_200() -> None:
    """A `CONNECT` was answered `200 Connection Established` before the upstream was even
    connected, and a refused one then got `502` as the tunnel's first bytes: a TLS client
    read "wrong version number", and a flood's tunnels counted as made before their
    upstreams were. Now the tunnel is established once its upstream is: `502` is the
    proxy's answer, and nothing precedes it."""
    async with proxy(("localhost:1",)) as (_, port):
        answer = await _ask(port, b"CONNECT localhost:1 HTTP/1.1\r\nHost: localhost:1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), answer
    assert b"cannot reach localhost:1" in answer
