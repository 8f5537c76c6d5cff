"""What clients still sending hold of the service: unfinished WebSocket messages and `/mcp`
bodies share one budget (`--max-unfinished-bytes`), and an endpoint that takes no messages
refuses one at its first frame. A real service in process, raw sockets and stock clients."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import trio
import trio.testing
from test_door_bounds import _plain, wait_connections
from test_hardening import PY, _handshake, live_service, unconfined
from wsproto.frame_protocol import FrameProtocol, Opcode

from mcpx_hooks.supervisor.core.events import Event, EventKind
from mcpx_hooks.supervisor.service.server import Limits
from mcpx_hooks.supervisor.service.unfinished import OWN_BYTES


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
        # (`/v1/hooks` answers whole with its 101: a message there is never read, below.)
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


def _until_close(sock: socket.socket, sent: bytes) -> tuple[bytes, list[tuple[Opcode, object]]]:
    """After `sent`, what the server says up to its close frame: its HTTP head, its frames."""
    sock.sendall(sent)
    sock.settimeout(10)
    got = b""
    while True:
        chunk = sock.recv(65536)
        head, _, rest = (got := got + chunk).partition(b"\r\n\r\n")
        frames = _said(rest)
        if not chunk or any(op is Opcode.CLOSE for op, _ in frames):
            return head, frames


async def test_the_hooks_answer_does_not_depend_on_when_a_stray_message_lands(
    tmp_path: Path,
) -> None:
    # `/v1/hooks` is one message, then 1000; a client's message that landed after that
    # message was written and before its close was refused: 4400 after the hooks (89 of 100
    # with `websockets`, `ws.send("")` at once), or 4400 alone, sent with the head.
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        upgrade = (
            f"GET /v1/hooks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        stray = FrameProtocol(client=True, extensions=[]).send_data("")
        for ahead in (True, False):  # with the head; right behind it, as the 101 comes
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", port))
                try:
                    if ahead:
                        sent = upgrade + stray
                    else:
                        sock.sendall(upgrade)
                        sent = stray
                    head, said = await trio.to_thread.run_sync(_until_close, sock, sent)
                finally:
                    sock.close()
                assert head.startswith(b"HTTP/1.1 101"), head
                assert len(said) == 2, (ahead, said)
                (text_op, text), close = said
                assert text_op is Opcode.TEXT and isinstance(text, str), said
                assert json.loads(text)["type"] == "hooks"
                assert close == (Opcode.CLOSE, (1000, "complete")), (ahead, said)


async def test_unfinished_messages_and_bodies_share_one_budget_and_the_others_go_on(
    tmp_path: Path,
) -> None:
    # Every socket could hold an unfinished message of up to the cap: 200 raw sockets each
    # holding 1 MiB on /v1/events added 214 MB to `serve`, and /mcp bodies the same.
    limits = Limits(max_unfinished_bytes=100_000)
    async with live_service(unconfined(tmp_path), tmp_path, limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        head, holder = await trio.to_thread.run_sync(_handshake, port, "/v1/exec")
        try:
            assert head.startswith(b"HTTP/1.1 101"), head
            client = FrameProtocol(client=True, extensions=[])
            part = client.send_data("x" * (OWN_BYTES + 90_000), fin=False)
            await trio.to_thread.run_sync(holder.sendall, part)
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)
            assert live.service.unfinished.held == 90_000
            # A request past what is left is told to try again later (1013)...
            big = {"argv": [PY, "-c", "print(len(input()))"], "stdin": "y" * (OWN_BYTES + 20_000)}
            objects, close = await live.read("/v1/exec", big)
            assert close == 1013, objects
            assert objects[-1]["error"] == "try-again-later"
            assert "--max-unfinished-bytes" in objects[-1]["message"]
            # ...as is an /mcp body (503, Retry-After); a request within its own bytes goes on.
            body = b"{" + b" " * (OWN_BYTES + 20_000) + b"}"
            got = await _plain(
                port,
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body,
            )
            assert got.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1\r\n" in got, got[:300]
            assert b"--max-unfinished-bytes" in got
            assert live.service.unfinished.held == 90_000
            objects, close = await live.read("/v1/exec", {"argv": ["echo", "hi"]})
            assert close == 1000 and any(o.get("text") == "hi" for o in objects), objects
        finally:
            holder.close()
        # The holder gone, its bytes are given back: the large request now runs.
        with trio.fail_after(5):
            await wait_connections(live.service, 0)
        assert live.service.unfinished.held == 0
        objects, close = await live.read("/v1/exec", big)
        assert close == 1000 and any(o.get("text") == str(OWN_BYTES + 20_000) for o in objects)


async def test_a_message_not_whole_in_time_is_refused_4408_and_its_bytes_given_back(
    tmp_path: Path,
) -> None:
    # A client that began a message and never ended it (a follower answering pings, say)
    # held its bytes, and its share of the budget, as long as its socket lived.
    limits = Limits(message_s=0.5)
    async with live_service(unconfined(tmp_path), tmp_path, limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        head, sock = await trio.to_thread.run_sync(_handshake, port, "/v1/exec")
        try:
            assert head.startswith(b"HTTP/1.1 101"), head
            part = FrameProtocol(client=True, extensions=[]).send_data("x" * 500_000, fin=False)
            sock.sendall(part)
            got = await trio.to_thread.run_sync(_read_for, sock, 5.0)
        finally:
            sock.close()
        said = "a message did not come whole within 0.5 s of its first frame"
        (text_op, text), (close_op, close) = _said(got)
        assert text_op is Opcode.TEXT and isinstance(text, str)
        assert (json.loads(text)["code"], json.loads(text)["message"]) == (4408, said)
        assert (close_op, close) == (Opcode.CLOSE, (4408, said))
        assert live.service.unfinished.held == 0


async def test_a_hooks_client_that_never_reads_is_cut_after_the_stall_bound(
    tmp_path: Path,
) -> None:
    # `/v1/hooks` writes its answer with its 101; that write had no bound, so a client that
    # never read a large answer held its socket, and a seat, for as long as it stayed.
    hooks = "".join(
        f'[[hooks]]\nname = "h{i}"\non = "script"\nphase = "before"\nrun = ["{"x" * 500}"]\n'
        for i in range(6000)
    )
    limits = Limits(send_stall_s=1.0)
    async with live_service(unconfined(tmp_path, hooks), tmp_path, limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        kinds = [EventKind.CLIENT_CLOSED]
        try:
            async with live.runtime.bus.subscribe(kinds=kinds) as closed:
                sock.sendall(
                    f"GET /v1/hooks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\n\r\n".encode()
                )
                with trio.fail_after(10):  # (its answer is ~4.9 MB: more than the buffers)
                    event = await closed.__anext__()
            assert isinstance(event, Event) and event.data["code"] is None  # cut, never read
        finally:
            sock.close()
