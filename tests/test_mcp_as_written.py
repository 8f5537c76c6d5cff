"""An answer no hook changed reaches an MCP client as the server wrote it, byte for byte: the
published reference server (`npx -y @modelcontextprotocol/server-everything`), each of its
kinds of content (text, an image with annotations, resource links, an embedded resource,
structured content, an `isError` answer), called straight and through the gateway every way
in: over stdio relayed as a line, through the call point outside the SDK's server, through
the SDK's server (a hook that may ask), and over `/mcp`. Skipped, saying why, where npx or
the npm registry is missing."""

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
from mcpface_parts import MCPX, call_hook
from service_client import start_server

EVERYTHING: Final = "@modelcontextprotocol/server-everything"
#: The protocol revision the clients here speak (the one the gateway's client speaks to its
#: servers, so that a call may be relayed as a line).
VERSION: Final = "2025-11-25"
CALLS: Final = [
    ("echo", {"message": "hé \u2028 ok"}),
    ("get-annotated-message", {"messageType": "error", "includeImage": True}),
    ("get-resource-links", {"count": 3}),
    ("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
    ("get-structured-content", {"location": "Chicago"}),
    ("get-sum", {"a": 1, "b": 2.5}),
    ("get-tiny-image", {}),
    ("gzip-file-as-resource", {"name": "x.gz", "data": "http://127.0.0.1:9/none"}),
]
#: A `suffix` hook that fires for every call and changes no answer: the call point's way.
NOTE: Final = call_hook("note", "suffix", {"advise": "seen"})
#: A `before` hook that may ask (and does not): the SDK's server's way.
MAY_ASK: Final = call_hook("may-ask", "before", {"advise": "seen"}, effect="ask")
#: The server's dynamic resources say when they were made: that much may differ.
_MADE_AT: Final = re.compile(rb"\d{1,2}:\d\d:\d\d [AP]M")
HELLO: Final = {
    "protocolVersion": VERSION,
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"},
}


def result_bytes(line: bytes) -> bytes:
    """The bytes of the `result` object in the answer `line`, as they were written."""
    start = line.index(b'"result":') + len(b'"result":')
    value, end = json.JSONDecoder().raw_decode(line.decode(), len(line[:start].decode()))
    assert isinstance(value, dict)
    return line.decode()[len(line[:start].decode()) : end].encode()


def same_moment(written: bytes) -> bytes:
    return _MADE_AT.sub(b"T", written)


def stdio_results(argv: Sequence[str], cwd: Path, env: dict[str, str], mcp: bool) -> list[bytes]:
    """Each of `CALLS`' answers' `result` as the process at `argv` wrote it, to a client of
    its stdio writing JSON lines (`mcp`: the gateway, its tools named `ev__<tool>`)."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        timer = threading.Timer(240, proc.kill)
        timer.start()
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        def answer(rid: int, method: str, params: dict[str, Any]) -> bytes:
            message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
            while True:
                line = stdout.readline()
                said = json.loads(line)
                if said.get("id") == rid and "method" not in said:
                    return line

        answer(0, "initialize", HELLO)
        stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        answer(1, "tools/list", {})  # (the servers started: calls may take the short way)
        prefix = "ev__" if mcp else ""
        results = [
            result_bytes(answer(n, "tools/call", {"name": prefix + name, "arguments": args}))
            for n, (name, args) in enumerate(CALLS, start=2)
        ]
        stdin.close()
        proc.wait()
        timer.cancel()
    return results


def http_results(port: int) -> list[bytes]:
    """Each of `CALLS`' answers' `result`, over `/mcp` on `port`, as the service wrote it
    (in its event stream's `data`)."""
    headers = {"Accept": "application/json, text/event-stream"}
    headers["Content-Type"] = "application/json"

    def post(rid: int | None, method: str, params: dict[str, Any]) -> tuple[bytes, str]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if rid is not None:
            message["id"] = rid
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            connection.request("POST", "/mcp", json.dumps(message), headers)
            response = connection.getresponse()
            body, session = response.read(), response.getheader("mcp-session-id") or ""
        finally:
            connection.close()
        if response.getheader("content-type", "").startswith("text/event-stream"):
            for data in re.findall(rb"^data: ?(.*)$", body, re.M):
                said = json.loads(data)
                if said.get("id") == rid and "method" not in said:
                    return data, session
        return body, session

    _, session = post(0, "initialize", HELLO)
    headers["mcp-session-id"] = session
    headers["mcp-protocol-version"] = VERSION
    post(None, "notifications/initialized", {})
    post(1, "tools/list", {})
    return [
        result_bytes(post(n, "tools/call", {"name": f"ev__{name}", "arguments": args})[0])
        for n, (name, args) in enumerate(CALLS, start=2)
    ]


def test_every_kind_of_answer_reaches_the_client_as_the_server_wrote_it(
    npm_registry: None, tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    where.mkdir()
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(where / "st")}
    server = {"command": ["npx", "-y", EVERYTHING], "sandbox": "none", "pin": "off"}
    ways = {"relayed": [], "call point": [NOTE], "sdk": [MAY_ASK]}
    for way, hooks in ways.items():
        config = {"servers": {"ev": server}, "hooks": hooks, "defaults": {"sandbox": "none"}}
        (where / f"{way}.json").write_text(json.dumps(config))
    direct = stdio_results(["npx", "-y", EVERYTHING], where, env, mcp=False)
    through = {
        way: stdio_results([MCPX, "mcp", "--config", f"{way}.json"], where, env, mcp=True)
        for way in ways
    }
    served = start_server(where, "--config", str(where / "relayed.json"), auth=False, env=env)
    try:
        through["/mcp"] = http_results(served.port)
    finally:
        served.stop()
    assert b'"isError":true' in direct[-1] and b'"annotations"' in direct[1]
    expected = [same_moment(r) for r in direct]
    for way, results in through.items():
        assert [same_moment(r) for r in results] == expected, way
    assert marker.alive() == []
