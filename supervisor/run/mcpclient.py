"""The MCP client of a tool server: the official SDK's `ClientSession` over the pipes of a
child the supervisor's own spawner started (never the SDK's `stdio_client`, which would start
a process of its own outside the sandbox).

MCP's stdio transport is one JSON-RPC message per line. What the server writes is read in
lines of at most `MAX_MESSAGE_BYTES`; a longer line, or one that is not JSON-RPC, is dropped
and counted, and past `MAX_BAD_LINES` of them the session ends as failed (`ServerBroken`), so
a server flooding its stdout costs bounded memory and ends its uses with a reason. The
streams between the pumps and the session hold nothing (size 0): a server that writes faster
than the session reads waits on its pipe.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final

import anyio
import attrs
import pydantic
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

from ..core.servers import MAX_BAD_LINES, MAX_MESSAGE_BYTES

CLIENT_INFO: Final = types.Implementation(name="mcpx-hooks", version="0.1.0")
_CHUNK: Final = 65536


class ServerBroken(Exception):
    """The server broke the protocol past bearing (too many bad lines)."""


@attrs.define
class LineStats:
    """What the server wrote that was not a message: counted, never kept."""

    bad: int = 0
    last_problem: str = ""


@contextlib.asynccontextmanager
async def open_session(
    send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, closed: trio.Event
) -> AsyncIterator[ClientSession]:
    """A `ClientSession` (not yet initialized) over `send` (the server's stdin) and `receive`
    (its stdout). Leaving the block stops the pumps; the streams are the caller's to close.
    A server that ends its stdout ends the session: calls in flight fail ("Connection
    closed"), and `closed` is set. Raises `ServerBroken` when the server wrote too many bad
    lines."""
    in_writer, in_reader = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_writer, out_reader = anyio.create_memory_object_stream[SessionMessage](0)
    stats = LineStats()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_in, receive, in_writer, stats, closed)
        nursery.start_soon(_pump_out, out_reader, send)
        try:
            async with ClientSession(in_reader, out_writer, client_info=CLIENT_INFO) as session:
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
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except (pydantic.ValidationError, ValueError) as exc:
                _bad(stats, f"not JSON-RPC: {type(exc).__name__}")
                if stats.bad > MAX_BAD_LINES:
                    return  # the session ends; `open_session` says why
                continue
            try:
                await writer.send(SessionMessage(message))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


def _bad(stats: LineStats, problem: str) -> None:
    stats.bad += 1
    stats.last_problem = problem


async def _lines(receive: trio.abc.ReceiveStream, stats: LineStats) -> AsyncGenerator[bytes]:
    """Non-empty lines of at most `MAX_MESSAGE_BYTES`; a longer one is skipped whole."""
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
            if not skipping:
                _bad(stats, f"a line over {MAX_MESSAGE_BYTES} bytes")
            buf.clear()
            skipping = True
    if buf.strip() and not skipping:
        yield bytes(buf)


async def _pump_out(
    reader: MemoryObjectReceiveStream[SessionMessage], send: trio.abc.SendStream
) -> None:
    async with reader:
        async for item in reader:
            data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await send.send_all(data.encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the server closed its stdin: its stdout's end ends the session
