"""The service's front door against clients that push on its edges: budgets met by sockets
whose handshakes overlap, and requests that bend HTTP and the WebSocket handshake. A real
service in process (`test_hardening.live_service`), raw sockets as the clients.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
import trio
from test_hardening import live_service, unconfined
from test_protocol import client_hello

from mcpx_hooks.supervisor.core.frames import EndFrame, OutputFrame, StartFrame, blank
from mcpx_hooks.supervisor.run.journals import Journals
from mcpx_hooks.supervisor.service.server import Limits

READ_S = 20.0


def upgrade(path: str, port: int, key: str | None = None, extra: str = "") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode() if key is None else key
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        f"Sec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()


async def read_head(stream: trio.SocketStream) -> bytes:
    """The answer's head (and whatever came with it), or all there was until EOF."""
    got = b""
    with trio.fail_after(READ_S):
        while b"\r\n\r\n" not in got:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            got += chunk
    return got


async def read_all(stream: trio.SocketStream) -> bytes:
    got = b""
    with trio.fail_after(READ_S):
        while chunk := await stream.receive_some(65536):
            got += chunk
    return got


# ---- budgets met all at once ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "limits", "cap"),
    [
        ("/v1/events", Limits(max_idle=5), 5),
        ("/v1/hooks", Limits(max_idle=5), 5),
        ("/v1/exec", Limits(max_connections=10), 10),
    ],
)
async def test_sockets_whose_handshakes_overlap_are_held_to_the_caps(
    tmp_path: Path, path: str, limits: Limits, cap: int
) -> None:
    async with live_service(unconfined(tmp_path), tmp_path, limits=limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(4 * cap)]
        heads: list[bytes] = []

        async def handshake(stream: trio.SocketStream) -> None:
            await stream.send_all(upgrade(path, port))
            heads.append(await read_head(stream))

        try:
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(handshake, stream)
            statuses = sorted(head[9:12] for head in heads)
            assert statuses == [b"101"] * cap + [b"503"] * (3 * cap), statuses
            assert live.service.seats.admitted == cap
        finally:
            for stream in streams:
                await stream.aclose()
        with trio.fail_after(READ_S):
            await live.service._wait_connections()
        assert (live.service.seats.admitted, live.service.seats.idle) == (0, 0)
        # Every seat was given back: the caps admit as many again.
        again = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(cap)]
        try:
            for stream in again:
                await stream.send_all(upgrade(path, port))
                assert (await read_head(stream)).startswith(b"HTTP/1.1 101")
        finally:
            for stream in again:
                await stream.aclose()


# ---- requests that bend HTTP ----------------------------------------------------------------


async def ask_raw(port: int, data: bytes) -> bytes:
    """Sends `data` on a new connection; everything the server answers until it closes."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(data)
        return await read_all(stream)


@pytest.mark.parametrize("size", [17_000, 40_000, 63_000])
async def test_a_complete_head_over_16_kib_is_431(tmp_path: Path, size: int) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * size + b"\r\n\r\n"
        answer = await ask_raw(port, head)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
        assert b'"message":"the request head is over 16384 bytes"' in answer
        ok = await ask_raw(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 "), ok[:100]


async def test_a_tls_client_on_the_plain_port_is_told_so_in_words(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        answer = await ask_raw(port, client_hello())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert json.loads(body) == {
        "type": "error",
        "code": 400,
        "message": "malformed HTTP request: the request is not HTTP (is this a TLS client on a"
        " plain port? it speaks HTTP)",
    }


# ---- the WebSocket handshake ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "extra", "status", "said"),
    [
        ("short", "", b"400", 'Sec-WebSocket-Key \\"short\\" is not the base64 of 16 bytes'),
        (None, "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n", b"400", "2 Sec-WebSocket-Key"),
    ],
)
async def test_an_upgrade_with_a_bad_key_is_refused(
    tmp_path: Path, key: str | None, extra: str, status: bytes, said: str
) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        answer = await ask_raw(port, upgrade("/v1/events", port, key, extra))
    assert answer[9:12] == status, answer[:200]
    assert said.encode() in answer, answer


@pytest.mark.parametrize("version", ["8", "abc"])
async def test_an_upgrade_of_another_version_is_426_saying_which(
    tmp_path: Path, version: str
) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        request = upgrade("/v1/events", port).replace(
            b"Version: 13", f"Version: {version}".encode()
        )
        answer = await ask_raw(port, request)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 426 "), head
    assert b"\r\nsec-websocket-version: 13\r\n" in head.lower()
    assert json.loads(body)["message"] == (
        f'bad WebSocket handshake: Sec-WebSocket-Version "{version}" is not spoken here (only 13)'
    )


# ---- a client that stops reading --------------------------------------------------------------


async def test_a_download_the_client_stops_reading_is_cut_after_the_send_bound(
    tmp_path: Path,
) -> None:
    # A run's download (and an artifact) is written a piece at a time; a client that stopped
    # reading held its connection, and the piece it was being sent, for as long as it liked.
    journals = Journals(256)
    journal = journals.open("big")
    journal.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
    while journal.cost < 48 << 20:  # past what the kernel's buffers take on both sides
        journal.offer(blank(OutputFrame, text="y" * 60_000))
    journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    whole = sum(len(line) + 1 for line in journal.lines)
    limits = Limits(send_stall_s=1.0)
    async with live_service(
        unconfined(tmp_path), tmp_path, limits=limits, journals=journals
    ) as live:
        port = int(live.url.rsplit(":", 1)[1])
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            head = f"GET /v1/runs/big/frames.ndjson HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
            await stream.send_all(head.encode())
            await trio.sleep(3)  # not reading: the server's write waits, past its bound
            got = bytearray()
            with trio.fail_after(READ_S):  # the connection was ended: EOF, not a hang
                while chunk := await stream.receive_some(1 << 20):
                    got += chunk
        assert got.startswith(b"HTTP/1.1 200 ")
        assert len(got) < whole  # cut short, its last chunk never sent
        assert not got.endswith(b"0\r\n\r\n")
