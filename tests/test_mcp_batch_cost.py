"""What a client's line costs `mcpx-hooks mcp` to read: a batch (a JSON array, which MCP's
current revision has not) is refused from its ids alone, the SDK's model of a message not
asked to read an array, which it cannot be, and which cost it about 80 times the line's size
in memory; a message is parsed once, then read by the model."""

from __future__ import annotations

import json
import os
import tracemalloc
from typing import Any

import pydantic
import pytest
import trio
from mcp import types
from mcp.shared.message import SessionMessage

from mcpx_hooks.supervisor.service.mcpstdio import (
    BATCH_REFUSED,
    UNREAD_BATCH,
    open_stdio,
    read_message,
    unreadable,
)


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


async def test_a_batch_is_refused_without_the_sdk_s_model_reading_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A line of 13.7 MB holding 300,000 pings took 8 s and 1.6 GB of memory to refuse:
    # 1.15 GB and 2.7 s of it the SDK's `validate_json` of the array as each kind of message.
    read: list[int] = []
    adapter = types.jsonrpc_message_adapter

    class Counting:
        def __getattr__(self, name: str) -> Any:
            if name == "validate_json":
                read.append(1)
            return getattr(adapter, name)

    monkeypatch.setattr(types, "jsonrpc_message_adapter", Counting())
    batch = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(3)]
    batch.append({"jsonrpc": "2.0", "method": "notifications/initialized"})
    with trio.fail_after(10):
        answers = await _answers([b" " + json.dumps(batch).encode(), b"[]", b"[1,"])
    assert read == []  # (nor the batch that is not JSON: it is answered at once)
    refused = {"code": types.INVALID_REQUEST, "message": BATCH_REFUSED}
    unread = f"Parse error: {UNREAD_BATCH}"  # (`[1,`: one answer, as JSON-RPC has it)
    assert answers == [
        [{"jsonrpc": "2.0", "id": n, "error": refused} for n in range(3)],
        {"jsonrpc": "2.0", "id": None, "error": refused},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": unread}},
    ]


async def test_a_large_message_is_read_in_about_its_own_size() -> None:
    # The SDK's `validate_json` read a line again for each kind of message it tried: a
    # notification of 6 MB (under the 16 MiB a line may have) cost 470 MB, 56 MB of Python
    # objects for one of 5 MB as here.
    values = ",".join(['"ab"'] * 1_000_000)
    params = f'{{"requestId":5,"x":[{values}]}}'
    line = f'{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{params}}}'.encode()
    to_gateway, from_client = os.pipe()
    to_client, from_gateway = os.pipe()
    try:
        async with open_stdio(to_gateway, from_gateway) as (messages, _writer):
            tracemalloc.start()
            try:
                read = await messages._read(line)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    finally:
        os.close(from_client)
        os.close(to_client)
    assert isinstance(read, SessionMessage)
    assert isinstance(read.message, types.JSONRPCNotification)
    assert peak < 3 * len(line)


def test_a_message_read_once_is_refused_in_the_words_of_json() -> None:
    for line, said in (
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}',
            "params: Input should be an object",
        ),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping"} x', "Invalid JSON: trailing characters"),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"p","params":{"a":"\\udcff"}}',
            "lone leading surrogate",
        ),
    ):
        with pytest.raises(pydantic.ValidationError) as refused:
            read_message(line)
        assert said in unreadable(refused.value)[1]
