"""One accepted socket, from its request to its end: the trio layer over `protocol.py`.

`serve_reader` reads the socket for the whole connection and feeds the protocol; its
handler waits for the request (`wait_request`), answers it (`respond`, or `accept` for an
upgrade), then sends and receives messages. Safe for many clients and one broadcaster:

- every write goes through one lock, and what `offer` left of a message goes out before
  anything else (the protocol's own answers too), so no other bytes land inside a message;
- a send cancelled mid-write leaves a broken frame on the wire, so such a connection is never
  written to again: it is aborted, never closed with a close frame (`broken`, `close`);
- fan-out: a server's frames are not masked, so a frame's bytes are the same for every
  client, built once (`broadcast.text_frame`) and written as they are (`send_frame`,
  `offer`), as `websockets`' `broadcast()` does, skipping wsproto (sound: the service
  never fragments a message, negotiates no extension);
- a broadcaster writes to many sockets from one task and waits for none: `offer` writes
  what the socket takes at once, the rest left for the socket's task to `flush`.

Nothing is read between a request and its answer (no bytes pile up before admission); a
request pipelined behind a plain one is read once that answer is all sent.
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Final

import trio

from . import requestcycle
from .framerate import FrameRate
from .pings import Pings
from .protocol import ABNORMAL, ServerProtocol
from .protocolevents import Ended, Message, Phase, Pong, Request
from .unfinished import Unfinished
from .wire import ConnectionClosed

#: Bytes read from the socket at a time.
RECEIVE_BYTES: Final = 64 * 1024
#: Messages from the client queued before the reader waits (backpressure on the client).
CLIENT_QUEUE: Final = 1
#: How long a close waits for the client's close frame before aborting the socket.
CLOSE_S: Final = 2.0
#: The phases in which the socket is read (not while a request waits for its answer).
_READING: Final = frozenset({Phase.HEAD, Phase.OPEN, Phase.CLOSING})


class ServerConnection:
    """One accepted stream, before and after the upgrade."""

    def __init__(
        self,
        stream: trio.SocketStream,
        *,
        max_message_size: int,
        too_big: str,
        stall_s: float = math.inf,
        unfinished: Unfinished | None = None,
        message_s: float = math.inf,
    ) -> None:
        self._stream = stream
        #: How long one piece of an answer may take to be written (`write_answer`).
        self._stall_s = stall_s
        self._frames = FrameRate()
        #: What this connection's message or body under way holds of the service's budget.
        self.holding = unfinished.holding() if unfinished is not None else None
        self._protocol = ServerProtocol(
            max_message_bytes=max_message_size,
            too_big=too_big,
            frames=self._frames,
            holding=self.holding,
            queues=requestcycle.Queues(stream.socket.fileno),
        )
        #: A message must come whole within this of its first frame (4408).
        self._message_s = message_s
        self._message_due = math.inf
        self._lock = trio.Lock()
        self._messages_in, self._messages = trio.open_memory_channel[str | bytes](CLIENT_QUEUE)
        self._asked = trio.Event()  # the request is in, or the reader has ended without one
        self._answered = trio.Event()
        #: A plain answer is all sent: the next request is read, or the connection ends.
        self._cycled = trio.Event()
        self._reader_done = trio.Event()
        self._pings = Pings()
        #: Why the WebSocket is closed or closing; None while it is open (or not yet).
        self._closed: ConnectionClosed | None = None
        #: The rest of a message `offer` began: written before anything else.
        self._unsent: memoryview | None = None
        #: A send was cancelled mid-write: the wire holds a broken frame.
        self.broken = False

    @property
    def remote(self) -> str:
        """The client's address: `host:port` for TCP ("?" once the socket has no peer)."""
        try:
            peer = self._stream.socket.getpeername()
        except OSError:
            return "?"
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    # ---- reading ---------------------------------------------------------------------------

    async def serve_reader(self) -> None:
        """Reads the socket until the connection ends: the client closed, the socket broke,
        a plain HTTP request was answered. Cancelled, it just stops reading."""
        try:
            async with self._messages_in:
                await self._read()
        finally:
            self._protocol.release()  # (a message cut short holds nothing any more)
            self._asked.set()
            self._reader_done.set()

    async def _read(self) -> None:
        protocol = self._protocol
        while True:
            for event in protocol.events():
                if not await self._handle(event):
                    return
            try:
                await self._write(protocol.data_to_send())
            except ConnectionClosed:
                return
            if protocol.phase in (Phase.ASKED, Phase.ANSWERED):  # (its answer; a request next?)
                waited = self._answered if protocol.phase is Phase.ASKED else self._cycled
                await waited.wait()
                if waited is self._answered or protocol.phase is not Phase.ANSWERED:
                    continue
            if protocol.phase not in _READING:
                return
            try:
                if self._message_due == math.inf:  # (no scope: one a read cost every socket)
                    data = await self._stream.receive_some(RECEIVE_BYTES)
                else:
                    with trio.move_on_at(self._message_due) as late:
                        data = await self._stream.receive_some(RECEIVE_BYTES)
                    if late.cancelled_caught:  # (a message begun, and not whole in time)
                        protocol.refuse_late(self._message_s)
                        continue
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            now = trio.current_time()
            self._frames.refill(now)
            protocol.receive_data(data)
            if not protocol.message_begun:
                self._message_due = math.inf
            elif self._message_due == math.inf:
                self._message_due = now + self._message_s

    async def _handle(self, event: Request | Message | Pong | Ended) -> bool:
        """One event from the protocol; False once the connection has ended."""
        if isinstance(event, Request):
            self._asked.set()
        elif isinstance(event, Message):  # (dropped when nobody reads any more: closing)
            with contextlib.suppress(trio.BrokenResourceError):
                await self._messages_in.send(event.data)
        elif isinstance(event, Pong):
            self._pings.pong(event.payload)
        else:
            if self._closed is None:
                self._closed = ConnectionClosed(event.code, event.reason)
            # What the protocol answered by itself (the reply to a close, a 400, the 1009
            # close) goes out, then the stream closes: a server closes TCP first.
            with contextlib.suppress(ConnectionClosed):
                await self._write(self._protocol.data_to_send())
            self._stream.socket.close()
            return False
        return True

    async def wait_request(self) -> Request | None:
        """The client's request head, or None when the stream ended without one (a
        malformed request has been answered 400 already). The caller bounds the wait."""
        await self._asked.wait()
        return self._protocol.request if self._protocol.phase is Phase.ASKED else None

    async def get_message(self) -> str | bytes:
        """The client's next message. Raises `ConnectionClosed` once the client has closed
        and every message before its close is taken, or at once when the server closes."""
        try:
            return await self._messages.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise (self._closed or ConnectionClosed(1006)).again() from None

    def next_request(self) -> bool:
        """After a plain answer, the request pipelined behind it (`wait_request` waits for
        it: `ServerProtocol.next_request`); False when the connection ends (it is dropped)."""
        if self.broken or self._closed is not None or not self._protocol.next_request():
            return False
        self._asked, self._answered = trio.Event(), trio.Event()
        cycled, self._cycled = self._cycled, trio.Event()
        cycled.set()
        return True

    # ---- answering the request ------------------------------------------------------------

    async def respond(
        self,
        status: int,
        body: bytes,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        content_type: bytes = b"application/json",
    ) -> None:
        """Answers the request over HTTP (a refused upgrade too); the connection then ends
        (the caller aborts it). A client that has gone is not an error here; one that takes
        the answer for longer than `stall_s` (it does not read) is cut: marked broken."""
        data = self._protocol.respond(status, body, headers, content_type)
        self._answered.set()
        with trio.move_on_after(self._stall_s), contextlib.suppress(ConnectionClosed):
            await self._write(data)

    async def accept(self, takes_messages: bool = True, answer: bytes | None = None) -> None:
        """Upgrades to WebSocket (101); the reader then reads the client's frames. The 101
        is written before the reader goes on: frames that came with the request head and
        broke the protocol end the connection, but after the client has its answer. With
        `takes_messages` False, the endpoint takes none: one is refused at its first frame.
        An `answer` is the endpoint's one message: it and the close (1000) go with the 101,
        and the socket is closing from then on (`ServerProtocol.accept`). A client that
        takes them for longer than `stall_s` (it does not read) is cut: marked broken."""
        pieces = self._protocol.accept(takes_messages, answer)
        try:
            with trio.move_on_after(self._stall_s):
                for data in pieces:  # (an answer's frame is shared by every socket: not joined)
                    await self._write(data)
        finally:
            self._answered.set()

    @property
    def protocol(self) -> ServerProtocol:
        return self._protocol

    async def receive_raw(self) -> bytes:
        """Bytes from the client while the reader does not read (a request's body before its
        answer, or what comes after the answer began); b"" once the client closed or broke."""
        assert self._protocol.phase in (Phase.ASKED, Phase.ANSWERED), self._protocol.phase
        try:
            data = await self._stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""
        self._frames.refill(trio.current_time())  # (a body's chunks count as frames do)
        return data

    async def go_on(self) -> None:
        """`100 Continue`, for a client that waits for it before its body (`Expect:
        100-continue`); the request stays unanswered, a client gone is not an error here."""
        with contextlib.suppress(ConnectionClosed):
            await self._write(self._protocol.go_on())

    async def write_answer(self, data: bytes) -> None:
        """Bytes of an answer the protocol made (`respond_head`, `respond_body`,
        `respond_end`). Raises `ConnectionClosed` when the client is gone, or takes them
        for longer than `stall_s` (it does not read: the connection is marked broken)."""
        self._answered.set()
        with trio.move_on_after(self._stall_s) as stalled:
            await self._write(data)
        if stalled.cancelled_caught:
            raise ConnectionClosed(1006, "the client does not read its answer")

    # ---- writing ---------------------------------------------------------------------------

    async def send_text(self, text: str) -> None:
        """One text message. Cancelled mid-write, the connection is marked broken."""
        self._check_open()
        await self._write(self._protocol.text(text), message=True)

    async def send_ping(self) -> trio.Event:
        """Pings the client; the event is set by its pong (or a pong to a later ping).
        Cancelled mid-write, the connection is marked broken."""
        self._check_open()
        payload, answered = self._pings.new()
        await self._write(self._protocol.ping(payload), message=True)
        return answered

    @property
    def unsent(self) -> bool:
        """A message `offer` began is not all written yet: `flush` before anything else."""
        return self._unsent is not None

    def offer(self, frame: bytes) -> bool:
        """Writes a message built by `text_frame` now, without waiting: one write(2), no
        trio machinery, for a task that writes to many sockets in turn. True when the socket
        took all of it. False otherwise (its buffer is full, another write is in progress,
        the client has gone): the rest, all of the message if nothing went, is kept, the
        message counts as given, and the owner of the socket must `flush` it. Only one
        message may be pending: offer nothing more until it is flushed."""
        assert self._unsent is None, "offer() with a message still unsent"
        written = 0
        if not self._lock.locked() and self._writable:
            with contextlib.suppress(OSError):  # full (EAGAIN) or gone: `flush` meets it
                written = os.write(self._stream.socket.fileno(), frame)
        if written == len(frame):
            return True
        self._unsent = memoryview(frame)[written:]
        return False

    async def flush(self) -> None:
        """Writes what `offer` left, if anything. Raises `ConnectionClosed` when the client
        is gone; cancelled mid-write, the connection is marked broken."""
        if self._unsent is None:
            return
        self._check_open()
        async with self._lock:
            await self._write_unsent()

    async def send_frame(self, frame: bytes) -> None:
        """One message built by `text_frame`, written as it is (see the module docstring),
        after anything `offer` left. Cancelled mid-write, the connection is marked broken."""
        self._check_open()
        await self.flush()
        if self.offer(frame):  # (the common case: the kernel took the whole frame at once)
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self.flush()

    @property
    def _writable(self) -> bool:
        """Open for messages: not closed, and no close frame queued by the protocol (after
        a message over the cap, before the reader has handed that end over)."""
        return self._closed is None and self._protocol.phase is Phase.OPEN

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed.again()
        if not self._writable:
            raise ConnectionClosed(1006, "the connection is ending")

    async def _write(self, data: bytes, *, message: bool = False) -> None:
        """The one write path: under the lock, the rest of an offered message first.
        Cancelled mid-write (or the client gone), the connection is marked broken. A
        `message` is checked again under the lock: the protocol may have ended the socket
        (its own refusal and close frame) while it waited, and nothing goes after a close."""
        if not data:
            return
        async with self._lock:
            if message:
                self._check_open()
            await self._write_unsent()
            await self._send_all(data)

    async def _write_unsent(self) -> None:
        """With the lock held: the rest of an offered message."""
        unsent, self._unsent = self._unsent, None
        if unsent is not None:
            await self._send_all(unsent)

    async def _send_all(self, data: bytes | memoryview) -> None:
        """With the lock held (only one write at a time may mark the connection)."""
        broken, self.broken = self.broken, True
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if self._closed is None:
                self._closed = ConnectionClosed(1006, "the client is gone")
            raise self._closed.again() from None
        self.broken = broken

    # ---- ending ----------------------------------------------------------------------------

    async def abort(self) -> int | None:
        """Cuts the TCP stream, no close frame; the code of a closing handshake made, else None."""
        made = self._closed
        self.drop()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return None if made is None or made.code == ABNORMAL else made.code

    def drop(self) -> None:
        """`abort` at once, with no checkpoint (`aclose_forcefully` raises and catches a
        `Cancelled`, a third of what a churned socket cost): a connection's end; idempotent."""
        if self._closed is None:
            self._closed = ConnectionClosed(1006, "aborted")
        self._stream.socket.close()  # (what `SocketStream.aclose` does, before its checkpoint)
        self._cycled.set()  # (a reader waiting for a next request ends)

    async def close(self, code: int, reason: str | None, said: str | None = None) -> None:
        """Closes with `code` (after the message `said`, its error message), waiting at most
        `CLOSE_S` for the client's reply; a broken connection, or one that does not answer
        in time, is aborted instead. Runs shielded, so a handler being cancelled still closes
        its socket properly and in bounded time."""
        with trio.CancelScope(shield=True):
            if self.broken:
                await self.abort()
                return
            with trio.move_on_after(CLOSE_S) as bound:
                await self._close(code, reason, said)
            if bound.cancelled_caught:
                await self.abort()

    async def _close(self, code: int, reason: str | None, said: str | None) -> None:
        if self._closed is None and self._protocol.phase is Phase.OPEN:
            self._closed = ConnectionClosed(code, reason)
            self._messages.close()  # what the client sends from now on is dropped
            # The message and the close frame made in one step: a message of the client's
            # read meanwhile is dropped, never refused with an error message of its own.
            data = self._protocol.text(said) if said is not None else b""
            with contextlib.suppress(ConnectionClosed):
                await self._write(data + self._protocol.close(code, reason))
                await self._reader_done.wait()  # the client's close frame ends it
        else:  # ended by the protocol itself (a refusal, the reply to a close): the reader
            await self._reader_done.wait()  # writes its close frame, then closes the stream
        self._stream.socket.close()
