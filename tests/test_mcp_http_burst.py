"""Over HTTP, a tool server's burst of notifications on a call reaches a client that reads:
every one, in order, while they fit the client's queue (`OUTBOX_BYTES`); past that, the
client is told how many it missed, before the call's answer. Before, the queue held 64
messages: a client reading all along heard 65 of 256, and was told nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import Marker
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcpface_parts import AGENT
from test_mcp_slow_client import events, flood_service, open_raw_session, post_unread

pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpx2\.:ResourceWarning"),
    pytest.mark.filterwarnings(r"ignore:Async generator 'httpcore2\.:ResourceWarning"),
]


async def _flood(
    where: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]
) -> tuple[types.CallToolResult, list[object]]:
    """Calls `f__flood` with `args` over HTTP with the SDK's client: its answer, and what the
    client heard (each progress as its number, each log message as its data)."""
    heard: list[object] = []

    async def hear(params: types.LoggingMessageNotificationParams) -> None:
        heard.append((params.logger, params.data) if params.logger else params.data)

    async def step(said: float, total: float | None, message: str | None) -> None:
        heard.append(said)

    async with (
        flood_service(where, marker, monkeypatch) as port,
        create_mcp_http_client() as http,
        streamable_http_client(
            f"http://127.0.0.1:{port}/mcp", http_client=http, max_sse_event_size=None
        ) as (r, w),
        ClientSession(r, w, client_info=AGENT, logging_callback=hear) as client,
    ):
        await client.initialize()
        await client.list_tools()
        with trio.fail_after(60):
            answer = await client.call_tool("f__flood", args, progress_callback=step)
    return answer, heard


@pytest.mark.parametrize("progress", [False, True])
async def test_a_burst_reaches_a_client_that_reads_every_one_in_order(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch, progress: bool
) -> None:
    count = 2000  # (some 200 bytes each: well within the queue)
    args = {"n": count, "size": 10, "progress": progress}
    answer, heard = await _flood(tmp_path / marker, marker, monkeypatch, args)
    assert answer.is_error is not True
    assert heard == (list(range(count)) if progress else ["x" * 10] * count)


async def test_a_client_that_reads_late_is_told_what_it_missed(
    tmp_path: Path, marker: Marker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its response left unread while the server sends 8 MB of progress: the queue holds
    # 1 MiB, the rest is missed; read at last, the response says how many before the answer.
    count = 80
    async with (
        flood_service(tmp_path / marker, marker, monkeypatch) as port,
        create_mcp_http_client() as http,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w),
        ClientSession(r, w, client_info=AGENT) as other,
    ):
        await other.initialize()
        await other.list_tools()
        late = await open_raw_session(port)
        args = {"n": count, "size": 100_000, "progress": True}
        params = {"name": "f__flood", "arguments": args, "_meta": {"progressToken": "p"}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        unread = await post_unread(port, late, call)
        with trio.fail_after(30):
            await other.call_tool("f__after", {})  # (answered behind the whole flood)
            response = b""
            while chunk := await unread.receive_some():
                response += chunk
        await unread.aclose()
    said = events(response)
    progress = [
        m["params"]["progress"] for m in said if m.get("method") == "notifications/progress"
    ]
    logs = [
        m["params"]
        for m in said
        if m.get("method") == "notifications/message" and m["params"].get("logger")
    ]
    assert said[-1]["id"] == 1 and said[-1]["result"]["content"][0]["text"] == "done"
    # One note of what it missed, or more where it missed more after one was queued (a
    # loaded machine): together they count every message it did not get.
    assert logs and all(m["logger"] == "mcpx-hooks" and m["level"] == "warning" for m in logs)
    told = [re.match(r"mcpx-hooks: (\d+) of the tool servers' progress", m["data"]) for m in logs]
    assert all(found is not None for found in told), logs
    missed = sum(int(found[1]) for found in told if found is not None)
    assert 0 < missed < count and len(progress) + missed == count
    assert progress == sorted(progress)
    assert said[-2].get("method") == "notifications/message"  # (told before the answer)
