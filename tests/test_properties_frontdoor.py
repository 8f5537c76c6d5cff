"""Properties (Hypothesis) of the front door's protocol (`service/protocol.py`), the bytes any
client on the port may send: a request head of any shape, a body framed any way, and after an
upgrade any sequence of WebSocket frames (messages whole or in fragments, over the size cap,
pings, pongs, closes, frames a client must not send, bytes that are no frame), cut into reads
anywhere, with the server sending, pinging and closing between them.

Whatever comes, the protocol raises nothing; it gives each event once and none after `Ended`;
no message it hands over is over the cap; what it answers by itself is a well-formed HTTP
answer or well-formed server frames; and the end of the stream always ends it. The live
server under raw bytes: the last property here, on a real `serve` socket.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import h11
import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st
from live_service import LiveService
from props_service import SERVER_SETTINGS, service_for_module, serving
from wsproto.frame_protocol import CloseReason, FrameProtocol, Opcode, ParseFailed

from mcpx_hooks.supervisor.service.protocol import Phase, ServerProtocol
from mcpx_hooks.supervisor.service.protocolevents import BadBody, Ended, Message, Pong, Request

MAX = 256
TOO_BIG = '{"type":"error","code":1009}'
#: Pure Python: eight times the examples of the profile (the suites that start processes run
#: the profile's own number).
FAST = settings(max_examples=8 * settings.default.max_examples)

# ---- what a client sends ------------------------------------------------------------------------

token = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~",
    min_size=1,
    max_size=12,
)
header_value = st.binary(max_size=60)
KEY = base64.b64encode(b"0123456789abcdef")


def upgrade_head(headers: list[tuple[bytes, bytes]], target: bytes = b"/v1/exec") -> bytes:
    lines = [b"GET " + target + b" HTTP/1.1", b"Host: localhost"]
    lines += [b"Upgrade: websocket", b"Connection: Upgrade", b"Sec-WebSocket-Key: " + KEY]
    lines += [b"Sec-WebSocket-Version: 13"]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@st.composite
def request_head(draw: st.DrawFn) -> bytes:
    """A request head: plain or an upgrade, with any method, target, version and headers
    (names, values and line endings of any bytes), or bytes that are no head at all."""
    kind = draw(st.sampled_from(["plain", "upgrade", "bad upgrade", "raw"]))
    if kind == "raw":
        return draw(st.binary(min_size=1, max_size=200))
    headers = draw(
        st.lists(st.tuples(token.map(str.encode) | st.binary(max_size=8), header_value), max_size=4)
    )
    if kind == "upgrade":
        return upgrade_head([(n, v) for n, v in headers if n.lower() not in _HANDSHAKE])
    if kind == "bad upgrade":
        version = draw(st.sampled_from([b"13", b"8", b"", b"13, 8", b"\xff"]))
        key = draw(st.sampled_from([KEY, b"", b"short", b"\x00" * 24]))
        head = [b"GET / HTTP/1.1", b"Host: " + draw(header_value), b"Upgrade: websocket"]
        head += [b"Connection: upgrade", b"Sec-WebSocket-Key: " + key]
        head += [b"Sec-WebSocket-Version: " + version]
        return b"\r\n".join(head + [n + b": " + v for n, v in headers]) + b"\r\n\r\n"
    method = draw(st.sampled_from([b"GET", b"POST", b"HEAD", b"DELETE"]) | token.map(str.encode))
    target = draw(st.sampled_from([b"/", b"/v1/runs", b"*", b""]) | st.binary(max_size=20))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"", b"HTTP/1.1 x"]))
    ending = draw(st.sampled_from([b"\r\n", b"\n", b"\r"]))
    lines = [method + b" " + target + b" " + version, b"Host: x"]
    lines += [n + b": " + v for n, v in headers]
    body = draw(st.sampled_from(["none", "length", "chunked", "both"]))
    payload = draw(st.binary(max_size=40))
    if body in ("length", "both"):
        lines.append(
            b"Content-Length: "
            + draw(
                st.sampled_from([str(len(payload)).encode(), b"-1", b"99999999999999999999", b"1x"])
            )
        )
    if body in ("chunked", "both"):
        lines.append(b"Transfer-Encoding: chunked")
        payload = draw(
            st.sampled_from([b"%x\r\n" % len(payload) + payload + b"\r\n0\r\n\r\n", payload])
        )
    return ending.join(lines) + ending + ending + (payload if body != "none" else b"")


_HANDSHAKE = {b"host", b"upgrade", b"connection", b"sec-websocket-key", b"sec-websocket-version"}


@st.composite
def client_frames(draw: st.DrawFn) -> list[bytes | str]:
    """What a client sends after the 101, frame by frame (bytes), with the server's own moves
    between them (str: "text", "ping", "close")."""
    client = FrameProtocol(client=True, extensions=[])
    rogue = FrameProtocol(client=False, extensions=[])  # frames without a mask
    out: list[bytes | str] = []
    fragmenting: bool | None = None  # within a fragmented message: its pieces' kind
    for _ in range(draw(st.integers(0, 10))):
        move = draw(
            st.sampled_from(
                [
                    "text",
                    "binary",
                    "piece",
                    "ping",
                    "pong",
                    "close",
                    "raw",
                    "unmasked",
                    "over",
                    "server",
                ]
            )
        )
        if move in ("text", "binary") and fragmenting is None:
            data: Any = (
                draw(st.text(max_size=40)) if move == "text" else draw(st.binary(max_size=40))
            )
            out.append(client.send_data(data, True))
        elif move == "piece":
            text = fragmenting if fragmenting is not None else draw(st.booleans())
            data = draw(st.text(max_size=20)) if text else draw(st.binary(max_size=20))
            fin = draw(st.booleans())
            out.append(client.send_data(data, fin))
            fragmenting = None if fin else text
        elif move == "ping":
            out.append(client.ping(draw(st.binary(max_size=125))))
        elif move == "pong":
            out.append(client.pong(draw(st.binary(max_size=125))))
        elif move == "close":
            code = draw(st.sampled_from([None, 1000, 1001, 1008, 3000, 4999]))
            reason = draw(st.text(max_size=20)) if code is not None else None
            out.append(client.close(code, reason))
        elif move == "raw":
            out.append(draw(st.binary(min_size=1, max_size=40)))
        elif move == "unmasked":
            out.append(rogue.send_data(draw(st.text(max_size=10)), True))
        elif move == "over" and fragmenting is None:
            out.append(client.send_data("x" * (MAX + draw(st.integers(1, 64))), True))
        elif move == "server":
            out.append(draw(st.sampled_from(["text", "ping", "close"])))
    return out


def cut(data: bytes, at: list[int]) -> list[bytes]:
    """`data` in reads cut at the (sorted, deduplicated) offsets `at`."""
    points = sorted({0, len(data), *(a % (len(data) + 1) for a in at)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


# ---- the invariants -----------------------------------------------------------------------------


class Watch:
    """The protocol under test, and every event and answer it gave."""

    def __init__(self) -> None:
        self.p = ServerProtocol(max_message_bytes=MAX, too_big=TOO_BIG)
        self.events: list[Any] = []
        self.sent = bytearray()

    def feed(self, data: bytes) -> None:
        self.p.receive_data(data)
        self.drain()

    def drain(self) -> None:
        for event in self.p.events():
            assert not any(isinstance(e, Ended) for e in self.events), f"{event} after the end"
            assert isinstance(event, Request | Message | Pong | Ended), event
            if isinstance(event, Message):
                assert len(event.data) <= MAX, len(event.data)
            self.events.append(event)
        self.sent += self.p.data_to_send()

    @property
    def ended(self) -> bool:
        return any(isinstance(e, Ended) for e in self.events)


def http_answer(data: bytes, method: str = "GET", *, may_stay_open: bool = False) -> int:
    """The status of the one HTTP answer to a `method` request that `data` holds (whole,
    closing the connection, unless `may_stay_open`: bytes came after the request, which the
    connection stays open to read as the next one, pipelined)."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    client.receive_data(b"")
    response = client.next_event()
    assert isinstance(response, h11.Response), response
    closes = (b"connection", b"close") in [(k.lower(), v.lower()) for k, v in response.headers]
    assert closes or may_stay_open
    while not isinstance(event := client.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data), event
    return int(response.status_code)


def server_frames(data: bytes) -> list[Opcode]:
    """The opcodes of the server's frames in `data`: each one well formed and unmasked."""
    reader = FrameProtocol(client=True, extensions=[])
    reader.receive_bytes(data)
    opcodes = []
    try:
        for frame in reader.received_frames():
            opcodes.append(frame.opcode)
    except ParseFailed as exc:  # a client reader refuses a masked or broken frame
        raise AssertionError(f"the server sent a broken frame: {exc}") from None
    return opcodes


# ---- the properties -----------------------------------------------------------------------------


@FAST
@given(
    head=request_head(), at=st.lists(st.integers(0, 400), max_size=4), body=st.binary(max_size=40)
)
@example(
    head=b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: " + b"y" * 20000 + b"\r\n\r\n", at=[], body=b""
)
@example(head=b"\x16\x03\x01\x00\xa5\x01\x00\x00", at=[], body=b"")  # a TLS hello
@example(head=b"HEAD * HTTP/1.1\r\nHost: x\r\n\r\n", at=[], body=b"")  # refused: no body
@example(head=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", at=[], body=b"\x00")  # pipelined: kept open
@example(  # a chunked body's end, then bytes with the head itself: kept open too
    head=b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n0\r\n\r\n",
    at=[],
    body=b"",
)
def test_any_request_head_is_taken_or_answered(head: bytes, at: list[int], body: bytes) -> None:
    """A head becomes a `Request`, or is answered with one well-formed HTTP error and ends;
    a plain request's body reads whole or is `BadBody`; the stream's end ends it."""
    w = Watch()
    for piece in cut(head, at):
        w.feed(piece)
    if w.p.phase is Phase.HEAD:  # not all in: the client goes
        w.feed(b"")
        assert w.ended and not w.sent
        return
    if w.ended:
        assert w.p.request is None
        method = "HEAD" if head.startswith(b"HEAD ") else "GET"  # (a HEAD's answer: no body)
        assert 400 <= http_answer(bytes(w.sent), method) < 500
        return
    (request,) = w.events
    assert isinstance(request, Request) and w.p.phase is Phase.ASKED
    if request.websocket:
        assert w.sent == b""
        data = b"".join(w.p.accept())
        assert data.startswith(b"HTTP/1.1 101 ")
        w.drain()
        w.feed(b"")
        assert w.ended
        return
    for piece in [body, b""]:
        w.p.receive_body(piece)
        try:
            _, done = w.p.body()
        except BadBody:
            break
        if done:
            break
    data = w.p.respond(404, b'{"code":404}')
    method = request.method if request.method == "HEAD" else "GET"
    # (Bytes after the head, in the body or with the head itself, may be the next request.)
    after = bool(body) or bool(head.partition(b"\r\n\r\n")[2])
    assert http_answer(data, method, may_stay_open=after) == 404


@FAST
@given(frames=client_frames(), at=st.lists(st.integers(0, 2000), max_size=6))
@example(frames=["close", FrameProtocol(client=True, extensions=[]).ping(b"hi")], at=[])
def test_any_frames_after_an_upgrade(frames: list[bytes | str], at: list[int]) -> None:
    """After the 101, any frames in any reads, the server moving between them: no exception,
    no message over the cap, one `Ended` at most and nothing after it, only well-formed
    server frames, and the stream's end always ends it."""
    w = Watch()
    w.feed(upgrade_head([]))
    assert isinstance(w.events[0], Request) and w.events[0].websocket
    out = bytearray(b"".join(w.p.accept()))
    w.drain()
    for frame in frames:
        if isinstance(frame, str):  # the server's move, where it may make it
            if w.p.phase is Phase.OPEN:
                move = {"text": lambda: w.p.text("hello"), "ping": lambda: w.p.ping(b"p")}
                out += move.get(frame, lambda: w.p.close(1000, "bye"))()
            continue
        for piece in cut(frame, at):
            if w.p.phase in (Phase.OPEN, Phase.CLOSING):
                w.feed(piece)
    out += w.sent
    if not w.ended:
        w.feed(b"")
    assert w.ended and w.p.phase is Phase.ENDED
    head, _, frames_out = bytes(out).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    opcodes = server_frames(frames_out)
    assert opcodes.count(Opcode.CLOSE) <= 1
    if Opcode.CLOSE in opcodes:  # nothing after the server's close frame
        assert opcodes[-1] is Opcode.CLOSE
    ended = [e for e in w.events if isinstance(e, Ended)]
    assert len(ended) == 1
    if ended[0].code == CloseReason.MESSAGE_TOO_BIG:  # said, then closed
        assert opcodes[-2:] == [Opcode.TEXT, Opcode.CLOSE], opcodes


# ---- the live server under raw bytes ------------------------------------------------------------

live = pytest.fixture(scope="module")(service_for_module)
#: A step of a live exchange: wait until the server's close frame (or the end) has come.
AWAIT_CLOSE = "await close"
#: How long the server may take to end a connection whose client sent all it will send.
ENDS_S = 15.0


@st.composite
def live_steps(draw: st.DrawFn) -> list[bytes | str]:
    """Frames for a live socket: messages an endpoint reads (a request, garbage, too big),
    control frames and bytes that are no frame; after a frame the server must answer with its
    close (one too big, the client's close), maybe a wait for that close before what follows."""
    client = FrameProtocol(client=True, extensions=[])
    steps: list[bytes | str] = []
    for _ in range(draw(st.integers(0, 5))):
        move = draw(st.sampled_from(["request", "garbage", "over", "ping", "close", "raw"]))
        if move == "request":
            steps.append(client.send_data('{"argv": ["true"]}', True))
        elif move == "garbage":
            steps.append(client.send_data(draw(st.text(max_size=30)), True))
        elif move == "over":
            steps.append(client.send_data("x" * (2 * 1024 * 1024), True))
        elif move == "ping":
            steps.append(client.ping(draw(st.binary(max_size=20))))
        elif move == "close":
            steps.append(client.close(1000, "client done"))
        else:
            steps.append(draw(st.binary(min_size=1, max_size=30)))
        if move in ("over", "close") and draw(st.booleans()):
            steps.append(AWAIT_CLOSE)
    return steps


def live_head(draw_path: str) -> bytes:
    return upgrade_head([], target=draw_path.encode())


def _read_until(sock: socket.socket, got: bytearray, closed: Callable[[bytes], bool]) -> bool:
    """Reads into `got` until `closed(got)` or the end; False when the server kept quiet."""
    while not closed(bytes(got)):
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:  # reset: the server closed without reading all we sent
            return True
        if not data:
            return True
        got += data
    return True


def _has_close(data: bytes) -> bool:
    head, found, frames = data.partition(b"\r\n\r\n")
    if not found:
        return False
    if not head.startswith(b"HTTP/1.1 101 "):
        return True  # an HTTP answer: the connection ends with it
    reader = FrameProtocol(client=True, extensions=[])
    reader.receive_bytes(frames)
    with contextlib.suppress(ParseFailed):
        return any(f.opcode is Opcode.CLOSE for f in reader.received_frames())
    return True


def raw_exchange(url: str, head: bytes, steps: list[bytes | str]) -> bytes:
    """Sends `head`, then `steps`, then the end of what this client sends; returns all the
    server sent, which must end within `ENDS_S`."""
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    got = bytearray()
    with socket.create_connection((where.hostname, where.port), timeout=ENDS_S) as sock:
        sock.sendall(head)
        for step in steps:
            if step == AWAIT_CLOSE:
                assert _read_until(sock, got, _has_close), f"no close in {ENDS_S} s: {got!r}"
                continue
            try:
                sock.sendall(step)
            except OSError:  # the server closed: what is left cannot be sent
                break
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        ended = _read_until(sock, got, lambda _: False)
    assert ended, f"the server kept the connection {ENDS_S} s after the client's end"
    return bytes(got)


@SERVER_SETTINGS
@given(
    path=st.sampled_from(["/v1/exec", "/v1/events", "/v1/runs/none", "/v1/exec?x=%ff", "/no"]),
    steps=live_steps(),
)
@example(  # a ping that crossed the server's close
    path="/v1/exec",
    steps=[b"\x81\x83\x00\x00\x00\x00bad", AWAIT_CLOSE, b"\x89\x80\x00\x00\x00\x00"],
)
@example(path="/v1/exec", steps=[b"\xe5\xbb"])  # broke the protocol before the 101 went
def test_a_live_server_takes_any_frames(
    live: LiveService, caplog: pytest.LogCaptureFixture, path: str, steps: list[bytes | str]
) -> None:
    """Raw bytes on a real `serve` socket, after an upgrade: the client gets an HTTP answer
    to its head (the 101 included, whatever followed it), the server ends the connection in
    bounded time, logs no error, and serves on (`serving`'s invariants)."""
    with serving(live, caplog):
        got = raw_exchange(live.url, live_head(path), steps)
        note(repr(got[:300]))
        assert got.startswith(b"HTTP/1.1 "), got[:200]


@SERVER_SETTINGS
@given(head=request_head())
@example(head=b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
@example(head=b"POST /v1/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
def test_a_live_server_answers_any_head(
    live: LiveService, caplog: pytest.LogCaptureFixture, head: bytes
) -> None:
    """Any request head (and body) on a real `serve` socket, then the client's end: an HTTP
    answer, or none for a head that never ended; the connection ends in bounded time, no
    error is logged, and the server serves on."""
    with serving(live, caplog):
        got = raw_exchange(live.url, head, [])
        note(repr(got[:300]))
        assert got == b"" or got.startswith(b"HTTP/1.1 "), got[:200]
