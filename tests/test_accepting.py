"""What a connection costs the service's loop before its first byte: a client that opens and
closes sockets as fast as it can must not take the loop from everyone else."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.service.accepting import ACCEPT_BATCH, Handshakes, serve_accepting
from mcpx_hooks.supervisor.service.server import Listening, Service, ServiceOptions

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def churn(port: int, times: int) -> None:
    """`times` sockets opened and closed at once, before a byte: half reset, half ended."""
    for i in range(times):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            if i % 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def healthz(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(HEALTHZ)
        return sock.recv(12)


async def test_sockets_closed_before_their_first_byte_start_no_task(no_leaks: None) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    handled: list[bytes] = []

    async def handler(stream: trio.SocketStream, number: int) -> None:
        handled.append(await stream.receive_some(100))
        await stream.send_all(b"HTTP/1.1 204 No Content\r\n\r\n")

    async def make_room() -> bool:
        return False

    # Queued before anything is accepted: 2 batches' worth of churn, then one real request.
    await trio.to_thread.run_sync(churn, port, 2 * ACCEPT_BATCH)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_accepting, listeners, handler, nursery, make_room)
        assert await trio.to_thread.run_sync(healthz, port) == b"HTTP/1.1 204"
        nursery.cancel_scope.cancel()
    assert handled == [HEALTHZ]  # one task: the 128 sockets before it were closed at once


async def test_a_connection_is_closed_once_without_a_cancelled_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    """`trio.aclose_forcefully` raises and catches a `Cancelled`: each connection's stream
    was closed so three times, a third of what a churned socket cost the loop."""
    forceful: list[Any] = []
    real = trio.aclose_forcefully

    async def counted(resource: Any) -> None:
        forceful.append(resource)
        await real(resource)

    monkeypatch.setattr(trio, "aclose_forcefully", counted)
    (tmp_path / "c.toml").write_text('[defaults]\nsandbox = "none"\n')
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    options = ServiceOptions(port=0, cwd=str(tmp_path), environ={})
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        for _ in range(3):
            assert await trio.to_thread.run_sync(healthz, listening.port) == b"HTTP/1.1 200"
        with socket.create_connection(("127.0.0.1", listening.port)) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # (half a head, then gone)
        nursery.cancel_scope.cancel()
    assert forceful == []


async def test_past_the_budget_the_first_accepted_handshake_is_dropped_whatever_starts_first() -> (
    None
):
    """The handlers of one batch of connections start in no set order (Trio's): the one
    dropped past `--max-pending` is the first accepted, not the first to start, so a client
    accepted after a burst of stalled sockets is never the one dropped."""
    handshakes = Handshakes(2)
    with (
        handshakes.pending(3, 30) as third,
        handshakes.pending(1, 30) as first,
        handshakes.pending(2, 30) as second,
    ):
        assert len(handshakes) == 2
    assert first.dropped and not second.dropped and not third.dropped
    with (
        handshakes.pending(5, 30) as later,
        handshakes.pending(6, 30),
        handshakes.pending(4, 30) as early,
    ):
        assert early.dropped and not later.dropped  # (the first accepted may be the newcomer)
