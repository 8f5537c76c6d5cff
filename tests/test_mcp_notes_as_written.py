"""A tool server's progress and log messages on a call reach an MCP client as the server
wrote them (the client's progress token in place of the gateway's), whichever way the call
goes: relayed as a line, through the call point outside the SDK's server (a hook on it),
through the SDK's server (a hook that may ask), and over `/mcp`. The tests' hostile server
writes a progress of `0` (an integer) and a key of its own in each notification; each is
compared, its numbers' types and its keys' order included, with what the server writes to
a client of its own."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from conftest import Marker
from mcpface_parts import HOSTILE, MCPX, PY, call_hook, write_config
from service_client import start_server

NOTE: Final = call_hook("note", "suffix", {"advise": "seen"})
MAY_ASK: Final = call_hook("may-ask", "before", {"advise": "seen"}, effect="ask")
HELLO: Final = {
    "protocolVersion": "2025-11-25",  # (the gateway's own with its servers: relayed)
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"},
}
TOKEN: Final = "tok-1"


def call(name: str) -> dict[str, Any]:
    """The call of the hostile server's `progress` tool (as `name`) that makes it odd."""
    params = {"name": name, "arguments": {"odd": True}, "_meta": {"progressToken": TOKEN}}
    return {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}


def exact(params: Any) -> str:
    """`params` as JSON that tells `0` from `0.0` and keeps the keys' order."""
    return json.dumps(params)


def notes(said: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["method"], exact(m["params"])) for m in said if "method" in m]


def stdio_notes(argv: Sequence[str], cwd: Path, env: dict[str, str], name: str) -> list[Any]:
    """The notifications the process at `argv` writes on `call(name)`, before its answer."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        timer = threading.Timer(60, proc.kill)
        timer.start()
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        def send(message: dict[str, Any]) -> list[dict[str, Any]]:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
            said = []
            while (line := json.loads(stdout.readline())).get("id") != message["id"]:
                said.append(line)
            return said

        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO})
        stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        send({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
        said = send(call(name))
        stdin.close()
        proc.wait()
        timer.cancel()
    return said


def http_notes(port: int) -> list[Any]:
    """The notifications `/mcp` on `port` sends on `call("h__progress")`, on its response."""
    headers = {"Accept": "application/json, text/event-stream"}
    headers["Content-Type"] = "application/json"

    def post(message: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.request("POST", "/mcp", json.dumps(message), headers)
            response = connection.getresponse()
            body, session = response.read(), response.getheader("mcp-session-id") or ""
        finally:
            connection.close()
        return [json.loads(d) for d in re.findall(rb"^data: ?(.+)$", body, re.M)], session

    _, headers["mcp-session-id"] = post(
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}
    )
    headers["mcp-protocol-version"] = HELLO["protocolVersion"]
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    return post(call("h__progress"))[0]


def test_progress_and_log_messages_reach_the_client_as_the_server_wrote_them(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(where / "st")}
    ways = {"relayed": [], "call point": [NOTE], "sdk": [MAY_ASK]}
    configs = {
        way: write_config(where, marker, hooks, expose=("progress",)).rename(where / f"{way}.json")
        for way, hooks in ways.items()
    }
    direct = stdio_notes([PY, HOSTILE, "good"], where, env, "progress")
    through = {
        way: stdio_notes([MCPX, "mcp", "--config", str(path)], where, env, "h__progress")
        for way, path in configs.items()
    }
    served = start_server(where, "--config", str(configs["relayed"]), auth=False, env=env)
    try:
        through["/mcp"] = http_notes(served.port)
    finally:
        served.stop()
    expected = notes(direct)
    assert [m for m, _ in expected] == ["notifications/progress"] * 2 + ["notifications/message"]
    assert '"progress": 0,' in expected[0][1] and "example.org/eta" in expected[2][1]
    for way, said in through.items():
        assert notes(said) == expected, way
    assert marker.alive() == []
