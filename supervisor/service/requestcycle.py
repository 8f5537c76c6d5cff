"""What h11 holds of a plain request beyond its head, for `protocol.py`: its body as it
comes, and whether the connection goes on to another request once it is answered.

A client may pipeline (RFC 9112, 9.3.2): send its next requests without waiting for the
answers. An answer keeps the connection open only for a request the client has sent
already: bytes after this request, read with it or waiting unread in the socket. Any other
answer says `Connection: close` and nothing after it is read, so no connection is kept open
for a request that may never come, and a client that waits for each answer before it asks
again gets one request per connection. The pipeline also ends at an answer made while the
answers before it are still unsent (the client is not reading them): else a client that
pipelined without reading had the server answer until the socket was full, then held the
connection for the whole send bound (60 s) without a seat, where one small answer (every
answer a client without the token can ask is) fits in the socket's buffer and ends it.
"""

from __future__ import annotations

import fcntl
import sys
import termios
from collections.abc import Callable, Iterable
from typing import Final

import h11

from . import heads
from .framerate import FrameRate
from .protocolevents import BadBody, Request

#: An ioctl's answer of 0 (a C int).
_ZERO: Final = bytes(4)


class Queues:
    """What the kernel holds of a socket (`fileno()` gives it, -1 once closed), asked
    without reading or writing: whether the client has sent bytes not read yet, and whether
    answers given are still unsent (the client is not taking them). A closed socket has
    none."""

    def __init__(self, fileno: Callable[[], int] = lambda: -1) -> None:
        self._fileno = fileno

    def _ask(self, request: int) -> int:
        try:
            return int.from_bytes(fcntl.ioctl(self._fileno(), request, _ZERO), sys.byteorder)
        except (OSError, ValueError):  # (ValueError: -1, the socket closed)
            return 0

    def unread(self) -> bool:
        return self._ask(termios.FIONREAD) > 0

    def backed_up(self) -> bool:
        return self._ask(termios.TIOCOUTQ) > 0


def _bodiless(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers give it no body (no `Transfer-Encoding`, no
    `Content-Length` above 0): h11 ends it at its head."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return False
    return True


def pipelined(conn: h11.Connection, request: Request | None, queues: Queues) -> bool:
    """Whether the answer to `request` may leave the connection open: a plain request whose
    body is all read (one without a body is, once h11 is asked), with bytes after it in
    h11's buffer or unread in the socket, and the answers before it not backed up in the
    socket. h11 still closes when the client asked it, or spoke HTTP/1.0."""
    if request is None or request.websocket:
        return False
    if conn.their_state is h11.SEND_BODY and _bodiless(request.headers):
        event = conn.next_event()  # (EndOfMessage: a request without a body ends there)
        assert isinstance(event, h11.EndOfMessage), event
    if conn.their_state is not h11.DONE or queues.backed_up():
        return False
    trailing, closed = conn.trailing_data
    return bool(trailing) or (not closed and queues.unread())


def next_cycle(conn: h11.Connection) -> tuple[bytes, bool] | None:
    """Once an answer that kept the connection open is all sent: h11 made ready for the
    next request, and what came of it so far (h11's buffer, and whether the client closed
    its side after it); None when the connection ends."""
    if not (conn.our_state is conn.their_state is h11.DONE):
        return None
    conn.start_next_cycle()
    return conn.trailing_data


def go_on(conn: h11.Connection) -> bytes:
    """`100 Continue` for a client that waits for it before it sends its body (`Expect:
    100-continue`, RFC 9110 §10.1.1), once the request is to be read; nothing for one that
    does not wait (or whose body has begun to come already)."""
    if not conn.they_are_waiting_for_100_continue:
        return b""
    return conn.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))


def body(conn: h11.Connection, frames: FrameRate | None) -> tuple[bytes, bool]:
    """What of the request's body has come since the last call, and whether it is all in.
    `BadBody` when the client broke its framing or closed before its end, or sends it in
    more pieces (chunks) than the budget of `frames` allows: each costs as one."""
    pieces: list[bytes] = []
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise BadBody(f"malformed request body: {heads.in_words(str(exc))}") from None
        if isinstance(event, h11.Data):
            if frames is not None and not frames.take():
                raise BadBody(frames.reason.replace("frames", "chunks", 1))
            pieces.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(pieces), True
        elif event is h11.NEED_DATA:
            return b"".join(pieces), False
        else:  # the connection closed (or paused) before the body's end
            raise BadBody("the client closed the connection before the end of its request")
