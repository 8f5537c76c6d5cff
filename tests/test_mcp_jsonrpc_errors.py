"""The JSON-RPC errors `mcpx-hooks mcp` owes a client for what it cannot serve: a Parse
error (-32700, `id` null) for a line that is not JSON (a request cut short), an Invalid
Request (-32600) for JSON that is no request (by its `id` when it is a request's, else
null), and in a batch one such error for each element that is not a notification nor an
answer. Over HTTP the same errors come as a 400's body."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Final

import trio
from mcp import types
from mcpface_parts import MCPX

from mcpx_hooks.supervisor.service.mcpstdio import BATCH_REFUSED, open_stdio
from mcpx_hooks.supervisor.service.mcpweb import _unreadable_body

REFUSED: Final = {"code": types.INVALID_REQUEST, "message": BATCH_REFUSED}
PING: Final = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def _answers(lines: list[bytes]) -> list[Any]:
    """What the client gets for `lines` (each read by the transport as the server would)."""
    to_gateway, from_client = os.pipe()
    to_client, from_gateway = os.pipe()
    got = b""
    try:
        async with open_stdio(to_gateway, from_gateway) as (messages, _writer):
            for line in lines:
                os.write(from_client, line + b"\n")
                await messages.receive()
        while chunk := os.read(to_client, 1 << 20):
            got += chunk
    finally:
        os.close(from_client)
        os.close(to_client)
    return [json.loads(answer) for answer in got.splitlines()]


def _error(rid: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


async def test_each_element_of_a_batch_that_is_no_request_gets_an_invalid_request() -> None:
    batch = [
        3,
        PING,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},  # (nothing)
        {"foo": 1},
        {"jsonrpc": "2.0", "id": 6, "result": {}},  # an answer (nothing)
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2.5, "method": "notifications/cancelled"},  # (nothing)
        "x",
    ]
    with trio.fail_after(10):
        said = await _answers([b"[3]", json.dumps(batch).encode(), b"[1,2]"])
    null = {"jsonrpc": "2.0", "id": None, "error": REFUSED}
    assert said == [
        [null],
        [null, {"jsonrpc": "2.0", "id": 1, "error": REFUSED}, null, null, null],
        [null, null],
    ]


async def test_a_line_that_is_no_request_gets_an_error_of_a_null_id() -> None:
    with trio.fail_after(10):
        said = await _answers(
            [
                b'{"jsonrpc":"2.0","id":1,"method":"initia',  # cut short
                b"hello",
                b"3",
                b'{"jsonrpc":"2.0","id":5}',  # neither a request nor an answer
                b'{"jsonrpc":"2.0","id":6,"result":5}',  # an answer, however bad: nothing
                b'{"jsonrpc":"2.0","method":"ping","params":[1]}',
                b'{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}',  # by its id
            ]
        )
    codes = [(answer["id"], answer["error"]["code"]) for answer in said]
    assert codes == [
        (None, types.PARSE_ERROR),
        (None, types.PARSE_ERROR),
        (None, types.INVALID_REQUEST),
        (None, types.INVALID_REQUEST),
        (None, types.INVALID_REQUEST),
        (7, types.INVALID_REQUEST),
    ]
    assert said[0]["error"]["message"].startswith("Parse error: Invalid JSON: EOF")


async def test_a_huge_batch_of_non_requests_is_answered_whole_a_part_at_a_time() -> None:
    count = 100_000
    line = b"[" + b",".join([b"1"] * count) + b"]\n"
    to_gateway, from_client = os.pipe()
    to_client, from_gateway = os.pipe()
    got = bytearray()

    def reading() -> None:
        while chunk := os.read(to_client, 1 << 20):
            got.extend(chunk)

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, reading)
                async with open_stdio(to_gateway, from_gateway) as (messages, _writer):
                    nursery.start_soon(trio.to_thread.run_sync, os.write, from_client, line)
                    await messages.receive()
    finally:
        os.close(from_client)
        os.close(to_client)
    (said,) = [json.loads(answer) for answer in got.splitlines()]
    assert len(said) == count and said[0] == said[-1] == _error(None, *REFUSED.values())


def test_the_mcp_command_answers_a_batch_of_numbers_and_a_line_cut_short(tmp_path: Path) -> None:
    # (`printf '[3]\n' | mcpx-hooks mcp` answered nothing)
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(tmp_path)}
    done = subprocess.run(
        [MCPX, "mcp"],
        input=b'[3]\n{"jsonrpc":"2.0","id":1,"method":"initia\n',
        capture_output=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
        env=env,
    )
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a if isinstance(a, list) else a["error"]["code"] for a in said] == [
        [_error(None, *REFUSED.values())],
        types.PARSE_ERROR,
    ]


def test_over_http_the_same_is_a_400_of_one_error() -> None:
    assert _unreadable_body(b"[3]") == (types.INVALID_REQUEST, BATCH_REFUSED)
    cut = _unreadable_body(b'{"jsonrpc":"2.0","id":1,"method":"initia')
    assert cut is not None and cut[0] == types.PARSE_ERROR
    assert _unreadable_body(b"3") == (
        types.INVALID_REQUEST,
        "not a JSON-RPC message: Input should be an object",
    )


def test_a_method_that_is_no_string_is_said_so() -> None:
    # Said "id: Field required" (the first model the message failed to be: a request).
    assert _unreadable_body(b'{"jsonrpc":"2.0","method":5}') == (
        types.INVALID_REQUEST,
        "not a JSON-RPC message: method: Input should be a valid string",
    )
