"""MCP's stdio transport for `mcpx-hooks mcp`: one JSON-RPC message per line, read from and
written to two file descriptors, handed to the SDK's server as the streams it serves.

Under Trio, on the descriptors themselves (`trio.lowlevel.FdStream`), so a stop signal ends
a read at once (no thread is left blocked on stdin). No task stands between the pipes and
the SDK (`tools/jsonlines.py`): the server's read loop reads and parses the client's next
line itself, and a message the server sends is written whole before `send` returns. A line
is at most `MAX_MESSAGE_BYTES`; a longer one is dropped as it comes, never held whole, and
the SDK is told it was not a message. Messages are parsed and written by the SDK's own
JSON-RPC models.

A client with `MAX_UNANSWERED` requests not yet answered (nor cancelled) is not read until
one is: each request read is held (its task, its answer waiting to be written) until it is
answered, so a client that sends calls and does not read their answers would otherwise have
the gateway hold more of them for as long as it sends (`ClientWriter.asked`). Unless a
question to the client waits for its answer: then it is read on, its requests held unparsed
meanwhile, within a bound (`mcpheld.py`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Final, Protocol, Self

import anyio
import pydantic
import pydantic_core
import trio
from mcp import types
from mcp.shared.message import SessionMessage
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..core.errors import HooksError
from ..core.servers import MAX_MESSAGE_BYTES
from ..tools.jsonlines import (
    LineReader,
    LineWriter,
    TooLong,
    an_answer,
    batch_ids,
    top_level_id,
    unread_id,
)
from .mcpheld import TOO_MANY, HeldRequests
from .mcpwriter import ClientWriter, cancelled_id, refusal

#: What each request of a batch is answered: MCP sends one message a line (its current
#: revision has no batches, and this SDK serves none).
BATCH_REFUSED: Final = "a batch is not served: send each message on its own"
#: What a line that begins as a batch but is not JSON is answered (once, its `id` null).
UNREAD_BATCH: Final = "a batch that is not JSON: no request in it is read"
#: A line that is a JSON array, a batch (JSON's whitespace before it).
_ARRAY: Final = re.compile(rb"[ \t\r\n]*\[")
#: What a request whose `id` is neither a string nor an integer is answered (`odd_id_in`).
ODD_ID: Final = "not a JSON-RPC message: id: a request's id is a string or an integer"


def odd_id_in(message: types.JSONRPCMessage, value: object) -> bool:
    """Whether `message`, read from the JSON `value`, is a request MCP does not take: the
    SDK's models read a message with a `method` and an `id` of null, a fraction (`2.0`, as
    Python's JSON writes a float), a boolean or an object as a notification, dropping the
    `id`, and its client would wait for an answer for good. A notification's method
    (`notifications/…`) with such an `id` is taken for the notification it names, as it
    was."""
    if not isinstance(message, types.JSONRPCNotification):
        return False
    return not message.method.startswith("notifications/") and (
        isinstance(value, dict) and "id" in value
    )


def unserved_version(message: types.JSONRPCRequest) -> str | None:
    """Why `message` is not served when it names, in its own `_meta`, a protocol version
    (MCP's per-request envelope, 2026-07-28 on) other than those of the `initialize`
    handshake, which is all this server speaks; else None. The SDK's client opens with such
    a request (`server/discover`) and, answered with an error, sends `initialize`: the
    SDK's server, were it given that request first, would serve the connection in that
    protocol and refuse the `initialize` after it."""
    meta = (message.params or {}).get("_meta")
    if message.method == "initialize" or not isinstance(meta, dict):
        return None
    version = meta.get(PROTOCOL_VERSION_META_KEY)
    if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    return (
        f"unsupported protocol version {str(version)[:40]!r}: this server speaks MCP's"
        f" initialize handshake ({', '.join(HANDSHAKE_PROTOCOL_VERSIONS)}): send initialize"
    )


def read_message(line: bytes) -> tuple[types.JSONRPCMessage, object]:
    """The message `line` holds, and its JSON. Parsed once, then read by the SDK's model of
    a message, as the SDK's HTTP transport reads a body: the model's `validate_json` reads
    the JSON again for each kind of message it tries, which cost a notification of 6 MB
    (under the line's cap) 470 MB. A message the model refuses is read again by
    `validate_json`, for its words ("Input should be an object", not "… a valid
    dictionary"). Raises what `validate_json` raises."""
    try:
        value = pydantic_core.from_json(line)
    except ValueError:
        value = _UNREAD
    if value is not _UNREAD and not isinstance(value, list):
        try:
            return types.jsonrpc_message_adapter.validate_python(value, by_name=False), value
        except pydantic.ValidationError:
            pass
    types.jsonrpc_message_adapter.validate_json(line, by_name=False)  # (raises)
    raise ValueError("not a message")  # (never: what the model refused as read it refuses)


_UNREAD: Final = object()


def unreadable(exc: Exception) -> tuple[int, str]:
    """The JSON-RPC error a client is answered for a message that cannot be read (`exc`,
    from the SDK's model of a message): not JSON at all is a parse error, JSON that is no
    JSON-RPC message an invalid request; in a few words of where, not pydantic's report of
    every model the message failed to be."""
    if not isinstance(exc, pydantic.ValidationError):
        return types.PARSE_ERROR, "Parse error"
    errors = exc.errors()
    # (What its `method` is, when that is what is wrong: `{"method": 5}` is no notification
    # for its method, not a request for want of an id, which the union tried first.)
    first = next(
        (e for e in errors if e["loc"][1:2] == ("method",) and e["type"] != "missing"), errors[0]
    )
    if first["type"] == "json_invalid":
        return types.PARSE_ERROR, f"Parse error: {first['msg']}"
    where = ".".join(map(str, first["loc"][1:]))  # (the first is the model's name)
    said = f"{where}: {first['msg']}" if where else first["msg"]
    return types.INVALID_REQUEST, f"not a JSON-RPC message: {said}"


class LineTooLong(HooksError, ValueError):
    """A line from the client over `MAX_MESSAGE_BYTES`: dropped unread."""


class BatchRefused(HooksError, ValueError):
    """A batch (a JSON array of messages): each request in it answered with an error."""


class OddId(HooksError, ValueError):
    """A request whose `id` MCP does not take (`odd_id_in`): answered with an error, not served."""


class UnservedVersion(HooksError, ValueError):
    """A request in a protocol this server does not speak (`unserved_version`): answered
    with an error, not served."""


class LineTaker(Protocol):
    """What may take a line of the client's before the SDK reads it (True: taken)."""

    async def __call__(self, line: bytes, /) -> bool: ...


class ClientMessages:
    """The client's messages, as the SDK reads a stream of them: each line parsed when the
    server's read loop asks for the next (a line that is not JSON-RPC is its exception).

    A line that cannot be read (not JSON, a request cut short; JSON the SDK refuses, such as
    a lone surrogate escaped in a string; a line over `MAX_MESSAGE_BYTES`) is answered here
    with a JSON-RPC error, as JSON-RPC asks (the SDK's own servers drop it): a request's by
    its `id` when that can still be read, so that the client's call ends instead of waiting
    forever, anything else with JSON-RPC's null `id`; only what is shaped as an answer is
    not answered. A request whose `id` MCP does not take (`odd_id_in`) is answered with an
    error of the null `id`. A batch (a JSON array) is refused whole, in one array: an error
    for each request in it, by its `id`, and one of the null `id` for each element that is
    neither a request, a notification nor an answer; one that cannot be read (not JSON, or
    over `MAX_MESSAGE_BYTES`) with one error of the null `id`."""

    def __init__(self, incoming: trio.lowlevel.FdStream, writer: ClientWriter) -> None:
        self._lines = LineReader(incoming)
        self._incoming = incoming
        self._writer = writer
        #: What may take a line before the SDK reads it (`mcpraw.RawCalls.take`).
        self.taker: LineTaker | None = None
        self._held = HeldRequests()

    async def receive(self) -> SessionMessage | Exception:
        while True:
            line = await self._next()
            if isinstance(line, TooLong) or self.taker is None or not await self.taker(line):
                return await self._read(line)

    async def _next(self) -> bytes | TooLong:
        """The client's next line: a request held (`mcpheld.py`) once there is room, else
        the next one read. With `MAX_UNANSWERED` of its requests unanswered, the client is
        read only while a question waits for its answer, its requests held meanwhile."""
        writer, held = self._writer, self._held
        while True:
            if held and writer.has_room():
                return held.next()
            if not writer.has_room() and not writer.asking():
                await writer.wait_readable()
                continue
            try:
                line = await self._lines.line()
            except trio.ClosedResourceError:  # closed under a read: as a closed memory stream
                raise anyio.ClosedResourceError from None
            except anyio.EndOfStream:  # (those held are open: answered as the session ends)
                for rid in held.abandon():
                    writer.asked(rid)
                raise
            if isinstance(line, TooLong) or (writer.has_room() and not held):
                return line
            kept, refused = held.take(line)
            if refused is not None:
                said = refusal(refused, types.INTERNAL_ERROR, TOO_MANY)
                await writer.send(SessionMessage(said))
            elif not kept:
                return line

    async def _read(self, line: bytes | TooLong) -> SessionMessage | Exception:
        if isinstance(line, TooLong):
            if _ARRAY.match(line.head):  # (its ids are past what is kept: JSON-RPC's null)
                said = f"a batch over {MAX_MESSAGE_BYTES} bytes was dropped: {BATCH_REFUSED}"
                await self._writer.send(SessionMessage(refusal(None, types.INVALID_REQUEST, said)))
                return LineTooLong(said)
            said = f"a message over {MAX_MESSAGE_BYTES} bytes was dropped"
            if b'"method"' in line.head:  # a request's: by its `id`, JSON-RPC's null if unseen
                rid = top_level_id(line.head)
                await self._writer.send(SessionMessage(refusal(rid, types.INVALID_REQUEST, said)))
            elif b'"result"' not in line.head and b'"error"' not in line.head:  # (an answer's)
                await self._writer.send(SessionMessage(refusal(None, types.INVALID_REQUEST, said)))
            return LineTooLong(said)
        # A batch is no message, and the SDK's model would read it as each kind of message
        # in turn: about 80 times the line's size in memory. Read for its ids alone; one
        # that is not JSON is answered once, with JSON-RPC's null `id`.
        batch = batch_ids(line) if _ARRAY.match(line) else None
        if batch is None and _ARRAY.match(line):
            unread = refusal(None, types.PARSE_ERROR, f"Parse error: {UNREAD_BATCH}")
            await self._writer.send(SessionMessage(unread))
            return BatchRefused(UNREAD_BATCH)
        if batch is not None:
            ids, empty = batch
            if empty:  # one answer, not an array
                refused = refusal(None, types.INVALID_REQUEST, BATCH_REFUSED)
                await self._writer.send(SessionMessage(refused))
            elif ids:
                await self._writer.send_batch(ids, types.INVALID_REQUEST, BATCH_REFUSED)
            return BatchRefused(BATCH_REFUSED)
        try:
            message, value = read_message(line)
        except (pydantic.ValidationError, ValueError) as exc:
            # A request by its `id`; anything else but an answer (not JSON, cut short, no
            # `method`) with JSON-RPC's null `id`, so that the client hears it was not read.
            rid = unread_id(line, request=True)
            if rid is not None or not _an_answer(line):
                await self._writer.send(SessionMessage(refusal(rid, *unreadable(exc))))
            return exc
        if odd_id_in(message, value):  # (its id cannot be said back: JSON-RPC's null then)
            await self._writer.send(SessionMessage(refusal(None, types.INVALID_REQUEST, ODD_ID)))
            return OddId(ODD_ID)
        if isinstance(message, types.JSONRPCRequest):
            unserved = unserved_version(message)
            if unserved is not None:
                refused = refusal(message.id, types.INVALID_REQUEST, unserved)
                await self._writer.send(SessionMessage(refused))
                return UnservedVersion(unserved)
            self._writer.asked(message.id)
        elif isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            if message.id is not None:
                self._writer.heard(message.id)
        else:
            self._writer.dropped(cancelled_id(message))  # (it will not be answered)
        return SessionMessage(message)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._incoming.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _an_answer(line: bytes) -> bool:
    """Whether `line`, which the SDK could not read, is shaped as an answer (`an_answer`),
    read as leniently as JSON allows."""
    try:
        return an_answer(json.loads(line))
    except (ValueError, RecursionError):
        return False


@contextlib.asynccontextmanager
async def open_stdio(
    read_fd: int, write_fd: int
) -> AsyncIterator[tuple[ClientMessages, ClientWriter]]:
    """The client's messages (from `read_fd`) and where messages to it go (`write_fd`). Both
    descriptors are this block's: closed when it is left. The client closing its end ends
    its messages; its requests still open when the block ends (not when it is cancelled: a
    stop signal) are answered that the connection closed (`ClientWriter.answer_unanswered`)."""
    async with (
        trio.lowlevel.FdStream(read_fd) as incoming,
        trio.lowlevel.FdStream(write_fd) as outgoing,
    ):
        writer = ClientWriter(LineWriter(outgoing))
        yield ClientMessages(incoming, writer), writer
        await writer.answer_unanswered()
