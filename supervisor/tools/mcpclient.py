"""The MCP client of a tool server: the official SDK's `ClientSession` over the pipes of a
child the supervisor's own spawner started (never the SDK's `stdio_client`, which would start
a process of its own outside the sandbox).

MCP's stdio transport is one JSON-RPC message per line. What the server writes is read in
lines of at most `MAX_MESSAGE_BYTES`; a longer line, or one that is not JSON-RPC, is dropped
and counted, and past `MAX_BAD_LINES` of them the session ends as failed (`ServerBroken`), so
a server flooding its stdout costs bounded memory and ends its uses with a reason. A line
that passes `MAX_MESSAGE_BYTES` is an answer too large: the request it answers fails at once
with `ANSWER_TOO_LARGE` (while the rest of the line is read and dropped), rather than waiting
for an answer that will never be read. Which request: the `id` at the top level of the line's
start (where this SDK and most servers write it), else the one request in flight, else every
request in flight (none can be told from the others). The streams between the pumps and the
session hold nothing (size 0): a server that writes faster than the session reads waits on
its pipe.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final

import anyio
import attrs
import pydantic
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.client.session import ClientSession, LoggingFnT
from mcp.shared.message import SessionMessage

from ..core.errors import HooksError
from ..core.records import Record
from ..core.servers import MAX_BAD_LINES, MAX_MESSAGE_BYTES

CLIENT_INFO: Final = types.Implementation(name="mcpx-hooks", version="0.1.0")
_CHUNK: Final = 65536
#: The JSON-RPC error code (in the implementation-defined range) a request fails with when
#: the server's answer to it is over `MAX_MESSAGE_BYTES`: made here, never sent by a server.
ANSWER_TOO_LARGE: Final = -32090
#: How much of a line too long to read is searched for the `id` it answers.
_ID_SEARCHED: Final = 4096


class ServerBroken(HooksError):
    """The server broke the protocol past bearing (too many bad lines)."""


@attrs.define(repr=False)
class LineStats(Record):
    """What the server wrote that was not a message: counted, never kept. And the requests
    sent and not yet answered (their ids), for a line too long to read to fail."""

    bad: int = 0
    last_problem: str = ""
    in_flight: set[types.RequestId] = attrs.field(factory=set)


@attrs.frozen(repr=False, eq=False)
class _TooLong(Record):
    """A line over `MAX_MESSAGE_BYTES`: its start, where its `id` may be read."""

    head: bytes


@contextlib.asynccontextmanager
async def open_session(
    send: trio.abc.SendStream,
    receive: trio.abc.ReceiveStream,
    closed: trio.Event,
    logging_callback: LoggingFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """A `ClientSession` (not yet initialized) over `send` (the server's stdin) and `receive`
    (its stdout). Leaving the block stops the pumps; the streams are the caller's to close.
    A server that ends its stdout ends the session: calls in flight fail ("Connection
    closed"), and `closed` is set. The server's log messages go to `logging_callback`.
    Raises `ServerBroken` when the server wrote too many bad lines."""
    in_writer, in_reader = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_writer, out_reader = anyio.create_memory_object_stream[SessionMessage](0)
    stats = LineStats()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_in, receive, in_writer, stats, closed)
        nursery.start_soon(_pump_out, out_reader, send, stats)
        try:
            async with ClientSession(
                in_reader, out_writer, client_info=CLIENT_INFO, logging_callback=logging_callback
            ) as session:
                yield session
        finally:
            nursery.cancel_scope.cancel()
    if stats.bad > MAX_BAD_LINES:
        raise ServerBroken(_too_many(stats))


def _too_many(stats: LineStats) -> str:
    return (
        f"the server wrote more than {MAX_BAD_LINES} lines on stdout that are not MCP"
        f" messages (the last: {stats.last_problem}); stdout is for JSON-RPC only"
    )


async def _pump_in(
    receive: trio.abc.ReceiveStream,
    writer: MemoryObjectSendStream[SessionMessage | Exception],
    stats: LineStats,
    closed: trio.Event,
) -> None:
    try:
        await _pump_lines(receive, writer, stats)
    finally:
        closed.set()


async def _pump_lines(
    receive: trio.abc.ReceiveStream,
    writer: MemoryObjectSendStream[SessionMessage | Exception],
    stats: LineStats,
) -> None:
    async with writer, contextlib.aclosing(_lines(receive, stats)) as lines:
        async for line in lines:
            messages: list[types.JSONRPCMessage]
            if isinstance(line, _TooLong):
                messages = [_too_large(rid) for rid in _answered_by(line.head, stats)]
            else:
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except (pydantic.ValidationError, ValueError) as exc:
                    _bad(stats, f"not JSON-RPC: {type(exc).__name__}")
                    if stats.bad > MAX_BAD_LINES:
                        return  # the session ends; `open_session` says why
                    continue
                messages = [message]
            for message in messages:
                answered = getattr(message, "id", None) if _is_answer(message) else None
                if answered is not None:
                    stats.in_flight.discard(_key(answered))
                try:
                    await writer.send(SessionMessage(message))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
            if stats.bad > MAX_BAD_LINES:
                return


def _is_answer(message: types.JSONRPCMessage) -> bool:
    return isinstance(message, types.JSONRPCResponse | types.JSONRPCError)


def _too_large(rid: types.RequestId) -> types.JSONRPCError:
    error = types.ErrorData(
        code=ANSWER_TOO_LARGE,
        message=f"the answer is too large: a message over {MAX_MESSAGE_BYTES} bytes",
    )
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)


def _key(rid: types.RequestId) -> types.RequestId:
    """A request id as the in-flight set holds it (a string of digits is the number)."""
    if isinstance(rid, str) and rid.isdigit():
        return int(rid)
    return rid


def _answered_by(head: bytes, stats: LineStats) -> list[types.RequestId]:
    """The requests in flight a line too long to read answers: the one its start names,
    else the only one, else all of them (they cannot be told apart)."""
    named = top_level_id(head)
    if named is not None and _key(named) in stats.in_flight:
        return [_key(named)]
    return sorted(stats.in_flight, key=str)


#: A JSON-RPC id's value where it starts: a number or a string.
_ID_VALUE: Final = re.compile(rb'\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def top_level_id(head: bytes) -> types.RequestId | None:
    """The value of the key `id` of the JSON object `head` begins (at its top level, not an
    `id` inside its `result`), when `head` reaches it; else None."""
    depth, i, n = 0, 0, min(len(head), _ID_SEARCHED)
    expecting_key = False
    while i < n:
        c = head[i]
        if c == 0x22:  # a string: a key when the top-level object expects one
            end = i + 1
            while end < n and head[end] != 0x22:
                end += 2 if head[end] == 0x5C else 1
            if end >= n:
                return None
            if depth == 1 and expecting_key and head[i + 1 : end] == b"id":
                colon = head.find(b":", end + 1, n)
                found = _ID_VALUE.match(head, colon + 1, n) if colon > 0 else None
                if found is None:
                    return None
                value = json.loads(found.group(1))
                return value if isinstance(value, int | str) else None
            expecting_key = False
            i = end + 1
            continue
        if c in b"{[":
            depth += 1
            expecting_key = depth == 1 and c == 0x7B
        elif c in b"}]":
            depth -= 1
        elif c == 0x2C and depth == 1:  # the next key of the top-level object
            expecting_key = True
        i += 1
    return None


def _bad(stats: LineStats, problem: str) -> None:
    stats.bad += 1
    stats.last_problem = problem


async def _lines(
    receive: trio.abc.ReceiveStream, stats: LineStats
) -> AsyncGenerator[bytes | _TooLong]:
    """Non-empty lines of at most `MAX_MESSAGE_BYTES`; for a longer one, its start (as soon
    as it passes the bound), and the rest of it is skipped."""
    buf = bytearray()
    skipping = False
    while chunk := await receive.receive_some(_CHUNK):
        buf.extend(chunk)
        while (cut := buf.find(b"\n")) >= 0:
            line = bytes(buf[:cut])
            del buf[: cut + 1]
            if skipping:
                skipping = False
            elif line.strip():
                yield line
            await trio.lowlevel.checkpoint()
        if len(buf) > MAX_MESSAGE_BYTES:
            head = bytes(buf[:_ID_SEARCHED])
            buf.clear()
            if not skipping:
                _bad(stats, f"a line over {MAX_MESSAGE_BYTES} bytes")
                skipping = True
                yield _TooLong(head)
    if buf.strip() and not skipping:
        yield bytes(buf)


async def _pump_out(
    reader: MemoryObjectReceiveStream[SessionMessage],
    send: trio.abc.SendStream,
    stats: LineStats,
) -> None:
    async with reader:
        async for item in reader:
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                stats.in_flight.add(_key(message.id))
            elif isinstance(message, types.JSONRPCNotification) and (
                message.method == "notifications/cancelled"
            ):  # a request given up: its answer, if it comes, is dropped by the session
                given_up = (message.params or {}).get("requestId")
                if isinstance(given_up, int | str):
                    stats.in_flight.discard(_key(given_up))
            data = message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await send.send_all(data.encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the server closed its stdin: its stdout's end ends the session
