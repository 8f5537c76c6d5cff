"""The front door's protocol state: HTTP/1.1, and WebSocket after an upgrade, as bytes in and
bytes out. Sans-IO: no trio, no socket, no clock; `connection.py` owns the socket and every
timeout, and feeds this what it reads.

Every request is parsed by `h11`, so a plain HTTP request and an upgrade share one listener.
An upgrade is handed, parsed, to `wsproto.WSConnection(SERVER)` through its
`initiate_upgrade_connection` (wsproto's entry for servers that parse HTTP themselves): it
checks the WebSocket headers, builds the 101 and then frames the messages. Raw bytes given
to `WSConnection` would be parsed there, anything not an upgrade answered with a bare 400;
hypercorn's `protocol/h11.py` and `ws_stream.py` split the work so too.

What the protocol answers itself (a pong, the reply to a close, a 400 for a request h11
cannot parse, an error and 1009 for a message over the cap) waits in `data_to_send()`; what
the owner asks for (`respond`, `accept`, `text`, `ping`, `close`) is returned as bytes.
wsproto checks the client's frames (masking, UTF-8, control frames); a message comes whole.
"""

from __future__ import annotations

import collections
import http
import re
from collections.abc import Iterable, Iterator
from typing import Final

import h11
import wsproto
import wsproto.connection
import wsproto.events
import wsproto.utilities

from . import heads, requestcycle
from .framerate import TOO_FAST, FrameRate
from .protocolevents import Ended, Event, Message, Phase, Pong, Refusing, Request, error_body
from .unfinished import Holding
from .wire import BUSY, COMPLETE, NO_MESSAGES, Close, WireError, refused

__all__ = ["Phase", "ServerProtocol"]

#: The close code of a connection that ended without a close frame (RFC 6455 §7.1.5).
ABNORMAL: Final = 1006
#: The close code for a message over the cap.
TOO_BIG: Final = 1009
#: The close reasons in our words for the frames wsproto finds broken, by close code; a code
#: not here keeps wsproto's reason (1002's say what was wrong: an unmasked frame, a bad
#: opcode). Its 1007 reason is a Python codec error's text (`'utf-8' codec can't decode…`).
_BROKEN_REASONS: Final = {1007: "invalid data: a text message or close reason that is not UTF-8"}
#: A frame's kind as wsproto puts it in a 1002 reason (`got <Opcode.TEXT: 1>`), to say in words.
_OPCODE: Final = re.compile(r"<Opcode\.(\w+): \d+>")


class ServerProtocol:
    """One accepted connection's protocol state, from the request head to the end.

    `max_message_bytes` caps a client's message, in bytes (a text message's UTF-8, as it
    came on the wire, not its characters); past it, `too_big` (a text message) and a 1009
    close are sent and nothing more is read. `frames` is the client's budget of frames
    (`framerate.py`): past it, a 1008 close is sent and nothing more is read. `holding` is
    this connection's share of the service's budget of unfinished messages (`unfinished.py`):
    a message past it is refused (1013) and nothing more is read."""

    def __init__(
        self,
        *,
        max_message_bytes: int,
        too_big: str,
        frames: FrameRate | None = None,
        holding: Holding | None = None,
        queues: requestcycle.Queues | None = None,
    ) -> None:
        self.max_message_bytes = max_message_bytes
        self.too_big = too_big
        self._frames = frames
        self._holding = holding
        #: What the socket holds unread and unsent (whether a pipeline goes on).
        self._queues = queues or requestcycle.Queues()
        #: No request after this one is answered (`last`): its answer says `Connection: close`.
        self._last = False
        #: False for an endpoint that takes no messages (`accept`).
        self._takes_messages = True
        self._begun = False
        self.phase = Phase.HEAD
        self.request: Request | None = None
        self._head_only = False  # (a HEAD request: known before it is taken or refused)
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=heads.MAX_HEAD_BYTES)
        self.head = heads.HeadBound()  # (the request head as it comes)
        self._ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
        self._events: collections.deque[Event] = collections.deque()
        self._outbox = bytearray()
        self._data = bytearray()  # the message so far (text: UTF-8), not an object per fragment
        self._size = 0

    # ---- bytes in --------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """What the client sent; b"" when it closed its side. Ignored once nothing more is
        read (ASKED, ANSWERED, ENDED): the owner stops reading then."""
        if self.phase is Phase.HEAD:
            if not data:
                self._end(ABNORMAL)  # gone before its request was all in
                return
            if (said := self.head.refusal(data)) is not None:
                self.refuse(431, said)
                return
            self._h11.receive_data(data)
            self._read_head()
        elif self.phase in (Phase.OPEN, Phase.CLOSING):
            if not data:
                self._end(ABNORMAL)
                return
            self._ws.receive_data(data)
            self._read_frames()

    def events(self) -> Iterator[Event]:
        """What the bytes received so far made, in order; each is given once."""
        while self._events:
            yield self._events.popleft()

    def data_to_send(self) -> bytes:
        """The answers the protocol made by itself since the last call, in order."""
        data = bytes(self._outbox)
        self._outbox.clear()
        return data

    def _read_head(self) -> None:
        try:
            event = self._h11.next_event()
        except h11.RemoteProtocolError as exc:
            said = heads.in_words(str(exc), tls=self.head.tls)
            self.refuse(exc.error_status_hint, f"malformed HTTP request: {said}")
            return
        if not isinstance(event, h11.Request):
            return  # NEED_DATA: the head is not all here yet
        method = event.method.decode("ascii")  # h11 takes only a token
        self._head_only = method == "HEAD"  # (a refusal below answers it so too)
        read = heads.origin_form(event.target, event.headers)
        if isinstance(read, str):
            self.refuse(400, read)
            return
        target, headers = read
        self.phase = Phase.ASKED
        if method != "GET" or not heads.asks_websocket(headers):
            self.request = Request(method, target, headers, websocket=False)
            self._emit(self.request)
            return
        # An upgrade has no body: h11 then stops at the switch (PAUSED) with what follows
        # the head, which is the client's first frames, kept for `accept`.
        if not isinstance(self._h11.next_event(), h11.EndOfMessage) or (
            self._h11.next_event() is not h11.PAUSED
        ):
            self.refuse(400, "a WebSocket upgrade request has no body")
            return
        refused = heads.handshake_refusal(headers, event.http_version)
        if refused is not None:
            self.refuse(refused[0], f"bad WebSocket handshake: {refused[1]}", refused[2])
            return
        try:
            self._ws.initiate_upgrade_connection(list(headers), target.encode())
        except wsproto.utilities.RemoteProtocolError as exc:
            hint = exc.event_hint
            status: int = 400
            extra: tuple[tuple[bytes, bytes], ...] = ()
            if isinstance(hint, wsproto.events.RejectConnection):
                status, extra = hint.status_code, tuple(hint.headers)
            self.refuse(status, f"bad WebSocket handshake: {exc}", extra)
            return
        except UnicodeError:  # wsproto reads `Host` as IDNA
            self.refuse(400, "bad WebSocket handshake: the Host header is not a host name")
            return
        for _ in self._ws.events():  # the Request event: its contents are `headers` already
            pass
        self.request = Request(method, target, headers, websocket=True)
        self._emit(self.request)

    def _read_frames(self) -> None:
        for event in self._ws.events():  # (each frame parsed as it is asked for)
            if self.phase is Phase.ENDED:
                return
            if self._frames is not None and not self._frames.take():
                said = self._frames.reason  # (the rest read is never parsed)
                self._outbox += self._ws.send(wsproto.events.CloseConnection(TOO_FAST, said))
                self._end(TOO_FAST, said)
                return
            if isinstance(event, (wsproto.events.TextMessage, wsproto.events.BytesMessage)):
                self._message(event)
            elif isinstance(event, wsproto.events.Ping):
                # Once the server's close is sent, a ping that crossed it is not answered
                # (wsproto sends nothing after a close): the client's close reply ends it.
                if self._ws.state is wsproto.connection.ConnectionState.OPEN:
                    self._outbox += self._ws.send(event.response())
            elif isinstance(event, wsproto.events.Pong):
                self._emit(Pong(bytes(event.payload)))
            elif isinstance(event, wsproto.events.CloseConnection):
                state, reason = self._ws.state, event.reason
                if state is wsproto.connection.ConnectionState.REMOTE_CLOSING:
                    self._outbox += self._ws.send(event.response())
                elif state is wsproto.connection.ConnectionState.OPEN:
                    # A frame that broke the protocol (bad UTF-8, an unmasked frame) comes as
                    # a close event too, the state still open: the client is told why (1002,
                    # 1007), and nothing more of it is read.
                    reason = _BROKEN_REASONS.get(event.code) or _OPCODE.sub(
                        lambda m: f"a {m[1].lower()} frame", reason or ""
                    )
                    close = wsproto.events.CloseConnection(event.code, reason)
                    self._outbox += self._ws.send(close)
                self._end(event.code, reason or None)

    def _message(self, event: wsproto.events.TextMessage | wsproto.events.BytesMessage) -> None:
        if self.phase is Phase.CLOSING:
            return  # the server is closing: what the client still sends is dropped
        if not self._takes_messages:  # (at its first frame: none of it is kept)
            self._refuse_message(refused(NO_MESSAGES))
            return
        self._begun = not event.message_finished
        data = event.data
        piece = data.encode() if isinstance(data, str) else data
        self._size += len(piece)
        if self._size > self.max_message_bytes:
            reason = f"Exceeded maximum message size: {self.max_message_bytes} bytes"
            self._refuse_message(Refusing(self.too_big, TOO_BIG, reason))
            return
        if self._holding is not None and not self._holding.grow(len(piece)):
            self._refuse_message(refused(BUSY))
            return
        self._data += piece
        if event.message_finished:
            whole = self._data.decode() if isinstance(data, str) else bytes(self._data)
            self._data, self._size = bytearray(), 0
            self.release()
            self._emit(Message(whole))

    def _refuse_message(self, refusing: Refusing) -> None:
        """The client is told why its message is refused, and the socket ends."""
        self._outbox += self.text(refusing.message)
        close = wsproto.events.CloseConnection(refusing.code, refusing.reason)
        self._outbox += self._ws.send(close)
        self._end(refusing.code, refusing.reason)

    @property
    def message_begun(self) -> bool:
        """A message from the client has begun and is not whole yet."""
        return self._begun and self.phase is Phase.OPEN

    def refuse_late(self, seconds: float) -> None:
        """Refuses the message under way, not whole `seconds` after its first frame (4408)."""
        said = f"a message did not come whole within {seconds:g} s of its first frame"
        self._refuse_message(WireError(Close.TIMEOUT, said).refusing())

    def release(self) -> None:
        """Gives back what the message under way holds of the service's budget (idempotent)."""
        if self._holding is not None:
            self._holding.release()

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    def _end(self, code: int, reason: str | None = None) -> None:
        self.phase = Phase.ENDED
        self._data, self._size = bytearray(), 0
        self.release()
        self._emit(Ended(code, reason))

    def refuse(
        self, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        """Answers a request the protocol cannot take (when h11 can still answer), and ends;
        the answer waits in `data_to_send()`. The owner's: a head that did not come in time."""
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.phase = Phase.ASKED
            self._outbox += self.respond(status, error_body(status, message), headers)
        self._end(ABNORMAL, message)

    # ---- bytes out ---------------------------------------------------------------------------

    def respond(
        self,
        status: int,
        body: bytes,
        headers: Iterable[tuple[bytes, bytes]] = (),
        content_type: bytes = b"application/json",
    ) -> bytes:
        """The whole HTTP answer to the request (a refused upgrade included), with
        `Connection: close` unless the client has sent its next request already
        (`next_request`). No body for a HEAD request."""
        data = self.respond_head(status, len(body), headers, content_type)
        return data + self.respond_body(body) + self.respond_end()

    def respond_head(
        self,
        status: int,
        length: int | None,
        headers: Iterable[tuple[bytes, bytes]] = (),
        content_type: bytes | None = b"application/json",
    ) -> bytes:
        """The head of an answer whose body of `length` bytes follows in `respond_body`
        pieces, then `respond_end` (a file streamed, not read whole). Without a `length`
        the body is sent chunked, as long as it goes (an event stream); without a
        `content_type` the type is among `headers`."""
        assert self.phase is Phase.ASKED, f"respond() in {self.phase}"
        self.phase = Phase.ANSWERED
        given = list(headers)
        names = {name.lower() for name, _ in given}
        head = [
            *(() if content_type is None else ((b"Content-Type", content_type),)),
            *(() if length is None else ((b"Content-Length", str(length).encode()),)),
            *(() if self._keeps_open() else heads.CLOSE),
            *given,
            *((name, value) for name, value in heads.DEFAULT_HEADERS if name.lower() not in names),
        ]
        reason = http.HTTPStatus(status).phrase.encode()
        return self._h11.send(h11.Response(status_code=status, headers=head, reason=reason))

    def receive_body(self, data: bytes) -> None:
        """More of a plain request's body (b"": the client closed its side), while the
        request is not answered yet; `body` then gives what of it is in."""
        assert self.phase is Phase.ASKED and self.request is not None
        self._h11.receive_data(data)

    def go_on(self) -> bytes:
        """`100 Continue` for a client that waits for it (`requestcycle.go_on`)."""
        assert self.phase is Phase.ASKED
        return requestcycle.go_on(self._h11)

    def body(self) -> tuple[bytes, bool]:
        """What of the request's body has come since the last call, and whether it is all
        in. `BadBody` when the client broke its framing or closed before its end, or sends
        it in more pieces (chunks) than the budget of frames allows: each costs as one."""
        return requestcycle.body(self._h11, self._frames)

    @property
    def wants_body(self) -> bool:
        """False for a HEAD request: its answer is the head alone."""
        return not self._head_only

    def respond_body(self, data: bytes) -> bytes:
        """A piece of the answer's body (nothing for a HEAD request)."""
        return self._h11.send(h11.Data(data=data)) if self.wants_body and data else b""

    def respond_end(self) -> bytes:
        return self._h11.send(h11.EndOfMessage())

    def _keeps_open(self) -> bool:
        return not self._last and requestcycle.pipelined(self._h11, self.request, self._queues)

    def last(self) -> None:
        """No request after this one is answered: for an answer that reads the socket once
        it has begun (`/mcp`'s, to see the client leave), or drops what it reads."""
        self._last = True

    def next_request(self) -> bool:
        """Once an answer without `Connection: close` is all sent, reads the request the
        client pipelined behind it (`requestcycle.py`): HEAD again, under a new head bound,
        from what came after this one; False when the connection ends."""
        if (
            self.phase is not Phase.ANSWERED
            or (following := requestcycle.next_cycle(self._h11)) is None
        ):
            return False
        self.phase, self.request, self.head = Phase.HEAD, None, heads.HeadBound()
        trailing, closed = following
        if (said := self.head.refusal(trailing)) is not None:
            self.refuse(431, said)
        elif trailing:
            self._read_head()
        elif closed:
            self._end(ABNORMAL)
        return True

    def accept(self, takes_messages: bool = True, answer: bytes | None = None) -> list[bytes]:
        """The 101 for a valid upgrade request, as pieces to write in order; then the bytes
        that followed the request head are read as its first frames. Where the endpoint
        `takes_messages` not, one is refused at its first frame (4400). An `answer` known
        at the upgrade (`/v1/hooks`' one text frame, shared: `hooksanswer.py`) and the
        close (1000) go with the 101, not copied; what the client sends after is dropped."""
        assert self.phase is Phase.ASKED and self.request is not None and self.request.websocket
        self._takes_messages = takes_messages
        pieces = [self._ws.send(wsproto.events.AcceptConnection())]
        self.phase = Phase.OPEN
        if answer is not None:
            pieces += (answer, self.close(Close.NORMAL, COMPLETE))
        trailing, closed = self._h11.trailing_data
        if trailing:
            self._ws.receive_data(trailing)
            self._read_frames()
        if closed and self.phase in (Phase.OPEN, Phase.CLOSING):
            self._end(ABNORMAL)
        return pieces

    def text(self, text: str) -> bytes:
        """One text message (what wsproto frames: FIN, opcode 1, no mask)."""
        return self._ws.send(wsproto.events.TextMessage(data=text))

    def ping(self, payload: bytes) -> bytes:
        return self._ws.send(wsproto.events.Ping(payload=payload))

    def close(self, code: int, reason: str | None) -> bytes:
        """The server's close frame; the client's reply ends the connection (`Ended`)."""
        assert self.phase is Phase.OPEN, f"close() in {self.phase}"
        self.phase = Phase.CLOSING
        return self._ws.send(wsproto.events.CloseConnection(code=code, reason=reason))
