"""The server side of one WebSocket: the only module that knows trio-websocket's insides.

trio-websocket 0.12 (pinned `<0.13`) gives a connection per stream, but three things the
service needs are not public, so they live here, on a subclass, each tested:

- an oversized message gets the JSON error message before the library's 1009 close, not only
  a close reason (`_handle_message_event`);
- a stream that never sends a WebSocket handshake (a plain HTTP request gets the library's bare
  400) ends the wait at once instead of holding a task for the connect timeout
  (`wait_request`);
- a send cancelled mid-write leaves a broken frame on the wire, so such a connection is never
  written to again: it is aborted (its TCP stream closed), never closed with a close frame
  (`send_text`, `send_frame`, `close`);
- fan-out sends one message to many sockets: a server's frames are not masked, so the frame's
  bytes are the same for every client and are built once (`text_frame`) and written as they
  are (`send_frame`, `offer`), as `websockets`' `broadcast()` does. This skips wsproto for
  those writes, which is sound because the service never fragments a message and negotiates
  no extension (a data frame then changes no wsproto state);
- a broadcaster writes to many sockets from one task, so it cannot wait for any of them:
  `offer` writes what the socket takes at once and keeps the rest of the message, which goes
  out before anything else is written to the socket (`flush`, `send_frame`, and the library's
  own writes: pongs, the close frame), so no other bytes ever land inside a message.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

import trio
import wsproto
import wsproto.events
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest

#: Bytes read from the socket at a time.
RECEIVE_BYTES: Final = 64 * 1024
#: Messages from the client queued before the reader waits (backpressure on the client).
CLIENT_QUEUE: Final = 1
#: How long a close waits for the client's close frame before aborting the socket.
CLOSE_S: Final = 2.0


def text_frame(payload: bytes) -> bytes:
    """One complete text message as a server sends it: FIN, opcode 1, no mask (RFC 6455 §5.2).

    `payload` is the message's UTF-8."""
    size = len(payload)
    if size < 126:
        head = bytes((0x81, size))
    elif size < 1 << 16:
        head = bytes((0x81, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x81, 127)) + size.to_bytes(8, "big")
    return head + payload


class ServerConnection(WebSocketConnection):
    """One accepted stream, before and after the handshake."""

    def __init__(self, stream: trio.abc.Stream, *, max_message_size: int, too_big: str) -> None:
        super().__init__(
            stream,
            wsproto.WSConnection(wsproto.ConnectionType.SERVER),
            message_queue_size=CLIENT_QUEUE,
            max_message_size=max_message_size,
            receive_buffer_size=RECEIVE_BYTES,
        )
        self._too_big = too_big
        self._too_big_sent = False
        self._reader_done = trio.Event()
        #: The rest of a message `offer` began: written before anything else.
        self._unsent: memoryview | None = None
        #: A send was cancelled mid-write: the wire holds a broken frame.
        self.broken = False

    async def serve_reader(self) -> None:
        """The library's reader task; runs until the stream ends or is closed."""
        try:
            await self._reader_task()
        finally:
            self._reader_done.set()

    async def wait_request(self) -> WebSocketRequest | None:
        """The client's handshake, or None when the stream ended without one (the library
        has answered it already: a plain HTTP request gets 400). The caller bounds it."""
        got: list[WebSocketRequest] = []
        async with trio.open_nursery() as nursery:

            async def request() -> None:
                got.append(await self._get_request())
                nursery.cancel_scope.cancel()

            nursery.start_soon(request)
            await self._reader_done.wait()
            nursery.cancel_scope.cancel()
        return got[0] if got else None

    async def _handle_message_event(
        self, event: wsproto.events.BytesMessage | wsproto.events.TextMessage
    ) -> None:
        if not self._too_big_sent and self._message_size + len(event.data) > self._max_message_size:
            self._too_big_sent = True
            # The library closes with 1009 next; the client also gets it said in JSON.
            with contextlib.suppress(ConnectionClosed):
                await self._send(wsproto.events.TextMessage(data=self._too_big))
        await super()._handle_message_event(event)

    async def send_text(self, text: str) -> None:
        """One text message. Cancelled mid-write, the connection is marked broken."""
        self.broken = True
        await self.send_message(text)
        self.broken = False

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
        stream = self._stream
        if (
            isinstance(stream, trio.SocketStream)
            and not self._stream_lock.locked()
            and not self._close_reason
        ):
            with contextlib.suppress(OSError):  # full (EAGAIN) or gone: `flush` meets it
                written = os.write(stream.socket.fileno(), frame)
        if written == len(frame):
            return True
        self._unsent = memoryview(frame)[written:]
        return False

    async def flush(self) -> None:
        """Writes what `offer` left, if anything. Raises `ConnectionClosed` when the client
        is gone; cancelled mid-write, the connection is marked broken."""
        if self._unsent is None:
            return
        if self._close_reason:
            raise ConnectionClosed(self._close_reason)
        async with self._stream_lock:
            await self._write_unsent()

    async def send_frame(self, frame: bytes) -> None:
        """One message built by `text_frame`, written as it is (see the module docstring),
        after anything `offer` left. Cancelled mid-write, the connection is marked broken."""
        if self._close_reason:
            raise ConnectionClosed(self._close_reason)
        await self.flush()
        if self.offer(frame):
            # The common case: the kernel took the whole frame at once.
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self.flush()

    async def _write_unsent(self) -> None:
        """With the stream lock held: the rest of an offered message, first."""
        unsent, self._unsent = self._unsent, None
        if unsent is None:
            return
        broken, self.broken = self.broken, True
        try:
            await self._stream.send_all(unsent)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self._abort_web_socket()
            assert self._close_reason is not None
            raise ConnectionClosed(self._close_reason) from None
        self.broken = broken

    async def _send(self, event: wsproto.events.Event) -> None:
        # The library's one write path (messages, pongs, the close frame): as its own, with
        # the rest of an offered message written first.
        data = self._wsproto.send(event)
        async with self._stream_lock:
            await self._write_unsent()
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await self._abort_web_socket()
                assert self._close_reason is not None
                raise ConnectionClosed(self._close_reason) from None

    async def abort(self) -> None:
        """Closes the TCP stream without a close frame (for a broken or stalled socket)."""
        await trio.aclose_forcefully(self._stream)

    async def close(self, code: int, reason: str | None) -> None:
        """Closes with `code`, waiting at most `CLOSE_S` for the client's reply; a broken
        connection, or one that does not answer in time, is aborted instead. Runs shielded,
        so a handler being cancelled still closes its socket properly and in bounded time."""
        with trio.CancelScope(shield=True):
            if self.broken:
                await self.abort()
                return
            with trio.move_on_after(CLOSE_S) as bound:
                await self.aclose(code, reason)
            if bound.cancelled_caught:
                await self.abort()
