"""`mcpx-hooks mcp` stopped by a signal while a client's call waits on its server: the
session's run says the session ended before the call's answer, never that the client
cancelled it (it did not), and every process is reaped."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import Marker
from mcpface_parts import call_hook, line_client, server_waiting, session_frames, write_config

#: A `suffix` hook that advises: the calls it is on go through the call point.
NOTE = call_hook("note", "suffix", {"advise": "seen"})
#: A `before` hook that may ask: the calls it is on go through the SDK's request context.
MAY_ASK = call_hook("gate", "before", {"advise": "fine"}, effect="ask")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
@pytest.mark.parametrize("hooks", [[], [NOTE], [MAY_ASK]], ids=["relay", "call", "sdk"])
async def test_a_call_in_flight_when_a_signal_stops_the_command_is_not_said_cancelled_by_the_client(
    tmp_path: Path, marker: Marker, hooks: list[dict[str, Any]], stop: signal.Signals
) -> None:
    # SIGTERM with a call waiting (no hook on it, its server running): the run said `call
    # h.wait: CANCELLED by the client before its answer`, as though the agent had given up.
    where = tmp_path / marker
    config = write_config(where, marker, hooks, expose=("wait", "echo"))
    with server_waiting(where) as said, trio.fail_after(60):
        async with line_client(config) as client:
            wait = {"name": "h__wait", "arguments": {}}
            await client.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": wait})
            await trio.lowlevel.wait_readable(said)
            client.proc.send_signal(stop)
            assert await client.proc.wait() == 0
    assert marker.alive() == []
    frames = session_frames(config)
    calls = [f for f in frames if f["type"] == "call"]
    assert [(f["tool"], f["ok"], f.get("error")) for f in calls] == [
        ("wait", False, "the session ended before its answer"),
    ]
    assert [f["type"] for f in frames][-2:] == ["result", "end"]
    assert frames[-2]["value"] == {"calls": 1, "refused": 0, "failed": 0}
