"""`/mcp` clients sharing a tool server: one that never reads its response (its socket's
buffers full) holds up no other session's calls to that server, while the server floods it
with log messages or progress; the service in process on loopback, the SDK's streamable HTTP
client as the other session."""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from conftest import Marker
from mcp import MCPDeprecationWarning, types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcpface_parts import AGENT, call_hook, stdio_session, through_mcpx

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.service.server import Service, ServiceOptions

pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpx2\.:ResourceWarning"),
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpcore2\.:ResourceWarning"),
]

#: A tool server: `flood` sends `n` log messages (or progress notifications, with
#: `progress`) of `size` characters, then its answer; `after` is answered once a flood has
#: been sent (at once when one has), so its answer comes behind the flood on the pipe.
FLOOD: Final = r"""
import json, sys
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
flooded, waiting = False, []
for line in sys.stdin:
    m = json.loads(line); rid = m.get("id"); method = m.get("method"); p = m.get("params") or {}
    if method == "initialize":
        caps = {"tools": {}, "logging": {}}
        info = {"name": "flood", "version": "1"}
        result = {"protocolVersion": p["protocolVersion"], "capabilities": caps, "serverInfo": info}
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/list":
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("flood", "after")]
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
    elif method == "tools/call":
        a, done = p.get("arguments") or {}, {"content": [{"type": "text", "text": "done"}]}
        if p["name"] == "after":
            waiting.append(rid)
            if not flooded:
                said = {"level": "info", "data": "waiting"}
                send({"jsonrpc": "2.0", "method": "notifications/message", "params": said})
        token = (p.get("_meta") or {}).get("progressToken")
        for i in range(a.get("n", 0)):
            said = "x" * a["size"]
            if a.get("progress"):
                params = {"progressToken": token, "progress": i, "message": said}
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
            else:
                params = {"level": "info", "data": said}
                send({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
        if p["name"] == "flood":
            send({"jsonrpc": "2.0", "id": rid, "result": done})
            flooded = True
        if flooded:
            for w in waiting:
                send({"jsonrpc": "2.0", "id": w, "result": done})
            waiting.clear()
    elif rid is not None and method:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
"""
HELLO: Final = {"protocolVersion": "2025-06-18", "capabilities": {}}


def _post(port: int, message: dict[str, Any], session: str | None) -> bytes:
    body = json.dumps(message).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    if session is not None:
        head += f"Mcp-Protocol-Version: 2025-06-18\r\nMcp-Session-Id: {session}\r\n"
    return head.encode() + b"\r\n" + body


async def post_unread(port: int, session: str, message: dict[str, Any]) -> trio.SocketStream:
    """POSTs `message` to `/mcp` in `session` and reads nothing of the response."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(_post(port, message, session))
    return stream


async def post_read(port: int, message: dict[str, Any], session: str | None = None) -> bytes:
    """POSTs `message` to `/mcp` (in `session`) as a raw client: the response, whole."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(_post(port, message, session))
        answer = b""
        while chunk := await stream.receive_some():
            answer += chunk
    return answer


async def open_raw_session(port: int) -> str:
    """A session opened by a raw client, which opens no stream of its own (GET): its id."""
    params = {**HELLO, "clientInfo": {"name": "raw", "version": "1"}}
    answer = await post_read(
        port, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    )
    head_text = answer.split(b"\r\n\r\n", 1)[0].decode().lower()
    (line,) = [h for h in head_text.splitlines() if h.startswith("mcp-session-id:")]
    session = line.split(":", 1)[1].strip()
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await post_read(port, initialized, session)
    return session


@asynccontextmanager
async def flood_service(
    where: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, **keys: Any
) -> AsyncIterator[int]:
    """The service in process with the flood server as `f` (`keys`: more of its keys): its
    port. Stopped on the way out, the server gone."""
    where.mkdir()
    (where / "flood.py").write_text(FLOOD)
    server = {"command": [sys.executable, "flood.py", marker], "sandbox": "none", "pin": "off"}
    server.update(keys)
    (where / "config.json").write_text(json.dumps({"servers": {"f": server}}))
    monkeypatch.setenv("XDG_STATE_HOME", str(where / "state"))
    config = load_config([str(where / "config.json")], cwd=where, environ={}, discover=False)
    options = ServiceOptions(port=0, token=None, cwd=str(where), environ={})
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        yield (await nursery.start(service.serve)).port
        service.stop()
    assert marker.alive() == []


def events(response: bytes) -> list[dict[str, Any]]:
    """The messages of an event-stream response, in order."""
    return [json.loads(d) for d in re.findall(rb"^data: ?(.*)$", response, re.M)]


async def test_a_call_s_progress_comes_on_its_own_response(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client that opens no stream but its requests' (as a raw or simple client does) got
    # no progress at all: it went to the session's GET stream, which it never opened.
    async with flood_service(tmp_path / marker, marker, monkeypatch) as port:
        session = await open_raw_session(port)
        await post_read(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session)
        args = {"n": 2, "size": 3, "progress": True}
        params = {"name": "f__flood", "arguments": args, "_meta": {"progressToken": "mine"}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        with trio.fail_after(20):
            said = events(await post_read(port, call, session))
    assert [m.get("method") for m in said] == [
        "notifications/progress",
        "notifications/progress",
        None,
    ]
    assert [m["params"]["progressToken"] for m in said[:2]] == ["mine", "mine"]
    assert said[2]["id"] == 2 and said[2]["result"]["content"][0]["text"] == "done"


@pytest.mark.parametrize("progress", [False, True])
async def test_a_client_that_never_reads_holds_up_no_other_session_s_calls(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, progress: bool
) -> None:
    async with (
        flood_service(tmp_path / marker, marker, monkeypatch) as port,
        create_mcp_http_client() as http,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w),
        ClientSession(r, w, client_info=AGENT) as other,
    ):
        await other.initialize()
        await other.list_tools()
        stalled = await open_raw_session(port)
        # Megabytes for the one that does not read: past what its socket's buffers take.
        args = {"n": 80, "size": 100_000, "progress": progress}
        params: dict[str, Any] = {"name": "f__flood", "arguments": args}
        if progress:
            params["_meta"] = {"progressToken": "p"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        unread = await post_unread(port, stalled, call)
        with trio.fail_after(20):  # (held up: a second a message, over a minute)
            answer = await other.call_tool("f__after", {})
        assert answer.is_error is not True
        await unread.aclose()


async def test_a_server_s_limits_count_every_session_s_calls(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each session counted its own calls: with two clients, a server with maxConcurrent = 1
    # had two calls at once, and one with callsPerMinute = N got N a minute from each.
    waiting = trio.Event()

    async def heard(params: types.LoggingMessageNotificationParams) -> None:
        if params.data == "waiting":
            waiting.set()

    async with (
        flood_service(tmp_path / marker, marker, monkeypatch, maxConcurrent=1) as port,
        create_mcp_http_client() as http,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w),
        ClientSession(r, w, client_info=AGENT, logging_callback=heard) as first,
        create_mcp_http_client() as http2,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http2) as (r2, w2),
        ClientSession(r2, w2, client_info=AGENT) as second,
        trio.open_nursery() as nursery,
    ):
        for session in (first, second):
            await session.initialize()
            await session.list_tools()
        nursery.start_soon(first.call_tool, "f__after", {})
        with trio.fail_after(20):
            await waiting.wait()  # (the first session's call is at the server)
            refused = await second.call_tool("f__flood", {})
        nursery.cancel_scope.cancel()
    assert refused.is_error is True
    assert [c.text for c in refused.content if c.type == "text"] == [
        "concurrency limit: 1 calls at once for server f, all its tools together"
    ]


async def test_an_mcpx_exec_run_s_progress_comes_on_its_call_s_response(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with flood_service(tmp_path / marker, marker, monkeypatch) as port:
        session = await open_raw_session(port)
        args = {"argv": ["true"]}
        params = {"name": "mcpx_exec", "arguments": args, "_meta": {"progressToken": 7}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        with trio.fail_after(30):
            said = events(await post_read(port, call, session))
    progress = [m["params"] for m in said if m.get("method") == "notifications/progress"]
    assert progress and {p["progressToken"] for p in progress} == {7}
    assert progress[-1]["message"] == "end"
    assert said[-1]["id"] == 2 and said[-1]["result"]["structuredContent"]["status"] == "result"


async def test_a_log_message_is_heard_once_however_many_calls_are_in_flight(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: list[object] = []
    waiting = trio.Event()

    async def hear(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params.data)
        if params.data == "waiting":
            waiting.set()

    async with (
        flood_service(tmp_path / marker, marker, monkeypatch) as port,
        create_mcp_http_client() as http,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w),
        ClientSession(r, w, client_info=AGENT, logging_callback=hear) as client,
        trio.open_nursery() as nursery,
    ):
        await client.initialize()
        await client.list_tools()
        nursery.start_soon(client.call_tool, "f__after", {})
        with trio.fail_after(20):
            await waiting.wait()  # (the first call is at the server: two in flight next)
            await client.call_tool("f__flood", {"n": 1, "size": 3})
    assert heard == ["waiting", "xxx"]


@pytest.mark.parametrize("way", ["http", "stdio relayed", "stdio sdk"])
async def test_a_client_hears_the_log_messages_of_the_level_it_set_and_above(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    # `logging/setLevel` changed only whether an mcpx_exec run's frames were sent: a client
    # that asked for `warning` still got every `info` (and `debug`) message of the servers.
    heard: list[object] = []

    async def hear(params: types.LoggingMessageNotificationParams) -> None:
        heard.append((params.level, params.data))

    async def set_level(client: ClientSession, level: types.LoggingLevel) -> None:
        with warnings.catch_warnings():  # (the SDK marks it deprecated as of 2026-07-28)
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level(level)

    async def calls(client: ClientSession) -> None:
        await client.initialize()
        await client.list_tools()
        await client.call_tool("f__flood", {"n": 1, "size": 1})
        await set_level(client, "warning")
        await client.call_tool("f__flood", {"n": 1, "size": 2})
        await set_level(client, "info")
        await client.call_tool("f__flood", {"n": 1, "size": 3})

    where = tmp_path / marker
    if way == "http":
        async with (
            flood_service(where, marker, monkeypatch) as port,
            create_mcp_http_client() as http,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w),
            ClientSession(r, w, client_info=AGENT, logging_callback=hear) as client,
        ):
            await calls(client)
    else:
        where.mkdir()
        (where / "flood.py").write_text(FLOOD)
        server = {"command": [sys.executable, "flood.py", marker], "sandbox": "none"}
        hooks = [] if way == "stdio relayed" else [call_hook("may-ask", "before", {}, effect="ask")]
        config = {"servers": {"f": server}, "hooks": hooks, "defaults": {"sandbox": "none"}}
        (where / "config.json").write_text(json.dumps(config))
        params = through_mcpx(where / "config.json")
        async with stdio_session(params, where / "err", logging_callback=hear) as client:
            await calls(client)
    assert heard == [("info", "x"), ("info", "xxx")]
    assert marker.alive() == []


async def test_a_log_message_is_heard_once_whichever_way_each_call_went(
    tmp_path: Path, marker: Marker
) -> None:
    # Over stdio, `after` takes the SDK's way (a hook that may ask) and `flood` is relayed
    # as a line: the client was two hearers, one per way, and heard each message twice.
    heard: list[object] = []
    waiting = trio.Event()

    async def hear(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params.data)
        if params.data == "waiting":
            waiting.set()

    where = tmp_path / marker
    where.mkdir()
    (where / "flood.py").write_text(FLOOD)
    server = {"command": [sys.executable, "flood.py", marker], "sandbox": "none"}
    ask = call_hook("may-ask", "before", {}, effect="ask", when={"tool": ["after"]})
    config = {"servers": {"f": server}, "hooks": [ask], "defaults": {"sandbox": "none"}}
    (where / "config.json").write_text(json.dumps(config))
    params = through_mcpx(where / "config.json")
    async with (
        stdio_session(params, where / "err", logging_callback=hear) as client,
        trio.open_nursery() as nursery,
    ):
        await client.list_tools()
        nursery.start_soon(client.call_tool, "f__after", {})
        with trio.fail_after(20):
            await waiting.wait()
            await client.call_tool("f__flood", {"n": 1, "size": 3})
    assert heard == ["waiting", "xxx"]
    assert marker.alive() == []
