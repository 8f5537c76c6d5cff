"""MCP's stdio framing (one JSON-RPC message per line) on a pipe, read and written in the task
that asks, with no task of its own between the pipe and the SDK's session.

`LineReader.line` reads the next non-empty line of at most `MAX_MESSAGE_BYTES` (or the start of
a longer one, whose rest is skipped as it comes, never held whole). `LineWriter.send` writes a
line whole: at once when the pipe has room for it, which is the usual case, without a trip
through the scheduler; else waiting for room, one writer at a time, in the order they came.
A write cancelled after part of its line went out closes the pipe: nothing can be read right
after half a message.

Both stand where a memory stream and a task pumping it stood: a message a session sends is on
the pipe when `send` returns, and one it reads is parsed in its own read loop.
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import stat
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Final, Self

import anyio
import attrs
import trio

from ..core.records import Record
from ..core.servers import MAX_MESSAGE_BYTES

_CHUNK: Final = 65536
#: How much of a line too long to read is kept (where its `id` may be read: `top_level_id`).
HEAD_BYTES: Final = 4096


@attrs.frozen(repr=False, eq=False)
class TooLong(Record):
    """A line over `MAX_MESSAGE_BYTES`: its start."""

    head: bytes


class LineReader:
    """The lines of `stream`, read when asked."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._skipping = False
        self._ended = False

    async def line(self) -> bytes | TooLong:
        """The next non-empty line, or the start of one over `MAX_MESSAGE_BYTES` (the rest of
        it is skipped); raises `anyio.EndOfStream` at the end of the stream."""
        buf = self._buf
        while True:
            cut = buf.find(b"\n")
            if cut >= 0:
                skipping, self._skipping = self._skipping, False
                if cut > MAX_MESSAGE_BYTES and not skipping:  # came whole in the last chunk
                    head = bytes(buf[:HEAD_BYTES])
                    del buf[: cut + 1]
                    return TooLong(head)
                line = bytes(buf[:cut])
                del buf[: cut + 1]
                if not skipping and line.strip():
                    return line
                continue
            if len(buf) > MAX_MESSAGE_BYTES:
                head = bytes(buf[:HEAD_BYTES])
                buf.clear()
                if not self._skipping:
                    self._skipping = True
                    return TooLong(head)
            if self._ended:
                rest, skipped = bytes(buf), self._skipping
                buf.clear()
                self._skipping = False
                if rest.strip() and not skipped:
                    return rest
                raise anyio.EndOfStream
            chunk = await self._stream.receive_some(_CHUNK)
            if chunk:
                buf.extend(chunk)
            else:
                self._ended = True


class LineWriter:
    """Lines written whole to the pipe `stream`, in the order `send` was called."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._lock = trio.StrictFIFOLock()
        #: Whether a line of at most `PIPE_BUF` bytes is written whole or not at all (a pipe's
        #: rule), so that `send_nowait` can promise it.
        self._atomic = stat.S_ISFIFO(os.fstat(stream.fileno()).st_mode)

    def send_nowait(self, line: bytes) -> bool:
        """Writes `line` whole at once, or nothing (False): when it is over `PIPE_BUF`, when
        another line is being written, when the pipe has no room for it, or is gone."""
        if not self._atomic or len(line) > select.PIPE_BUF or self._lock.locked():
            return False
        try:
            return os.write(self._stream.fileno(), line) == len(line)
        except OSError:  # full (BlockingIOError), closed, the reader gone: the caller's `send`
            return False

    async def send(self, line: bytes) -> None:
        """Writes `line` (ending in a newline) whole. Raises `trio.BrokenResourceError` when
        the reader is gone, `trio.ClosedResourceError` when the pipe was closed."""
        lock = self._lock
        if lock.locked():  # another line waits for room: after it
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            await self._write(line)
        finally:
            lock.release()

    async def send_parts(self, parts: Iterable[bytes]) -> None:
        """Writes the line `parts` make together (the last ending in a newline) whole, one
        part after another, never holding the whole line: a line larger than what it is made
        from (a batch's answers) costs a part's memory at a time."""
        async with self._lock:
            out = False
            try:
                for part in parts:
                    await self._write(part)
                    out = True
            except trio.Cancelled:
                if out:  # (as in `_write`: half a message is out)
                    self._stream.close()
                raise

    async def _write(self, line: bytes) -> None:
        fd = self._stream.fileno()
        sent, size = 0, len(line)
        with memoryview(line) as view:
            while sent < size:
                try:
                    sent += os.write(fd, view[sent:])
                except BlockingIOError:
                    try:
                        await trio.lowlevel.wait_writable(fd)
                    except trio.Cancelled:
                        if sent:  # half a message is out: the pipe is no use after it
                            self._stream.close()
                        raise
                except OSError as exc:
                    if exc.errno == errno.EBADF:
                        raise trio.ClosedResourceError("the pipe was closed") from None
                    raise trio.BrokenResourceError(str(exc)) from exc


class BorrowedSend:
    """What the SDK asks of a stream it sends on besides `send`, for one whose descriptor is
    its opener's to close: `aclose` closes nothing, and it is a context of its own."""

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass


def json_line(message: dict[str, Any]) -> bytes | None:
    """`message` as one line of strict JSON in UTF-8 (no NaN, no lone surrogate), or None
    when it cannot be one."""
    try:
        text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode() + b"\n"
    except (ValueError, UnicodeEncodeError):
        return None


#: A JSON-RPC id's value where it starts: a number or a string.
_ID_VALUE: Final = re.compile(rb'\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def top_level_id(head: bytes) -> int | str | None:
    """The value of the key `id` of the JSON object `head` begins (at its top level, not an
    `id` inside its `result`), when `head` reaches it; else None."""
    depth, i, n = 0, 0, min(len(head), HEAD_BYTES)
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


def unread_id(line: bytes, *, request: bool) -> int | str | None:
    """The `id` of a line the SDK could not read, read as leniently as JSON allows (a lone
    surrogate escaped, NaN), when the line is a request (`request`: it has a `method`) or an
    answer (it has none); None for anything else."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # (nested past what the parser takes)
        return None
    if not isinstance(message, dict) or isinstance(message.get("method"), str) != request:
        return None
    rid = message.get("id")
    return rid if isinstance(rid, int | str) and not isinstance(rid, bool) else None


def an_answer(message: object) -> bool:
    """Whether `message`, a JSON value, is shaped as an answer (an object with a `result` or
    an `error` and no `method`), which JSON-RPC never answers, however malformed."""
    return (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
    )


def batch_ids(line: bytes) -> tuple[list[int | str | None], bool] | None:
    """When `line` is a JSON-RPC batch (a JSON array): the `id` each of its elements is
    answered with, in order, and whether it is empty (JSON-RPC answers that once, with a null
    `id`, not in an array); None when it is not an array. A request is answered by its `id`;
    an element that is no request (not an object, no `method`, a request whose `id` is not a
    string nor an integer) with a null `id`, as JSON-RPC answers an invalid request; a
    notification (no `id`, or a method `notifications/…`) and an answer get nothing."""
    try:
        batch = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(batch, list):
        return None
    ids: list[int | str | None] = []
    for message in batch:
        if an_answer(message):
            continue
        if not isinstance(message, dict) or not isinstance(method := message.get("method"), str):
            ids.append(None)
            continue
        if "id" not in message:
            continue
        rid = message["id"]
        if isinstance(rid, int | str) and not isinstance(rid, bool):
            ids.append(rid)
        elif not method.startswith("notifications/"):
            ids.append(None)
    return ids, not batch
