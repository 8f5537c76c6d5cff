"""A client with 256 requests open is not read until one is answered, unless the gateway
waits for its answer to a question (a hook's `ask`, put to it as an elicitation): then it is
read on, its answers and notifications taken at once, its requests held (at most 1 MiB of
them, past which one is refused) and served in order once there is room. Calls with hooks
are served one after another, so a client with 256 calls open and its answer to the first
one's question behind a 257th request waited each question's deadline, for every call."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import trio
from conftest import Marker
from mcp import types
from mcp.client.context import ClientRequestContext
from mcp.shared.message import SessionMessage
from mcpface_parts import call_hook, stdio_session, through_mcpx, write_config

from mcpx_hooks.supervisor.service.mcpheld import MAX_HELD_BYTES, TOO_MANY
from mcpx_hooks.supervisor.service.mcpstdio import open_stdio
from mcpx_hooks.supervisor.service.mcpwriter import CLOSED, MAX_UNANSWERED


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _request(rid: int, pad: str = "") -> bytes:
    return _line({"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {"_meta": {"p": pad}}})


async def test_while_a_question_waits_the_client_is_read_past_its_room() -> None:
    to_gateway, from_client = os.pipe()
    to_client, from_gateway = os.pipe()
    try:
        async with open_stdio(to_gateway, from_gateway) as (messages, writer):
            for rid in range(MAX_UNANSWERED):  # its room is full
                writer.asked(rid)
            question = types.JSONRPCRequest(jsonrpc="2.0", id=0, method="elicitation/create")
            await writer.send(SessionMessage(question))
            cancel = {"requestId": 1001}
            os.write(
                from_client,
                _request(1000)
                + _request(1001)
                + _line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
                + _line({"jsonrpc": "2.0", "id": 0, "result": {"action": "decline"}})
                + _request(1002),
            )
            with trio.fail_after(5):  # the requests held, the rest read at once
                said = await messages.receive()
                assert isinstance(said, SessionMessage)
                assert getattr(said.message, "method", None) == "notifications/cancelled"
                said = await messages.receive()
                assert isinstance(said, SessionMessage)
                assert isinstance(said.message, types.JSONRPCResponse)
            with trio.move_on_after(1) as waited:  # no question waits: not read on
                await messages.receive()
            assert waited.cancelled_caught
            writer.dropped(5)  # room for one: the first held, not the one cancelled
            with trio.fail_after(5):
                said = await messages.receive()
            assert isinstance(said, SessionMessage)
            assert getattr(said.message, "id", None) == 1000
            writer.dropped(6)
            with trio.fail_after(5):
                said = await messages.receive()
            assert getattr(getattr(said, "message", None), "id", None) == 1002
            for rid in range(MAX_UNANSWERED):
                writer.dropped(rid)
            writer.dropped(1000)
            writer.dropped(1002)
    finally:
        os.close(from_client)
        os.close(to_client)


async def test_past_a_mebibyte_held_a_request_is_refused_at_once() -> None:
    to_gateway, from_client = os.pipe()
    to_client, from_gateway = os.pipe()
    got = bytearray()

    def reading() -> None:
        while chunk := os.read(to_client, 1 << 20):
            got.extend(chunk)

    pad = "x" * 60_000
    count = MAX_HELD_BYTES // len(_request(0, pad)) + 2
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, reading)
            async with open_stdio(to_gateway, from_gateway) as (messages, writer):
                for rid in range(MAX_UNANSWERED):
                    writer.asked(rid)
                question = types.JSONRPCRequest(jsonrpc="2.0", id=0, method="elicitation/create")
                await writer.send(SessionMessage(question))
                lines = b"".join(_request(1000 + n, pad) for n in range(count))
                answered = _line({"jsonrpc": "2.0", "id": 0, "result": {"action": "decline"}})
                nursery.start_soon(trio.to_thread.run_sync, os.write, from_client, lines + answered)
                with trio.fail_after(10):
                    said = await messages.receive()  # the answer, past them all
                assert isinstance(said, SessionMessage)
                assert isinstance(said.message, types.JSONRPCResponse)
                for rid in range(MAX_UNANSWERED):
                    writer.dropped(rid)
    finally:
        os.close(from_client)
        os.close(to_client)
    refused = [json.loads(line) for line in got.splitlines()][1:]  # (after the question)
    assert [r["id"] for r in refused] == [1000 + count - 2, 1000 + count - 1]
    assert refused[0]["error"] == {"code": types.INTERNAL_ERROR, "message": TOO_MANY}


async def test_many_calls_with_a_question_each_are_all_answered(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    ask = {"ask": {"question": "go on?", "default": "no", "deadlineMs": 60_000}}
    gate = call_hook("gate", "before", ask, effect="ask", when={"tool": ["words.count"]})
    config = write_config(where, marker, hooks=[gate])
    asked: list[float] = []

    async def elicit(
        ctx: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(time.monotonic())
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    calls = MAX_UNANSWERED + 20
    refused: list[bool] = []
    with trio.fail_after(90):  # (before: each call waited the question's minute)
        async with stdio_session(
            through_mcpx(config), where / "stderr", elicitation_callback=elicit
        ) as session:
            await session.list_tools()

            async def one() -> None:
                said = await session.call_tool("words__count", {"text": "a b"})
                refused.append(said.is_error)

            async with trio.open_nursery() as nursery:
                for _ in range(calls):
                    nursery.start_soon(one)
    assert len(asked) == calls and refused == [False] * calls
    assert marker.alive() == []


async def test_requests_held_when_the_client_closes_its_end_are_answered_so() -> None:
    to_gateway, from_client = os.pipe()
    to_client, from_gateway = os.pipe()
    got = bytearray()

    def reading() -> None:
        while chunk := os.read(to_client, 1 << 20):
            got.extend(chunk)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, reading)
            async with open_stdio(to_gateway, from_gateway) as (messages, writer):
                for rid in range(MAX_UNANSWERED):
                    writer.asked(rid)
                question = types.JSONRPCRequest(jsonrpc="2.0", id=0, method="elicitation/create")
                await writer.send(SessionMessage(question))
                os.write(from_client, _request(1000) + _request(1001))
                os.close(from_client)
                from_client = -1
                with trio.fail_after(5), contextlib.suppress(anyio.EndOfStream):
                    await messages.receive()
    finally:
        if from_client >= 0:
            os.close(from_client)
        os.close(to_client)
    closed = {
        answer["id"]
        for answer in map(json.loads, got.splitlines())
        if answer.get("error", {}).get("message") == CLOSED
    }
    assert {1000, 1001} <= closed and len(closed) == MAX_UNANSWERED + 2
