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
request in flight (none can be told from the others). An answer that is JSON but not
JSON-RPC (an error whose code is not a number, …) fails the request its `id` names, in flight,
with `ANSWER_UNREADABLE`: it is dropped and counted as any bad line, but its request is not
left waiting for its timeout. So does a line that is not JSON at all (or not UTF-8) whose
start names the `id` of a request in flight (`top_level_id`), unless it has a `method`.

A request is on the server's stdin when the session's `send` returns (`jsonlines.py`, no
task between). Beside the session, a `RawChannel` (`rawchannel.py`) writes requests of its
own on the same pipe (the manager's tool calls, the gateway's relayed calls), with ids no
request of the session has; their answers go to it instead of the session.

What the server writes is read by a task of its own and handed to the session through a
stream that holds nothing (size 0): a server that writes faster than the session reads waits
on its pipe.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, Protocol, TypeVar

import anyio
import attrs
import pydantic
import trio
from anyio.streams.memory import MemoryObjectSendStream
from mcp import types
from mcp.client.session import ClientSession, LoggingFnT, MessageHandlerFnT
from mcp.shared.message import SessionMessage

from ..core.errors import HooksError
from ..core.records import Record
from ..core.servers import MAX_BAD_LINES, MAX_MESSAGE_BYTES
from .jsonlines import (
    HEAD_BYTES,
    BorrowedSend,
    LineReader,
    LineWriter,
    TooLong,
    top_level_id,
    unread_id,
)
from .listings import ListingSession
from .rawchannel import RawChannel

CLIENT_INFO: Final = types.Implementation(name="mcpx-hooks", version="0.1.0")
#: The JSON-RPC error code (in the implementation-defined range) a request fails with when
#: the server's answer to it is over `MAX_MESSAGE_BYTES`: made here, never sent by a server.
ANSWER_TOO_LARGE: Final = -32090
#: The same, for an answer that is not JSON-RPC (an answer all the same, by its `id`).
ANSWER_UNREADABLE: Final = -32091


#: What the SDK's client says of each request in flight when the connection ends.
CLOSED: Final = "Connection closed"
#: Pages of one listing (tools, prompts, resources) a server may answer with: each page is
#: a message of at most `MAX_MESSAGE_BYTES`.
MAX_LIST_PAGES: Final = 16


class ServerBroken(HooksError):
    """The server broke the protocol past bearing (too many bad lines)."""


def connection_closed(error: types.ErrorData) -> bool:
    """Whether `error` is the SDK's word that the connection ended, not a server's answer.
    The SDK says it with -32000, which is also the usual code of a JSON-RPC server's own
    generic error ("the database is down"): that answer is the server's to give, and must
    not be taken for its end (a wait for its life to end, then that life's reason in place
    of the server's words). Only the SDK's own wording, without data, is the end."""
    return error.code == types.CONNECTION_CLOSED and error.message == CLOSED and error.data is None


class Page(Protocol):
    """A page of a listing: where the next one starts (None: none)."""

    @property
    def next_cursor(self) -> str | None: ...


_P = TypeVar("_P", bound=Page)


async def every_page(
    what: str, ask: Callable[[types.PaginatedRequestParams | None], Awaitable[_P]]
) -> list[_P]:
    """Each page of a server's listing of `what` (`tools`, ...), asked with `ask`, following
    the cursors MCP's pagination gives (an empty one ends it, as servers that always write
    the key mean it). Past `MAX_LIST_PAGES`, or given a cursor it gave before, the server is
    broken (`ServerBroken`): a listing that never ends is not read."""
    pages = [await ask(None)]
    given: set[str] = set()
    while cursor := pages[-1].next_cursor:
        if cursor in given:
            raise ServerBroken(f"its {what} listing gave the cursor {cursor!r} twice")
        if len(pages) == MAX_LIST_PAGES:
            raise ServerBroken(f"its {what} listing went on past {MAX_LIST_PAGES} pages")
        given.add(cursor)
        pages.append(await ask(types.PaginatedRequestParams(cursor=cursor)))
    return pages


@attrs.define(repr=False)
class LineStats(Record):
    """What the server wrote that was not a message: counted, never kept. And the requests
    sent and not yet answered (their ids), for a line too long to read to fail."""

    bad: int = 0
    last_problem: str = ""
    in_flight: set[types.RequestId] = attrs.field(factory=set)


@contextlib.asynccontextmanager
async def open_session(
    send: trio.lowlevel.FdStream,
    receive: trio.abc.ReceiveStream,
    closed: trio.Event,
    logging_callback: LoggingFnT | None = None,
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[tuple[ClientSession, RawChannel]]:
    """A `ClientSession` (not yet initialized) over `send` (the server's stdin) and `receive`
    (its stdout), and the `RawChannel` beside it. Leaving the block stops the reading; the
    streams are the caller's to close. A server that ends its stdout ends the session: calls
    in flight fail ("Connection closed"), the channel's routes are told, and `closed` is
    set. The server's log messages go to `logging_callback`, its other notifications to
    `message_handler`. Raises `ServerBroken` when the server wrote too many bad lines."""
    in_writer, in_reader = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    stats = LineStats()
    lines = LineWriter(send)
    async with trio.open_nursery() as nursery:
        raw = RawChannel(lines, stats.in_flight, nursery, logging_callback)
        nursery.start_soon(_pump_in, ServerMessages(receive, stats, raw), in_writer, closed)
        try:
            async with ListingSession(
                in_reader,
                ServerWriter(lines, stats),
                client_info=CLIENT_INFO,
                logging_callback=logging_callback,
                message_handler=message_handler,
            ) as session:
                yield session, raw
        finally:
            nursery.cancel_scope.cancel()
            raw.close()
    if stats.bad > MAX_BAD_LINES:
        raise ServerBroken(_too_many(stats))


async def _pump_in(
    messages: ServerMessages,
    writer: MemoryObjectSendStream[SessionMessage | Exception],
    closed: trio.Event,
) -> None:
    """The server's messages to the session, through a stream of its own (a task between
    them): the session hands each notification (progress, a log message) to a task of its
    own as it reads it, and the steps of this hand-over let those run before the answer
    that comes after them ends the call."""
    try:
        async with writer:
            while True:
                message = await messages.receive()
                try:
                    await writer.send(SessionMessage(message))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
    except anyio.EndOfStream:
        return
    finally:
        messages.raw.close()
        closed.set()


class ServerMessages:
    """The server's messages, each line parsed as it is asked for. Ends (`anyio.EndOfStream`)
    at the end of the server's stdout, or past `MAX_BAD_LINES` bad lines."""

    def __init__(self, receive: trio.abc.ReceiveStream, stats: LineStats, raw: RawChannel) -> None:
        self._lines = LineReader(receive)
        self._stats = stats
        self.raw = raw
        self._queued: list[types.JSONRPCMessage] = []

    async def receive(self) -> types.JSONRPCMessage:
        while True:
            message = self._queued.pop(0) if self._queued else await self._next()
            answered = getattr(message, "id", None) if _is_answer(message) else None
            if answered is not None:
                self._stats.in_flight.discard(_key(answered))
            if not self.raw.routes or not await self.raw.divert(message):
                return message

    async def _next(self) -> types.JSONRPCMessage:
        stats = self._stats
        while True:
            if stats.bad > MAX_BAD_LINES:
                raise anyio.EndOfStream  # the session ends; `open_session` says why
            line = await self._lines.line()
            if isinstance(line, TooLong):
                _bad(stats, f"a line over {MAX_MESSAGE_BYTES} bytes")
                self._queued = [too_large(rid) for rid in _answered_by(line.head, stats)]
                if self._queued:
                    return self._queued.pop(0)
                continue
            try:
                return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except (pydantic.ValidationError, ValueError) as exc:
                _bad(stats, f"not JSON-RPC: {type(exc).__name__}")
                answered = unread_id(line, request=False)
                if answered is None and b'"method"' not in line:  # not JSON, or not UTF-8
                    answered = top_level_id(line[:HEAD_BYTES])  # (the `id` at its start)
                if answered is not None and _key(answered) in stats.in_flight:
                    return _unreadable(_key(answered), exc)


class ServerWriter(BorrowedSend):
    """Where the session's messages to the server go: each written as one line on its stdin
    before `send` returns; the requests among them are in flight until answered."""

    def __init__(self, lines: LineWriter, stats: LineStats) -> None:
        self._lines = lines
        self._stats = stats

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            self._stats.in_flight.add(_key(message.id))
        elif isinstance(message, types.JSONRPCNotification) and (
            message.method == "notifications/cancelled"
        ):  # a request given up: its answer, if it comes, is dropped by the session
            given_up = (message.params or {}).get("requestId")
            if isinstance(given_up, int | str):
                self._stats.in_flight.discard(_key(given_up))
        data = message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            await self._lines.send(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The server closed its stdin: the session's "Connection closed".
            raise anyio.BrokenResourceError from None


#: How many of a validation error's problems are said (the first ones).
SAID_PROBLEMS: Final = 3


def problems(exc: pydantic.ValidationError) -> str:
    """`exc` in a few words, never the values: each of its first problems' place (from
    `params` down) and what was expected."""
    said = []
    for problem in exc.errors()[:SAID_PROBLEMS]:
        loc = [str(p) for p in problem["loc"]]
        where = ".".join(loc[1:] if loc[:1] == ["params"] else loc)
        said.append(f"{where}: {problem['msg']}" if where else problem["msg"])
    return "; ".join(said)


def not_mcp(exc: pydantic.ValidationError) -> str:
    """What a server's answer that is not MCP (`exc`: its model's validation error) is said
    as: its model, and where it is wrong, never its values."""
    return f"its answer is not MCP ({exc.title}: {problems(exc)})"


def _too_many(stats: LineStats) -> str:
    return (
        f"the server wrote more than {MAX_BAD_LINES} lines on stdout that are not MCP"
        f" messages (the last: {stats.last_problem}); stdout is for JSON-RPC only"
    )


def _is_answer(message: types.JSONRPCMessage) -> bool:
    return isinstance(message, types.JSONRPCResponse | types.JSONRPCError)


#: What `too_large` says.
TOO_LARGE: Final = f"the answer is too large: a message over {MAX_MESSAGE_BYTES} bytes"


def too_large(rid: types.RequestId | None) -> types.JSONRPCError:
    """The error a request `rid` fails with when its answer is over `MAX_MESSAGE_BYTES`."""
    error = types.ErrorData(code=ANSWER_TOO_LARGE, message=TOO_LARGE)
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)


def is_too_large(code: int, message: str) -> bool:
    """Whether an error is `too_large`'s, not a server's own of the same code (a server may
    use any code; one saying our words is taken at them)."""
    return code == ANSWER_TOO_LARGE and message == TOO_LARGE


def _unreadable(rid: types.RequestId, exc: Exception) -> types.JSONRPCError:
    first = exc.errors()[0] if isinstance(exc, pydantic.ValidationError) else None
    where = ".".join(map(str, first["loc"])) if first else ""
    why = (f"{where}: " if where else "") + first["msg"] if first else type(exc).__name__
    error = types.ErrorData(code=ANSWER_UNREADABLE, message=f"its answer is not JSON-RPC ({why})")
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)


def _key(rid: types.RequestId) -> types.RequestId:
    """A request id as the in-flight set holds it (a string of digits is the number)."""
    if isinstance(rid, str) and rid.isascii() and rid.isdigit():
        return int(rid)
    return rid


def _answered_by(head: bytes, stats: LineStats) -> list[types.RequestId]:
    """The requests in flight a line too long to read answers: the one its start names,
    else the only one, else all of them (they cannot be told apart)."""
    named = top_level_id(head)
    if named is not None and _key(named) in stats.in_flight:
        return [_key(named)]
    return sorted(stats.in_flight, key=str)


def _bad(stats: LineStats, problem: str) -> None:
    stats.bad += 1
    stats.last_problem = problem
