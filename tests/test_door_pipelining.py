"""Requests pipelined on one connection (RFC 9112, 9.3.2): each plain one answered in turn,
the next head held to the bounds of the first. A real service in process
(`test_hardening.live_service`) and a raw socket, as `printf ... | nc` sends them."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import trio
from test_door_bounds import wait_connections
from test_hardening import _read_to_eof, live_service, unconfined

from mcpx_hooks.supervisor.service.server import Limits

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
UPGRADE = (
    b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


def _sent_at_once(port: int, data: bytes) -> bytes:
    """What the server answers to `data`, sent in one write, up to its end of the stream."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        return _read_to_eof(sock)


def _heads(got: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.1 \d{3}[^\r]*\r\n(?:[^\r]+\r\n)*", got)


async def _answers(url: str, data: bytes) -> bytes:
    return await trio.to_thread.run_sync(_sent_at_once, int(url.rsplit(":", 1)[1]), data)


async def test_requests_sent_back_to_back_are_each_answered_in_order(tmp_path: Path) -> None:
    # Only the first was answered, with `Connection: close`, and the rest dropped.
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        runs = b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        head = b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        got = await _answers(live.url, HEALTH + runs + head + HEALTH)
        heads = _heads(got)
        assert [h[:12] for h in heads] == [b"HTTP/1.1 200"] * 4, got
        assert [b"connection: close" in h.lower() for h in heads] == [False] * 3 + [True]
        assert got.count(b'"ok": true') == 2 and b"\r\n\r\n[]" in got, got
        with trio.fail_after(5):  # (the connection ends with the last answer)
            await wait_connections(live.service, 0)


async def test_an_upgrade_may_end_a_pipeline(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path, Limits(ping_s=0.2)) as live:
        got = await _answers(live.url, HEALTH + UPGRADE)  # (the socket never answers pings)
        assert [h[:12] for h in _heads(got)] == [b"HTTP/1.1 200", b"HTTP/1.1 101"], got


async def test_the_next_head_is_bounded_as_the_first(tmp_path: Path) -> None:
    limits = Limits(handshake_s=0.3)
    async with live_service(unconfined(tmp_path), tmp_path, limits) as live:
        long = b"GET /healthz HTTP/1.1\r\nX-Long: " + b"a" * 17_000 + b"\r\n\r\n"
        got = await _answers(live.url, HEALTH + long)
        assert [h[:12] for h in _heads(got)] == [b"HTTP/1.1 200", b"HTTP/1.1 431"], got
        with trio.fail_after(5):
            got = await _answers(live.url, HEALTH + b"GET /healthz HTTP/1.1\r\nHo")
        assert [h[:12] for h in _heads(got)] == [b"HTTP/1.1 200", b"HTTP/1.1 408"], got
        got = await _answers(live.url, HEALTH + b"NOT HTTP\r\n\r\n")
        assert [h[:12] for h in _heads(got)] == [b"HTTP/1.1 200", b"HTTP/1.1 400"], got


async def test_a_request_that_asks_close_ends_the_pipeline(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        close = HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
        got = await _answers(live.url, close + HEALTH)
        assert len(_heads(got)) == 1 and b"connection: close" in got.lower(), got
        post = b"POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"
        got = await _answers(live.url, post + HEALTH)  # (a body not read: nothing after it)
        assert [h[:12] for h in _heads(got)] == [b"HTTP/1.1 405"], got


def _pipelined_unread(port: int, requests: int) -> socket.socket:
    """A client that pipelines `requests` and never reads an answer (a small receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(HEALTH * requests)
    return sock


async def test_a_client_that_pipelines_without_reading_is_not_held_open(tmp_path: Path) -> None:
    # The server answered until the socket was full, then waited the whole send bound (60 s)
    # for the client to read, the connection holding no seat: any number of them, no token.
    # Now the answer made while earlier ones are unsent is the last, and fits in the buffer.
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        socks = [await trio.to_thread.run_sync(_pipelined_unread, port, 2000) for _ in range(3)]
        try:
            with trio.fail_after(10):
                await wait_connections(live.service, 0)
        finally:
            for sock in socks:
                sock.close()


async def test_a_pipeline_ends_at_the_first_answer_of_a_server_shutting_down(
    tmp_path: Path,
) -> None:
    # Each request of a pipeline got its 503 until the drain cut the connection.
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        live.service.stopping = True
        got = await _answers(live.url, HEALTH * 4)
        live.service.stopping = False  # (the service's own end, after the test)
        heads = _heads(got)
        assert [h[:12] for h in heads] == [b"HTTP/1.1 503"], got
        assert b"connection: close" in heads[0].lower()
