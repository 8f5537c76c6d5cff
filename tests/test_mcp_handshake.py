"""`mcpx-hooks mcp`'s handshake, as MCP's lifecycle has it: nothing but a `ping` is served
before an `initialize` is accepted. An `initialize` the server refused opens nothing (as
over HTTP, where its session is over at once): a `notifications/initialized` after it does
not open the session, the tools are neither listed nor called, and no session run starts;
an `initialize` accepted afterwards opens it as usual. A request whose params are not the
method's is told where they are wrong."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any, Final

import pytest
from conftest import Marker
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from mcpface_parts import MCPX, through_mcpx, write_config

from mcpx_hooks.supervisor.service.mcpface import ALREADY_INITIALIZED, NOT_INITIALIZED
from mcpx_hooks.supervisor.service.mcpinvalid import INVALID_PARAMS

HELLO: Final = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "late", "version": "1"},
}
INITIALIZED: Final = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def answers(config: Path, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `mcpx-hooks mcp` (with `config`) answers each request of `messages`, sent one
    a line, each request's answer read before the next message goes."""
    env = {**os.environ, **(through_mcpx(config).env or {})}
    argv = [MCPX, "mcp", "--config", str(config)]
    got = []
    with subprocess.Popen(
        argv, cwd=config.parent, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        timer = threading.Timer(60, proc.kill)
        timer.start()
        assert proc.stdin is not None and proc.stdout is not None
        for message in messages:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            if "id" in message:
                while (said := json.loads(proc.stdout.readline())).get("id") != message["id"]:
                    pass
                got.append(said)
        proc.stdin.close()
        assert proc.wait() == 0
        timer.cancel()
    return got


def request(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


@pytest.mark.parametrize("refused", [True, False])
def test_nothing_but_ping_is_served_before_an_initialize_is_accepted(
    tmp_path: Path, marker: Marker, refused: bool
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker, expose=("echo",))
    call = {"name": "h__echo", "arguments": {"n": 1}}
    before = [request(0, "initialize", {"capabilities": {}})] if refused else []
    said = answers(
        config,
        [
            *before,
            INITIALIZED,
            request(1, "tools/list"),
            request(2, "tools/call", call),
            request(3, "prompts/list"),
            request(4, "ping"),
            request(5, "initialize", HELLO),
            INITIALIZED,
            request(6, "tools/call", call),
        ],
    )
    if refused:
        assert said.pop(0)["error"]["code"] == -32602  # (its params lack the version)
    assert [a.get("error", {}).get("message") for a in said[:3]] == [NOT_INITIALIZED] * 3
    assert said[3]["result"] == {}
    assert said[4]["result"]["serverInfo"]["name"] == "mcpx-hooks"
    assert json.loads(said[5]["result"]["content"][0]["text"]) == {"n": 1}
    # One session run: the one the accepted handshake opened, with its client's name.
    env = {**os.environ, **(through_mcpx(config).env or {})}
    listed = subprocess.run(
        [MCPX, "runs", "list", "--json"], env=env, capture_output=True, text=True, check=True
    )
    runs = [r for r in json.loads(listed.stdout) if r["argv"][0] == "mcp"]
    assert [r["argv"] for r in runs] == [["mcp", "late"]]
    assert marker.alive() == []


def test_a_request_whose_params_are_wrong_is_told_where(tmp_path: Path, marker: Marker) -> None:
    # The SDK's server said "Invalid request parameters" (and an empty `data`) for all of
    # them: a client's developer was left to guess which field was wrong.
    config = write_config(tmp_path / marker, marker, expose=("echo",))
    said = answers(
        config,
        [
            request(0, "initialize", {"capabilities": {}}),
            request(1, "initialize", HELLO),
            INITIALIZED,
            request(2, "tools/call", {"name": 5, "arguments": {}}),
            request(3, "tools/call", {"name": "h__echo", "arguments": [1]}),
            request(4, "resources/read", {}),
        ],
    )
    errors = [a.get("error") for a in said]
    assert errors[1] is None
    assert [e["code"] for e in errors if e] == [-32602] * 4
    assert [e["message"] for e in errors if e] == [
        f"{INVALID_PARAMS}: clientInfo: Field required; protocolVersion: Field required",
        f"{INVALID_PARAMS}: name: Input should be a valid string",
        f"{INVALID_PARAMS}: arguments: Input should be a valid dictionary",
        f"{INVALID_PARAMS}: uri: Field required",
    ]
    assert marker.alive() == []


def test_a_second_initialize_is_refused_and_the_session_goes_on(
    tmp_path: Path, marker: Marker
) -> None:
    # It was answered again, as a first one is: the SDK's server took its protocol version
    # and capabilities for the session's from then on, mid-session, while the session's run
    # kept the first client's name.
    config = write_config(tmp_path / marker, marker, expose=("echo",))
    call = {"name": "h__echo", "arguments": {"n": 1}}
    other = {**HELLO, "protocolVersion": "2024-11-05", "clientInfo": {"name": "b", "version": "2"}}
    said = answers(
        config,
        [
            request(0, "initialize", HELLO),
            INITIALIZED,
            request(1, "initialize", other),
            request(2, "tools/call", call),
            request(3, "initialize", HELLO),
        ],
    )
    assert said[0]["result"]["protocolVersion"] == "2025-06-18"
    refusal = {"code": -32600, "message": ALREADY_INITIALIZED}
    assert said[1] == {"jsonrpc": "2.0", "id": 1, "error": refusal}
    assert json.loads(said[2]["result"]["content"][0]["text"]) == {"n": 1}
    assert said[3]["error"] == refusal
    env = {**os.environ, **(through_mcpx(config).env or {})}
    listed = subprocess.run(
        [MCPX, "runs", "list", "--json"], env=env, capture_output=True, text=True, check=True
    )
    assert [r["argv"] for r in json.loads(listed.stdout) if r["argv"][0] == "mcp"] == [
        ["mcp", "late"]
    ]
    assert marker.alive() == []


def test_an_initialize_naming_an_unknown_version_gets_the_server_s_own(
    tmp_path: Path, marker: Marker
) -> None:
    # As MCP has it: the server answers with a version it supports, and the client decides.
    config = write_config(tmp_path / marker, marker, expose=("echo",))
    future = {**HELLO, "protocolVersion": "2999-01-01"}
    call = {"name": "h__echo", "arguments": {"n": 1}}
    said = answers(
        config, [request(0, "initialize", future), INITIALIZED, request(1, "tools/call", call)]
    )
    assert said[0]["result"]["protocolVersion"] == HANDSHAKE_PROTOCOL_VERSIONS[-1]
    assert json.loads(said[1]["result"]["content"][0]["text"]) == {"n": 1}
    assert marker.alive() == []
