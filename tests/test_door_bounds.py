"""The front door's bounds against clients that go quiet or push on them: a follower of a
quiet run whose machine vanished, plain HTTP connections held to the socket caps, `/mcp`
bodies read once. A real service in process (`test_hardening.live_service`), raw sockets and
stock clients."""

from __future__ import annotations

import contextlib
import importlib
import json
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
import trio
import trio.testing
import wsproto
import wsproto.events
from test_hardening import PY, _handshake, _read_to_eof, live_service, unconfined
from websockets.sync.client import ClientConnection, connect
from wsproto.frame_protocol import FrameProtocol, Opcode

from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.service.framerate import FRAME_BURST, FRAMES_PER_S, FrameRate
from mcpx_hooks.supervisor.service.protocol import ServerProtocol
from mcpx_hooks.supervisor.service.protocolevents import Ended
from mcpx_hooks.supervisor.service.server import Limits, Service, ServiceOptions
from mcpx_hooks.supervisor.service.streams import Wake, keep_alive

QUIET = "import time; print('up', flush=True); time.sleep(60)"


def _start_quiet_run(url: str, stack: contextlib.ExitStack) -> tuple[ClientConnection, str]:
    """An exec client (a stock one: it answers pings) of a run that prints a line, then
    sleeps for a minute, closed with `stack`; and the run's id."""
    ws = stack.enter_context(connect(url + "/v1/exec", proxy=None, open_timeout=10))
    ws.send(json.dumps({"argv": [PY, "-c", QUIET], "cancelOnDisconnect": True}))
    while True:
        lines = [json.loads(line) for line in str(ws.recv(timeout=20)).split("\n")]
        if any(line.get("type") == "stdout" for line in lines):
            return ws, lines[0]["runId"]


async def wait_connections(service: Service, most: int) -> None:
    """Until at most `most` connections are open."""
    while service.connections > most:
        await service._open_changed.wait()


async def test_a_follower_of_a_quiet_run_that_stops_answering_is_let_go(tmp_path: Path) -> None:
    # A follower whose machine vanished (no FIN, no pong) held its seat until the run ended:
    # only sockets that carry no run were pinged.
    async with live_service(unconfined(tmp_path), tmp_path, Limits(ping_s=0.3)) as live:
        port = int(live.url.rsplit(":", 1)[1])
        stack = contextlib.ExitStack()
        try:
            _, run_id = await trio.to_thread.run_sync(_start_quiet_run, live.url, stack)
            head, sock = await trio.to_thread.run_sync(_handshake, port, f"/v1/runs/{run_id}")
            assert head.startswith(b"HTTP/1.1 101"), head
            try:
                got = await trio.to_thread.run_sync(_read_to_eof, sock)  # the server hung up
            except TimeoutError:
                got = b"(still open)"
            finally:
                sock.close()
            assert b"\x89\x04" in got, got  # pinged, never answered
            with trio.fail_after(5):
                await wait_connections(live.service, 1)
            assert live.service.seats.admitted == 1  # the exec client, which answers, stays
            assert run_id in live.service._active
        finally:
            await trio.to_thread.run_sync(stack.close)  # (cancelOnDisconnect: the run ends)


def test_an_mcp_post_body_is_parsed_once_by_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check before the SDK's transport read a body with the model's `validate_json`,
    # about four times the cost of the SDK's own parse on a large body
    # (`bench/_mcp_body.py`); now one `from_json`, as the SDK's, read by every check.
    from mcpx_hooks.supervisor.service import mcpweb

    parsed: list[str] = []
    from_json = pydantic_core.from_json
    adapter = mcpweb.jsonrpc_message_adapter

    class Counting:
        def __getattr__(self, name: str) -> Any:
            if name.startswith("validate_json"):
                parsed.append(name)
            return getattr(adapter, name)

    def counted(data: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append("from_json")
        return from_json(data, *args, **kwargs)

    monkeypatch.setattr(mcpweb, "jsonrpc_message_adapter", Counting())
    monkeypatch.setattr(pydantic_core, "from_json", counted)
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}
    assert mcpweb._unreadable_body(json.dumps(call).encode()) is None
    assert parsed == ["from_json"]
    odd = {**call, "id": 2.0}
    assert mcpweb._unreadable_body(json.dumps(odd).encode()) == (-32600, mcpweb.ODD_ID)
    assert mcpweb._unreadable_body(b"[]") == (-32600, mcpweb.BATCH_REFUSED)


async def test_plain_requests_and_websockets_share_the_connection_cap(tmp_path: Path) -> None:
    # A plain request (a download, an /mcp body or event stream) held its connection
    # counted against no cap: any number of them, while WebSockets were held to 1024.
    limits = Limits(max_connections=2, handshake_s=30)
    async with live_service(unconfined(tmp_path), tmp_path, limits) as live:
        port = int(live.url.rsplit(":", 1)[1])
        holders = [await trio.to_thread.run_sync(_handshake, port, "/v1/events") for _ in "ab"]
        try:
            assert all(head.startswith(b"HTTP/1.1 101") for head, _ in holders)
            got = await _plain(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in got, got
            assert b"too many connections (the cap is 2)" in got
            # /mcp's says it as a JSON-RPC error, which MCP's SDK clients read out.
            mcp = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
            got = await _plain(port, mcp)
            assert got.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in got, got
            assert b'"error":{"code":-32603,"message":"too many connections (the cap' in got
        finally:
            for _, sock in holders:
                sock.close()
        with trio.fail_after(5):
            await wait_connections(live.service, 0)
        # Two /mcp bodies that never come hold the two seats; a WebSocket is refused.
        head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"
        async with trio.open_nursery() as nursery:
            slow = [await trio.open_tcp_stream("127.0.0.1", port) for _ in "ab"]
            for stream in slow:
                await stream.send_all(head)
            await trio.testing.wait_all_tasks_blocked(cushion=0.1)
            assert live.service.seats.admitted == 2
            answer, sock = await trio.to_thread.run_sync(_handshake, port, "/v1/hooks")
            sock.close()
            assert answer.startswith(b"HTTP/1.1 503 ") and b"too many connections" in answer
            for stream in slow:
                nursery.start_soon(stream.aclose)
        with trio.fail_after(5):
            await wait_connections(live.service, 0)
        assert live.service.seats.admitted == 0
        got = await _plain(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200 "), got


async def _plain(port: int, request: bytes) -> bytes:
    """A plain request's whole answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        got = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                got += chunk
    return got


class _SlowReader:
    """A connection whose pings wait `write_s` behind a message being written, each answered
    `pong_s` after it goes out (never, for None), by a task in `nursery`."""

    def __init__(self, nursery: trio.Nursery, write_s: float, pong_s: float | None) -> None:
        self.nursery, self.write_s, self.pong_s = nursery, write_s, pong_s

    async def send_ping(self) -> trio.Event:
        await trio.sleep(self.write_s)
        pong = trio.Event()
        if self.pong_s is not None:
            self.nursery.start_soon(self._answer, pong, self.pong_s)
        return pong

    @staticmethod
    async def _answer(pong: trio.Event, after: float) -> None:
        await trio.sleep(after)
        pong.set()


async def test_keep_alive_times_the_pong_from_the_ping_going_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A client reading a large message slowly (its ping written 45 s late, under the 60 s
    # bound of a write) that answers at once is not gone; one that never answers is, a
    # ping interval after its ping went out; one whose ping cannot be written in 60 s too.
    for write_s, pong_s, gone_at in ((45, 1, None), (0, None, 60), (90, 1, 90)):
        async with trio.open_nursery() as nursery:
            conn, wake = _SlowReader(nursery, write_s, pong_s), Wake(idle=False)
            began = trio.current_time()
            with trio.move_on_after(300):
                await keep_alive(conn, wake, 30, 60)  # type: ignore[arg-type]
            assert wake.gone is (gone_at is not None), (write_s, pong_s)
            if gone_at is not None:
                assert trio.current_time() - began == gone_at


def test_a_client_sending_frames_faster_than_the_budget_is_closed_1008() -> None:
    # Each frame costs the server ~15 µs of parsing however little it holds: a flood of
    # pings (or pongs, or empty fragments) read 64 KiB at a time held the service's loop
    # ~100-170 ms a read, and every other client's run waited (0.03 s -> 2 s).
    frames = FrameRate()
    p = ServerProtocol(max_message_bytes=1 << 20, too_big="{}", frames=frames)
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    p.receive_data(client.send(wsproto.events.Request(host="127.0.0.1", target="/v1/events")))
    list(p.events())
    client.receive_data(b"".join(p.accept()))
    list(client.events())
    frames.refill(0.0)
    ping = client.send(wsproto.events.Ping(payload=b"p"))
    p.receive_data(ping * (FRAME_BURST // 2))  # half the burst: answered
    frames.refill(0.5)  # (and 50 more a half second)
    p.receive_data(ping * (65536 // len(ping)))  # a read's worth: past the budget
    client.receive_data(p.data_to_send())
    said = list(client.events())
    pongs = [e for e in said if isinstance(e, wsproto.events.Pong)]
    assert len(pongs) == FRAME_BURST + int(FRAMES_PER_S / 2)
    (close,) = [e for e in said if isinstance(e, wsproto.events.CloseConnection)]
    reason = f"too many frames: at most {FRAME_BURST} at once, then {FRAMES_PER_S:g} a second"
    assert (close.code, close.reason) == (1008, reason)
    assert list(p.events()) == [Ended(1008, reason)]
    p.receive_data(ping)  # nothing more is read
    assert list(p.events()) == [] and p.data_to_send() == b""


def test_the_frame_budget_fills_again_at_its_rate() -> None:
    frames = FrameRate(rate=10, burst=5)
    frames.refill(100.0)
    assert [frames.take() for _ in range(6)] == [True] * 5 + [False]
    frames.refill(100.25)  # 2.5 frames
    assert [frames.take() for _ in range(3)] == [True, True, False]
    frames.refill(1000.0)  # never past the burst
    assert sum(frames.take() for _ in range(10)) == 5


async def test_a_ping_flood_on_a_socket_is_closed_1008_and_others_go_on(tmp_path: Path) -> None:
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        port = int(live.url.rsplit(":", 1)[1])
        head, sock = await trio.to_thread.run_sync(_handshake, port, "/v1/events")
        assert head.startswith(b"HTTP/1.1 101"), head
        client = FrameProtocol(client=True, extensions=[])  # (the handshake was by hand)
        try:
            sock.sendall(client.ping(b"p") * (FRAME_BURST + 1000))
            got = await trio.to_thread.run_sync(_read_to_eof, sock)
        finally:
            sock.close()
        client.receive_bytes(got)
        said = [frame.opcode for frame in client.received_frames()]
        assert said == [Opcode.PONG] * FRAME_BURST + [Opcode.CLOSE]
        _, close = await live.read("/v1/exec", {"argv": ["true"]})  # (the others go on)
        assert close == 1000


async def test_a_request_head_that_does_not_come_in_time_is_answered_408(tmp_path: Path) -> None:
    # A client that sends its head a byte at a time (or stops halfway) was closed on at the
    # handshake bound without a word: it could not tell a slow link from a refusal.
    async with live_service(unconfined(tmp_path), tmp_path, Limits(handshake_s=0.5)) as live:
        port = int(live.url.rsplit(":", 1)[1])
        got = await _plain(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        assert got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got
        assert got.endswith(b'"the request head did not come within 0.5 s"}'), got
        assert await _plain(port, b"") == b""  # (opened ahead, never used: not a request)
        got = await _plain(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200 "), got


async def test_a_plain_request_without_the_token_takes_no_seat(tmp_path: Path) -> None:
    # As an upgrade, a plain request counts once its access is granted: one without the
    # token is answered its refusal (or a route that asks none) at once and holds no seat,
    # so clients without the token cannot fill the cap for those that have it.
    limits = Limits(max_connections=1)
    options = ServiceOptions(port=0, cwd=str(tmp_path), token="t0ken", limits=limits)
    async with open_runtime(unconfined(tmp_path)) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening = await nursery.start(service.serve)
        try:
            head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"
            stream = await trio.open_tcp_stream("127.0.0.1", listening.port)
            async with stream:
                await stream.send_all(head)  # refused 401, its body read and dropped a while
                got = await stream.receive_some(65536)
                assert got.startswith(b"HTTP/1.1 401 "), got
                assert service.seats.admitted == 0
                asked = b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t0ken"
                answer = await _plain(listening.port, asked + b"\r\n\r\n")
                assert answer.startswith(b"HTTP/1.1 200 "), answer
        finally:
            service.stop()


#: A tool server declared (never started here): what has `serve` load the MCP SDK ahead.
A_SERVER = '[servers.words]\ncommand = ["/bin/true"]\n'
#: What `/mcp` imports when it is set up.
SDK = "mcpx_hooks.supervisor.service.mcpweb"


async def test_mcp_is_set_up_once_the_port_listens_not_at_the_first_request(
    tmp_path: Path,
) -> None:
    # The first /mcp request of a fresh `serve` waited for the MCP SDK's imports (0.8 s; the
    # next ones 4 ms): they are done in the background as soon as the port listens.
    async with live_service(unconfined(tmp_path, A_SERVER), tmp_path) as live:
        with trio.fail_after(30):
            await live.service.mcp.loaded.wait()  # with no request made
        assert live.service.mcp.sessions is not None and len(live.service.mcp.sessions) == 0


async def test_without_a_tool_server_mcp_is_loaded_at_its_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loaded ahead whatever the config, the SDK took `serve` from 38 to 82 MB at rest, and its
    # first second's clients met a busy process (the first run 121 ms against 30).
    from mcpx_hooks.supervisor.service import mcphttp

    imported: list[str] = []
    real = importlib.import_module

    def spy(name: str, package: str | None = None) -> Any:
        imported.append(name)
        return real(name, package)

    monkeypatch.setattr(mcphttp.importlib, "import_module", spy)
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        objects, close = await live.read("/v1/exec", {"argv": ["true"]})
        assert close == 1000, objects
        assert SDK not in imported
        port = int(live.url.rsplit(":", 1)[1])
        asked = f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        answer = await _plain(port, asked.encode())
        assert answer.startswith(b"HTTP/1.1 "), answer  # (refused or not, answered)
        with trio.fail_after(30):
            await live.service.mcp.loaded.wait()
        assert imported.count(SDK) == 1


async def test_a_stop_does_not_wait_for_the_sdk_being_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SIGTERM in `serve`'s first second waited for the load to end: 1.7-2.3 s to exit
    # where 20 ms did without it.
    import threading

    from mcpx_hooks.supervisor.service import mcphttp

    began, release = threading.Event(), threading.Event()
    real = importlib.import_module

    def slow_import(name: str, package: str | None = None) -> Any:
        if name == SDK:
            began.set()
            release.wait(10)
        return real(name, package)

    async def release_later() -> None:
        await trio.sleep(3)
        release.set()

    monkeypatch.setattr(mcphttp.importlib, "import_module", slow_import)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(release_later)
        async with live_service(unconfined(tmp_path, A_SERVER), tmp_path) as live:
            await trio.to_thread.run_sync(began.wait, 10)
            stopping = trio.current_time()
        # (leaving the block stops the service and waits for it)
        assert trio.current_time() - stopping < 2
        assert not live.service.mcp.loaded.is_set()


async def test_an_exec_request_is_parsed_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 0.85 MB request (170,000 argv strings) parsed on the loop held every other client
    # of the port ~280 ms (GET /healthz's worst latency; ~50 ms parsed in a worker thread).
    import threading

    from mcpx_hooks.supervisor.service import endpoints

    threads: list[bool] = []
    parse = endpoints.parse_exec

    def spy(text: str | bytes) -> Any:
        threads.append(threading.current_thread() is threading.main_thread())
        return parse(text)

    monkeypatch.setattr(endpoints, "parse_exec", spy)
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        _, close = await live.read("/v1/exec", {"argv": ["true"]})
    assert (close, threads) == (1000, [False])


async def test_serve_freezes_what_the_sdk_load_allocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `serve` froze what its start allocated, then loaded the SDK (~45 MB) unfrozen: each
    # full collection walked it, 80-160 ms with the GIL held (GET /healthz waited as long
    # while 5,000 per-call hooks were admitted).
    from mcpx_hooks.supervisor.service import mcphttp, server

    frozen = trio.Event()
    monkeypatch.setattr(mcphttp.gc, "freeze", frozen.set)
    options = ServiceOptions(port=0, cwd=str(tmp_path))
    seen: list[Any] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.run_service, unconfined(tmp_path, A_SERVER), options, seen.append)
        with trio.fail_after(30):
            await frozen.wait()  # (with no request made)
        nursery.cancel_scope.cancel()
    assert seen  # (listening first)
