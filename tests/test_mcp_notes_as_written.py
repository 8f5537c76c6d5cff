"""A tool server's progress and log messages on a call reach an MCP client as the server
wrote them (the client's progress token in place of the gateway's), whichever way the call
goes: relayed as a line, through the call point outside the SDK's server (a hook on it),
through the SDK's server (a hook that may ask), and over `/mcp`; and so do its answers to
`prompts/get`, `resources/read` and `completion/complete`. The tests' hostile server writes
a progress of `0` (an integer), a `priority` of `1`, keys of its own, keys in an order of
its own; each is compared, its numbers' types and its keys' order included, with what the
server writes to a client of its own."""

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


def stdio_said(
    argv: Sequence[str], cwd: Path, env: dict[str, str], requests: Sequence[dict[str, Any]]
) -> list[list[dict[str, Any]]]:
    """What the process at `argv` writes on each of `requests`: the messages before its
    answer, then the answer."""
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
            said = [json.loads(stdout.readline())]
            while said[-1].get("id") != message["id"]:
                said.append(json.loads(stdout.readline()))
            return said

        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO})
        stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        send({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
        said = [send(r) for r in requests]
        stdin.close()
        proc.wait()
        timer.cancel()
    return said


def http_said(port: int, requests: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """What `/mcp` on `port` sends on each of `requests`, on its response."""
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
    return [post(r)[0] for r in requests]


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
    (direct,) = stdio_said([PY, HOSTILE, "good"], where, env, [call("progress")])
    through = {
        way: stdio_said([MCPX, "mcp", "--config", str(path)], where, env, [call("h__progress")])[0]
        for way, path in configs.items()
    }
    served = start_server(where, "--config", str(configs["relayed"]), auth=False, env=env)
    try:
        (through["/mcp"],) = http_said(served.port, [call("h__progress")])
    finally:
        served.stop()
    expected = notes(direct)
    assert [m for m, _ in expected] == ["notifications/progress"] * 2 + ["notifications/message"]
    assert '"progress": 0,' in expected[0][1] and "example.org/eta" in expected[2][1]
    for way, said in through.items():
        assert notes(said) == expected, way
    assert marker.alive() == []


def asked(prefix: str) -> list[dict[str, Any]]:
    """A prompt, a resource and a completion, of the hostile server's (`prefix`: how the
    client names its prompt)."""
    greet = {"type": "ref/prompt", "name": prefix + "greet"}
    return [
        {"jsonrpc": "2.0", "id": n, "method": method, "params": params}
        for n, (method, params) in enumerate(
            [
                ("prompts/get", {"name": prefix + "greet", "arguments": {"who": "Ada"}}),
                ("resources/read", {"uri": "file:///h/notes.txt"}),
                ("completion/complete", {"ref": greet, "argument": {"name": "who", "value": "A"}}),
            ],
            start=10,
        )
    ]


def test_prompts_resources_and_completions_reach_the_client_as_the_server_wrote_them(
    tmp_path: Path, marker: Marker
) -> None:
    # They came with the same content, but as the SDK's models write them: their keys in the
    # models' order, a `priority` of `1` as `1.0`, the server's own keys dropped.
    where = tmp_path / marker
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(where / "st")}
    config = write_config(where, marker)
    direct = stdio_said([PY, HOSTILE, "good"], where, env, asked(""))
    through = {
        "stdio": stdio_said([MCPX, "mcp", "--config", str(config)], where, env, asked("h__"))
    }
    served = start_server(where, "--config", str(config), auth=False, env=env)
    try:
        through["/mcp"] = http_said(served.port, asked("h__"))
    finally:
        served.stop()
    expected = [exact(said[-1]["result"]) for said in direct]
    assert '"priority": 1}' in expected[0] and "example.org/eta" in expected[2]
    for way, said in through.items():
        assert [exact(s[-1]["result"]) for s in said] == expected, way
    assert marker.alive() == []


LISTED: Final = {  # (each listing's method, and its items' key)
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}


def listings(said: Sequence[Sequence[dict[str, Any]]], prefix: str) -> dict[str, list[str]]:
    """The items of each listing in `said` (the answers to `LISTED`'s requests in its
    order), the tools' and prompts' `prefix` undone, those without it left out (the
    gateway's own `mcpx_exec`)."""
    items: dict[str, list[str]] = {}
    for (method, key), answer in zip(LISTED.items(), said, strict=True):
        listed = answer[-1]["result"][key]
        if key in ("tools", "prompts"):
            named = [i for i in listed if i["name"].startswith(prefix)]
            listed = [{**i, "name": i["name"].removeprefix(prefix)} for i in named]
        items[method] = [exact(i) for i in listed]
    return items


def test_listings_reach_the_client_as_the_server_wrote_them(tmp_path: Path, marker: Marker) -> None:
    # They came as the SDK's models write them: their keys sorted, a `priority` of `1` as
    # `1.0`, the server's own keys (and a newer revision's) dropped.
    where = tmp_path / marker
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(where / "st")}
    where.mkdir()
    server = {"command": [PY, HOSTILE, "odd", str(where / "h.log"), marker], "sandbox": "none"}
    config = where / "config.json"
    config.write_text(json.dumps({"servers": {"h": server}, "defaults": {"sandbox": "none"}}))
    asked = [{"jsonrpc": "2.0", "id": n, "method": m} for n, m in enumerate(LISTED, start=10)]
    direct = listings(stdio_said([PY, HOSTILE, "odd"], where, env, asked), "")
    through = {
        "stdio": stdio_said([MCPX, "mcp", "--config", str(config)], where, env, asked),
    }
    served = start_server(where, "--config", str(config), auth=False, env=env)
    try:
        through["/mcp"] = http_said(served.port, asked)
    finally:
        served.stop()
    assert '"priority": 1}' in direct["resources/list"][0]
    assert all('"example.org/rank": 1' in i for items in direct.values() for i in items[:1])
    for way, said in through.items():
        assert listings(said, "h__") == direct, way
    assert marker.alive() == []
