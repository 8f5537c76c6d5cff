"""MCP's stdio transport for `mcpx-hooks mcp`: one JSON-RPC message per line, read from and
written to two file descriptors, handed to the SDK's server as the streams it serves.

Under Trio, on the descriptors themselves (`trio.lowlevel.FdStream`), so a stop signal ends
a read at once (no thread is left blocked on stdin). A line is at most `MAX_MESSAGE_BYTES`;
a longer one is dropped as it comes, never held whole, and the SDK is told it was not a
message. Messages are parsed and written by the SDK's own JSON-RPC models.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final

import anyio
import pydantic
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage

from ..core.errors import HooksError
from ..core.servers import MAX_MESSAGE_BYTES

_CHUNK: Final = 65536
_Incoming = MemoryObjectReceiveStream[SessionMessage | Exception]
_Outgoing = MemoryObjectSendStream[SessionMessage]
#: How long leaving waits for the last messages to be written to the client.
_FLUSH_S: Final = 2.0


class LineTooLong(HooksError, ValueError):
    """A line from the client over `MAX_MESSAGE_BYTES`: dropped unread."""


@contextlib.asynccontextmanager
async def open_stdio(
    read_fd: int, write_fd: int
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """The client's messages (from `read_fd`) and a stream whose messages go to it (on
    `write_fd`). Both descriptors are this block's: closed when it is left. The client
    closing its end ends the stream of its messages."""
    in_writer, in_reader = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_writer, out_reader = anyio.create_memory_object_stream[SessionMessage](0)
    async with (
        trio.lowlevel.FdStream(read_fd) as incoming,
        trio.lowlevel.FdStream(write_fd) as outgoing,
        trio.open_nursery() as nursery,
    ):
        written = trio.Event()
        nursery.start_soon(_pump_in, incoming, in_writer)
        nursery.start_soon(_pump_out, out_reader, outgoing, written)
        try:
            yield in_reader, out_writer
        finally:
            out_writer.close()  # what was sent is written, then the pump ends
            with trio.CancelScope(shield=True), trio.move_on_after(_FLUSH_S):
                await written.wait()
            nursery.cancel_scope.cancel()


async def _pump_in(
    incoming: trio.abc.ReceiveStream, writer: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    async with writer, contextlib.aclosing(_lines(incoming)) as lines:
        async for line in lines:
            item: SessionMessage | Exception
            if line is None:
                item = LineTooLong(f"a message over {MAX_MESSAGE_BYTES} bytes was dropped")
            else:
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    item = SessionMessage(message)
                except (pydantic.ValidationError, ValueError) as exc:
                    item = exc
            try:
                await writer.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


async def _lines(incoming: trio.abc.ReceiveStream) -> AsyncGenerator[bytes | None]:
    """Non-empty lines; None for a line over `MAX_MESSAGE_BYTES` (the rest of it skipped)."""
    buf = bytearray()
    skipping = False
    while chunk := await incoming.receive_some(_CHUNK):
        buf.extend(chunk)
        while (cut := buf.find(b"\n")) >= 0:
            line = bytes(buf[:cut])
            del buf[: cut + 1]
            if skipping:
                skipping = False
            elif line.strip():
                yield line
        if len(buf) > MAX_MESSAGE_BYTES:
            buf.clear()
            if not skipping:
                skipping = True
                yield None
    if buf.strip() and not skipping:
        yield bytes(buf)


async def _pump_out(
    reader: MemoryObjectReceiveStream[SessionMessage],
    outgoing: trio.abc.SendStream,
    written: trio.Event,
) -> None:
    try:
        async with reader:
            async for item in reader:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await outgoing.send_all(data.encode() + b"\n")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the client closed its end: its messages' end ends the session
    finally:
        written.set()
