"""What clients still sending hold of the service: an endpoint that takes no messages refuses
one at its first frame. A real service in process, raw sockets and stock clients."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import trio
import trio.testing
from test_hardening import _handshake, live_service, unconfined
from wsproto.frame_protocol import FrameProtocol, Opcode


def _read_for(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends until it hangs up, or what came within `seconds`."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        pass
    return got


def _said(data: bytes) -> list[tuple[Opcode, object]]:
    client = FrameProtocol(client=True, extensions=[])
    client.receive_bytes(data)
    return [(f.opcode, f.payload) for f in client.received_frames()]


async def test_a_message_to_the_events_socket_is_refused_at_its_first_frame(
    tmp_path: Path,
) -> None:
    # `/v1/events` takes no messages, yet waited for the whole of one (up to 1 MiB) before
    # refusing it: a client that sent the head of one and a few bytes heard nothing.
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        # (`/v1/hooks` too, as `test_protocol` shows: live, its answer races the message.)
        for path in ("/v1/events",):
            head, sock = await trio.to_thread.run_sync(_handshake, port, path)
            try:
                assert head.startswith(b"HTTP/1.1 101"), head
                frame = FrameProtocol(client=True, extensions=[]).send_data("x" * 1_000_000)
                sock.sendall(frame[:200])  # its head and the first bytes
                got = await trio.to_thread.run_sync(_read_for, sock, 5.0)
            finally:
                sock.close()
            said = [(op, p) for op, p in _said(got) if op is Opcode.CLOSE or '"error"' in str(p)]
            assert len(said) == 2, (path, got[:300])
            (text_op, text), (close_op, close) = said
            assert text_op is Opcode.TEXT and isinstance(text, str)
            error = json.loads(text)
            assert (error["code"], error["message"]) == (4400, "this endpoint takes no messages")
            assert (close_op, close) == (Opcode.CLOSE, (4400, "this endpoint takes no messages"))
