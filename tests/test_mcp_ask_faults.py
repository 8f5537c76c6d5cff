"""A hook's question put to the client (an elicitation) that the client answers with a
JSON-RPC error counts as a form dismissed (`no`: the call is refused, saying so); a client
that closes its end while a question waits gets its call answered "Connection closed", and
`mcpx-hooks mcp` exits 0. Before, the error's call was answered `{"code": 0, "message":
"Exceptions from Trio nursery (1 sub-exception)"}`, and the closing client left a traceback
on stderr and an exit status of 1."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Final

from conftest import Marker
from mcpface_parts import MCPX, call_hook, through_mcpx, write_config

HELLO: Final = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "asked", "version": "1"},
}
CALL: Final = {"name": "words__count", "arguments": {"text": "a"}}


def _asking(where: Path, marker: Marker) -> subprocess.Popen[bytes]:
    ask = {"ask": {"question": "go on?", "default": "yes", "deadlineMs": 60_000}}
    gate = call_hook("gate", "before", ask, effect="ask")
    config = write_config(where, marker, hooks=[gate])
    env = {**os.environ, **(through_mcpx(config).env or {})}
    with (where / "stderr").open("wb") as err:  # (the child's own copy stays open)
        return subprocess.Popen(
            [MCPX, "mcp", "--config", str(config)],
            cwd=where,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _read(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    said: dict[str, Any] = json.loads(proc.stdout.readline())
    return said


def _question(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    _send(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO})
    assert "result" in _read(proc)
    _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL})
    question = _read(proc)
    assert question["method"] == "elicitation/create"
    return question


def test_a_question_answered_with_an_error_counts_as_dismissed(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    with _asking(where, marker) as proc:
        question = _question(proc)
        broke = {"code": -32603, "message": "the form could not be shown"}
        _send(proc, {"jsonrpc": "2.0", "id": question["id"], "error": broke})
        answer = _read(proc)
        assert answer["id"] == 1 and answer["result"]["isError"] is True
        said = answer["result"]["content"][0]["text"]
        assert said == "refused by gate: go on? (answered no by the client)"
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert _read(proc) == {"jsonrpc": "2.0", "id": 2, "result": {}}  # the session goes on
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(30) == 0
    assert marker.alive() == []


def test_a_client_that_leaves_while_asked_gets_its_call_answered_and_no_traceback(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    with _asking(where, marker) as proc:
        _question(proc)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(30) == 0
    assert json.loads(rest) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32000, "message": "Connection closed"},
    }
    assert "Traceback" not in (where / "stderr").read_text()
    assert marker.alive() == []
