"""The front door's protocol without a loop or a socket: bytes in, events and bytes out.
The client's side is spoken by h11 and wsproto, so every answer is checked by a parser."""

from __future__ import annotations

import base64
import json
import ssl
import tracemalloc

import h11
import pytest
import wsproto
import wsproto.events
from wsproto.frame_protocol import FrameProtocol

from mcpx_hooks.supervisor.service.broadcast import text_frame
from mcpx_hooks.supervisor.service.framerate import FRAME_BURST, FrameRate
from mcpx_hooks.supervisor.service.heads import MAX_HEAD_BYTES, MAX_HEAD_LINES, MAX_QUERY_FIELDS
from mcpx_hooks.supervisor.service.protocol import Phase, ServerProtocol
from mcpx_hooks.supervisor.service.protocolevents import (
    BadBody,
    Ended,
    Message,
    Pong,
    Request,
    error_body,
)
from mcpx_hooks.supervisor.service.unfinished import OWN_BYTES, Unfinished
from mcpx_hooks.supervisor.service.wire import BUSY as BUSY_WHY
from mcpx_hooks.supervisor.service.wire import NO_MESSAGES as NO_MESSAGES_WHY
from mcpx_hooks.supervisor.service.wire import refused as refusal

KEY = base64.b64encode(b"0123456789abcdef").decode()
UPGRADE = (
    "GET /v1/events?since=1 HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nUpgrade: websocket\r\n"
    f"Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n"
)


def _protocol(max_message_bytes: int = 100) -> ServerProtocol:
    return ServerProtocol(max_message_bytes=max_message_bytes, too_big='{"too": "big"}')


def _events(p: ServerProtocol) -> list[object]:
    return list(p.events())


def _response(data: bytes, method: bytes = b"GET") -> tuple[h11.Response, bytes]:
    """An HTTP answer, parsed as a client would."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    response = client.next_event()
    assert isinstance(response, h11.Response)
    body = b""
    while not isinstance(event := client.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data)
        body += event.data
    return response, body


def _upgraded(extra: bytes = b"") -> tuple[ServerProtocol, wsproto.WSConnection]:
    """A protocol after its 101, and a wsproto client that has read the 101."""
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    head = client.send(wsproto.events.Request(host="127.0.0.1:8765", target="/v1/events"))
    p = _protocol()
    p.receive_data(head + extra)
    (request,) = _events(p)
    assert isinstance(request, Request) and request.websocket
    client.receive_data(b"".join(p.accept()))
    assert isinstance(next(client.events()), wsproto.events.AcceptConnection)
    return p, client


def _client_events(client: wsproto.WSConnection, data: bytes) -> list[wsproto.events.Event]:
    client.receive_data(data)
    return list(client.events())


# ---- plain HTTP ------------------------------------------------------------------------------


def test_a_plain_request_is_a_request_and_nothing_more_is_read() -> None:
    p = _protocol()
    p.receive_data(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n")
    (request,) = _events(p)
    assert request == Request("GET", "/healthz", ((b"host", b"x"), (b"x-a", b"1")), False)
    assert p.phase is Phase.ASKED and p.data_to_send() == b""
    response, body = _response(p.respond(200, b'{"ok": true}', ((b"X-B", b"2"),)))
    assert response.status_code == 200 and response.reason == b"OK"
    headers = dict(response.headers)
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"connection"] == b"close" and headers[b"x-b"] == b"2"
    assert body == b'{"ok": true}'
    assert p.phase is Phase.ANSWERED
    p.receive_data(b"more")  # ignored: nothing was pipelined behind it, the connection ends
    assert _events(p) == [] and not p.next_request()


def test_a_request_pipelined_behind_a_plain_one_is_read_once_that_is_answered() -> None:
    p = _protocol()
    p.receive_data(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHo")
    (first,) = _events(p)
    assert first.target == "/a"
    response, _ = _response(p.respond(200, b"{}"))
    assert b"connection" not in dict(response.headers)  # (the next one is here already)
    assert p.next_request() and p.phase is Phase.HEAD and _events(p) == []
    p.receive_data(b"st: x\r\n\r\n")
    (second,) = _events(p)
    assert second.target == "/b" and p.phase is Phase.ASKED
    response, _ = _response(p.respond(200, b"{}"))
    assert dict(response.headers)[b"connection"] == b"close" and not p.next_request()


def test_a_head_request_gets_the_headers_without_the_body() -> None:
    p = _protocol()
    p.receive_data(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    (request,) = _events(p)
    assert isinstance(request, Request) and request.method == "HEAD"
    response, body = _response(p.respond(200, b"12345"), method=b"HEAD")
    assert dict(response.headers)[b"content-length"] == b"5" and body == b""


def test_a_head_that_comes_in_pieces_waits_for_the_rest() -> None:
    p = _protocol()
    for piece in (b"GET /v1/hooks HT", b"TP/1.1\r\nHost: x\r\n", b"\r\n"):
        assert p.phase is Phase.HEAD and _events(p) == []
        p.receive_data(piece)
    (request,) = _events(p)
    assert isinstance(request, Request) and request.target == "/v1/hooks"


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"NOT HTTP\r\n\r\n", 400),
        # A head still incomplete past h11's 16 KiB:
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 20_000, 431),
        # A complete head over 16 KiB, all in one read (the socket is read 64 KiB at a time):
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 20_000 + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 4000 + b"\r\n", 431),
    ],
)
def test_a_malformed_request_is_answered_and_ends(head: bytes, status: int) -> None:
    p = _protocol()
    p.receive_data(head)
    (ended,) = _events(p)
    assert isinstance(ended, Ended) and ended.code == 1006
    assert p.phase is Phase.ENDED and p.request is None
    response, body = _response(p.data_to_send())
    assert response.status_code == status
    assert json.loads(body)["code"] == status


@pytest.mark.parametrize("pieces", [1, 3, 16400])
def test_a_head_of_16_kib_is_taken_and_one_byte_more_is_431(pieces: int) -> None:
    start, end = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: ", b"\r\n\r\n"
    for extra, status in ((0, None), (1, 431)):
        head = start + b"y" * (MAX_HEAD_BYTES - len(start) - len(end) + extra) + end
        assert len(head) == MAX_HEAD_BYTES + extra
        p = _protocol()
        size = -(-len(head) // pieces)
        for at in range(0, len(head), size):
            p.receive_data(head[at : at + size])
        (event,) = _events(p)
        if status is None:
            assert isinstance(event, Request) and event.target == "/healthz"
            continue
        assert isinstance(event, Ended) and p.request is None
        response, body = _response(p.data_to_send())
        assert response.status_code == 431
        assert json.loads(body)["message"] == "the request head is over 16384 bytes"


@pytest.mark.parametrize("pieces", [1, 7, 1000])
def test_a_head_of_128_header_lines_is_taken_and_one_more_is_431(pieces: int) -> None:
    # 4,000 empty header lines in 16 KiB cost the event loop ~10 ms each to parse (h11 ~2 µs
    # a line): a few clients sending such heads back to back held every other client's
    # `/healthz` for 40-140 ms. The lines are counted as they come, before h11 parses them.
    for lines, status in ((MAX_HEAD_LINES, None), (MAX_HEAD_LINES + 1, 431)):
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"a:\r\n" * (lines - 1) + b"\r\n"
        p = _protocol()
        size = -(-len(head) // pieces)
        for at in range(0, len(head), size):
            p.receive_data(head[at : at + size])
        (event,) = _events(p)
        if status is None:
            assert isinstance(event, Request) and len(event.headers) == lines
            continue
        assert isinstance(event, Ended) and p.request is None
        response, body = _response(p.data_to_send())
        assert response.status_code == 431
        assert json.loads(body)["message"] == "the request head has over 128 header lines"


def test_a_target_of_64_query_parameters_is_taken_and_one_more_is_400() -> None:
    # 4,000 of them in 16 KiB were parsed three times over (the token, the route): 14 ms of
    # the event loop for one request that was refused 401 in the end.
    for fields, status in ((MAX_QUERY_FIELDS, None), (MAX_QUERY_FIELDS + 1, 400)):
        target = "/v1/runs?" + "&".join(["a=1"] * fields)
        p = _protocol()
        p.receive_data(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        (event,) = _events(p)
        if status is None:
            assert isinstance(event, Request) and event.target == target
            continue
        assert isinstance(event, Ended)
        response, body = _response(p.data_to_send())
        assert response.status_code == 400
        assert json.loads(body)["message"] == "the request target has over 64 query parameters"


def client_hello() -> bytes:
    """What a TLS client sends first (its ClientHello), made by the ssl module."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (
            client_hello(),
            "the request is not HTTP (is this a TLS client on a plain port? it speaks HTTP)",
        ),
        (b"\x16\x03\x01\x00\x05hello\r\n\r\n", "the request is not HTTP (is this a TLS"),
        (b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", "the request line is not HTTP/1.1"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", "a header line is not NAME:"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX Y: a\r\n\r\n", "a header line is not NAME:"),
        (b"GET / HTTP/1.1\r\n\r\n", "Missing mandatory Host: header"),
    ],
)
def test_a_malformed_request_is_told_in_words_without_a_repr(head: bytes, said: str) -> None:
    p = _protocol()
    p.receive_data(head)
    response, body = _response(p.data_to_send())
    message = json.loads(body)["message"]
    assert response.status_code == 400
    assert message.startswith(f"malformed HTTP request: {said}"), message
    assert "b'" not in message and 'b"' not in message and "bytearray" not in message


def test_a_client_gone_before_its_head_ends_it() -> None:
    p = _protocol()
    p.receive_data(b"GET / HTTP/1.1\r\n")
    p.receive_data(b"")
    assert _events(p) == [Ended(1006)]
    assert p.data_to_send() == b""


def test_error_body() -> None:
    assert json.loads(error_body(404, "no such endpoint")) == {
        "type": "error",
        "code": 404,
        "message": "no such endpoint",
    }


# ---- the upgrade -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("drop", "status"),
    [
        ("Sec-WebSocket-Key", 400),
        ("Connection", 400),
    ],
)
def test_a_bad_handshake_is_refused_by_wsproto_rules(drop: str, status: int) -> None:
    head = "".join(line + "\r\n" for line in UPGRADE.split("\r\n")[:-1] if drop not in line)
    p = _protocol()
    p.receive_data((head + "\r\n").encode())
    (ended,) = _events(p)
    assert isinstance(ended, Ended) and p.request is None
    response, body = _response(p.data_to_send())
    assert response.status_code == status and b"bad WebSocket handshake" in body


def test_an_unknown_websocket_version_gets_426_with_the_version() -> None:
    p = _protocol()
    p.receive_data((UPGRADE.replace("Version: 13", "Version: 8") + "\r\n").encode())
    assert isinstance(_events(p)[0], Ended)
    response, _ = _response(p.data_to_send())
    assert response.status_code == 426
    assert dict(response.headers)[b"sec-websocket-version"] == b"13"


SIXTEEN = base64.b64encode(bytes(16)).decode()


@pytest.mark.parametrize(
    ("replace", "status", "said"),
    [
        ((KEY, "short"), 400, 'Sec-WebSocket-Key "short" is not the base64 of 16 bytes'),
        ((KEY, "x" * 24), 400, f'Sec-WebSocket-Key "{"x" * 24}" is not the base64 of 16 bytes'),
        ((KEY, base64.b64encode(bytes(15)).decode()), 400, "is not the base64 of 16 bytes"),
        ((KEY, base64.b64encode(bytes(17)).decode()), 400, "is not the base64 of 16 bytes"),
        ((KEY, f"{KEY}\r\nSec-WebSocket-Key: {SIXTEEN}"), 400, "2 Sec-WebSocket-Key headers"),
        (("Version: 13", "Version: 8"), 426, 'Sec-WebSocket-Version "8" is not spoken here'),
        (("Version: 13", "Version: abc"), 426, 'Sec-WebSocket-Version "abc" is not spoken'),
        (("Version: 13", "Version: 13, 8"), 426, 'Sec-WebSocket-Version "13, 8" is not'),
        (
            ("Version: 13", "Version: 13\r\nSec-WebSocket-Version: 13"),
            400,
            "2 Sec-WebSocket-Version headers",
        ),
        # (it was switched with 101: RFC 6455 asks for HTTP/1.1 at least)
        (("HTTP/1.1", "HTTP/1.0"), 400, "an upgrade is asked over HTTP/1.1 (this one: 1.0)"),
    ],
)
def test_a_key_or_version_rfc_6455_refuses_is_refused_saying_what(
    replace: tuple[str, str], status: int, said: str
) -> None:
    p = _protocol()
    p.receive_data((UPGRADE.replace(*replace) + "\r\n").encode())
    (ended,) = _events(p)
    assert isinstance(ended, Ended) and p.request is None
    response, body = _response(p.data_to_send())
    assert response.status_code == status
    assert json.loads(body)["message"].startswith("bad WebSocket handshake: "), body
    assert said in json.loads(body)["message"]
    if status == 426:
        assert dict(response.headers)[b"sec-websocket-version"] == b"13"


def test_a_key_of_16_bytes_in_base64_is_taken() -> None:
    p = _protocol()
    p.receive_data((UPGRADE.replace(KEY, SIXTEEN) + "\r\n").encode())
    (request,) = _events(p)
    assert isinstance(request, Request) and request.websocket


def test_a_post_that_asks_to_upgrade_is_a_plain_request() -> None:
    p = _protocol()
    p.receive_data((UPGRADE.replace("GET", "POST") + "\r\n").encode())
    (request,) = _events(p)
    assert isinstance(request, Request) and not request.websocket and request.method == "POST"


def test_an_upgrade_can_be_refused_with_an_http_answer() -> None:
    p = _protocol()
    p.receive_data((UPGRADE + "Authorization: Bearer x\r\n\r\n").encode())
    (request,) = _events(p)
    assert isinstance(request, Request) and request.websocket
    assert (b"authorization", b"Bearer x") in request.headers
    response, body = _response(p.respond(401, error_body(401, "no")))
    assert response.status_code == 401 and json.loads(body)["message"] == "no"


def test_accept_answers_101_and_reads_the_frames_that_followed_the_head() -> None:
    # A client frame sent right behind the head, before the 101 (masked, as a client's).
    frame = FrameProtocol(client=True, extensions=[]).send_data("early", fin=True)
    p, _ = _upgraded(frame)
    assert p.phase is Phase.OPEN
    assert _events(p) == [Message("early")]


# ---- WebSocket -------------------------------------------------------------------------------


def _send(client: wsproto.WSConnection, *events: wsproto.events.Event) -> bytes:
    return b"".join(client.send(e) for e in events)


def test_messages_in_pieces_come_whole_text_and_binary() -> None:
    p, client = _upgraded()
    data = _send(
        client,
        wsproto.events.TextMessage(data="ab", message_finished=False),
        wsproto.events.TextMessage(data="cd"),
        wsproto.events.BytesMessage(data=b"\x00\x01"),
    )
    for i in range(len(data)):  # a byte at a time
        p.receive_data(data[i : i + 1])
    assert _events(p) == [Message("abcd"), Message(b"\x00\x01")]


def test_a_ping_is_answered_by_the_protocol_and_a_pong_is_an_event() -> None:
    p, client = _upgraded()
    p.receive_data(_send(client, wsproto.events.Ping(b"p1"), wsproto.events.Pong(b"p2")))
    assert _events(p) == [Pong(b"p2")]
    (pong,) = _client_events(client, p.data_to_send())
    assert isinstance(pong, wsproto.events.Pong) and pong.payload == b"p1"
    (ping,) = _client_events(client, p.ping(b"p3"))
    assert isinstance(ping, wsproto.events.Ping) and ping.payload == b"p3"


def test_a_client_close_is_answered_and_ends() -> None:
    p, client = _upgraded()
    p.receive_data(_send(client, wsproto.events.CloseConnection(1000, "bye")))
    assert _events(p) == [Ended(1000, "bye")]
    (close,) = _client_events(client, p.data_to_send())
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == 1000
    assert p.phase is Phase.ENDED


def test_a_server_close_ends_at_the_clients_reply_and_drops_what_came_between() -> None:
    p, client = _upgraded()
    (close,) = _client_events(client, p.close(1001, "going"))
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == 1001
    assert p.phase is Phase.CLOSING
    late = FrameProtocol(client=True, extensions=[]).send_data("late", fin=True)
    p.receive_data(late + client.send(close.response()))
    assert _events(p) == [Ended(1001, "going")]
    assert p.data_to_send() == b""  # a reply to a reply is not sent


def test_a_message_over_the_cap_gets_the_error_message_then_1009() -> None:
    p, client = _upgraded()
    p.receive_data(_send(client, wsproto.events.TextMessage(data="x" * 60, message_finished=False)))
    assert _events(p) == []
    p.receive_data(_send(client, wsproto.events.TextMessage(data="y" * 41)))
    assert _events(p) == [Ended(1009, "Exceeded maximum message size: 100 bytes")]
    text, close = _client_events(client, p.data_to_send())
    assert isinstance(text, wsproto.events.TextMessage) and text.data == '{"too": "big"}'
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == 1009
    p.receive_data(b"anything")  # nothing more is read
    assert _events(p) == []


@pytest.mark.parametrize("piece", ["", "\u20ac"], ids=["empty", "one-character"])
def test_a_message_in_many_small_fragments_holds_its_bytes_not_an_object_per_fragment(
    piece: str,
) -> None:
    # A client may send a message as any number of fragments, each as small as it likes (an
    # empty one is 6 bytes on the wire): what is held of it is its bytes so far, not an
    # object per fragment (which was ~80 bytes a character, and 8 for an empty one, unbounded).
    p = ServerProtocol(max_message_bytes=1 << 20, too_big="{}")
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    p.receive_data(client.send(wsproto.events.Request(host="127.0.0.1:8765", target="/v1/exec")))
    _events(p)
    client.receive_data(b"".join(p.accept()))
    fragments = 20_000
    data = b"".join(
        client.send(wsproto.events.TextMessage(data=piece, message_finished=False))
        for _ in range(fragments)
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for at in range(0, len(data), 64 * 1024):
            p.receive_data(data[at : at + 64 * 1024])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert _events(p) == []
    assert held < 4 * len(piece) * fragments + 64 * 1024, held
    p.receive_data(client.send(wsproto.events.TextMessage(data="!")))
    assert _events(p) == [Message(piece * fragments + "!")]


NO_MESSAGES = refusal(NO_MESSAGES_WHY)
BUSY = refusal(BUSY_WHY)


def test_an_endpoint_that_takes_no_messages_refuses_one_at_its_first_frame() -> None:
    # `/v1/events` and `/v1/hooks` take no messages, yet held up to the cap of one (1 MiB)
    # before refusing it: now its first frame, the first bytes of it, end the socket.
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    p = ServerProtocol(max_message_bytes=1 << 20, too_big="{}")
    p.receive_data(client.send(wsproto.events.Request(host="127.0.0.1", target="/v1/events")))
    _events(p)
    _client_events(client, b"".join(p.accept(takes_messages=False)))
    frame = FrameProtocol(client=True, extensions=[]).send_data("x" * 500_000, fin=True)
    p.receive_data(frame[:100])  # the frame's head and the first bytes of a 500 kB message
    assert _events(p) == [Ended(4400, "this endpoint takes no messages")]
    text, close = _client_events(client, p.data_to_send())
    assert isinstance(text, wsproto.events.TextMessage) and text.data == NO_MESSAGES.message
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == 4400
    p.receive_data(frame[100:])  # nothing more is read
    assert _events(p) == []


def test_pings_and_pongs_are_still_taken_where_no_messages_are() -> None:
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    p = ServerProtocol(max_message_bytes=100, too_big="{}")
    p.receive_data(client.send(wsproto.events.Request(host="127.0.0.1", target="/v1/events")))
    _events(p)
    _client_events(client, b"".join(p.accept(takes_messages=False)))
    p.receive_data(_send(client, wsproto.events.Ping(b"p1"), wsproto.events.Pong(b"p2")))
    assert _events(p) == [Pong(b"p2")]


def _budgeted(budget: Unfinished) -> tuple[ServerProtocol, wsproto.WSConnection]:
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    p = ServerProtocol(max_message_bytes=1 << 20, too_big="{}", holding=budget.holding())
    p.receive_data(client.send(wsproto.events.Request(host="127.0.0.1", target="/v1/exec")))
    _events(p)
    _client_events(client, b"".join(p.accept()))
    return p, client


def _part(client: wsproto.WSConnection, size: int, *, last: bool = False) -> bytes:
    return _send(client, wsproto.events.TextMessage(data="x" * size, message_finished=last))


def test_unfinished_messages_are_held_to_the_service_s_budget_past_their_own_bytes() -> None:
    # Each connection could hold an unfinished message up to the cap (1 MiB): 200 sockets
    # held 214 MB. Past its first OWN_BYTES a message takes from one budget for the whole
    # service; the one that would pass it is refused (1013), the others go on.
    budget = Unfinished(100_000)
    a, client_a = _budgeted(budget)
    b, client_b = _budgeted(budget)
    small, client_small = _budgeted(budget)
    a.receive_data(_part(client_a, OWN_BYTES + 80_000))
    assert _events(a) == [] and budget.held == 80_000
    b.receive_data(_part(client_b, OWN_BYTES + 10_000))
    assert _events(b) == [] and budget.held == 90_000
    b.receive_data(_part(client_b, 20_000))  # past the budget: refused, and given back
    assert _events(b) == [Ended(1013, BUSY.reason)]
    text, close = _client_events(client_b, b.data_to_send())
    assert isinstance(text, wsproto.events.TextMessage) and text.data == BUSY.message
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == 1013
    assert budget.held == 80_000
    # A message within its own bytes is never refused, however full the budget.
    small.receive_data(_part(client_small, OWN_BYTES, last=True))
    assert _events(small) == [Message("x" * OWN_BYTES)]
    # A whole message gives back what it held; a connection ended gives back its part.
    a.receive_data(_part(client_a, 20_000, last=True))
    assert [len(m.data) for m in _events(a) if isinstance(m, Message)] == [OWN_BYTES + 100_000]
    assert budget.held == 0
    a.receive_data(_part(client_a, OWN_BYTES + 50_000))
    assert budget.held == 50_000
    a.receive_data(b"")  # the client went away mid-message
    assert budget.held == 0


def test_a_message_at_the_cap_is_taken() -> None:
    p, client = _upgraded()
    p.receive_data(_send(client, wsproto.events.TextMessage(data="x" * 100)))
    assert _events(p) == [Message("x" * 100)]


@pytest.mark.parametrize(
    "text",
    ["\u20ac" * 34, "x" * 97 + "\U0001f600", "\u00e9" * 51],
    ids=["euro", "emoji", "e-acute"],
)
def test_the_cap_counts_a_text_message_s_bytes_not_its_characters(text: str) -> None:
    # At most 100 characters, over 100 bytes of UTF-8: the cap (in bytes, as documented)
    # refuses it, whole or in fragments.
    assert len(text) <= 100 < len(text.encode())
    for pieces in ([text], [text[:10], text[10:]]):
        p, client = _upgraded()
        data = b"".join(
            _send(client, wsproto.events.TextMessage(data=piece, message_finished=last))
            for piece, last in zip(pieces, [False] * (len(pieces) - 1) + [True], strict=True)
        )
        p.receive_data(data)
        assert _events(p) == [Ended(1009, "Exceeded maximum message size: 100 bytes")]


def _bad_utf8() -> bytes:
    """A client's text frame whose payload is not UTF-8 (a binary frame, its opcode made 1)."""
    frame = FrameProtocol(client=True, extensions=[]).send_data(b"\xff", fin=True)
    return bytes([0x81]) + frame[1:]


# (Named: the second frame's mask is random, and pytest-xdist's workers must collect the same ids.)
@pytest.mark.parametrize(
    ("frame", "code"),
    [(b"\x81\x02ab", 1002), (_bad_utf8(), 1007)],
    ids=["unmasked-1002", "not-utf8-1007"],
)
def test_a_frame_that_breaks_the_protocol_is_told_its_close_code_and_ends(
    frame: bytes, code: int
) -> None:
    p, client = _upgraded()
    p.receive_data(frame + _send(client, wsproto.events.TextMessage("after")))
    (ended,) = _events(p)  # (what follows the broken frame is not read)
    assert isinstance(ended, Ended) and ended.code == code
    (close,) = _client_events(client, p.data_to_send())
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == code
    assert close.reason  # (wsproto's words for what was wrong)


def test_a_new_message_inside_a_fragmented_one_is_1002_in_words_not_a_python_name() -> None:
    p, client = _upgraded()
    p.receive_data(FrameProtocol(client=True, extensions=[]).send_data("part", fin=False))
    # A second text frame (opcode 1) where the first one's continuation should come.
    p.receive_data(FrameProtocol(client=True, extensions=[]).send_data("new", fin=True))
    assert _events(p) == [Ended(1002, "expected CONTINUATION, got a text frame")]
    (close,) = _client_events(client, p.data_to_send())
    assert isinstance(close, wsproto.events.CloseConnection) and "Opcode" not in close.reason


def _bad_utf8_close() -> bytes:
    """A client's close frame (code 1000) whose reason, one byte, is not UTF-8 (a zero mask)."""
    return b"\x88\x83\x00\x00\x00\x00\x03\xe8\xff"


@pytest.mark.parametrize("frame", [_bad_utf8(), _bad_utf8_close()], ids=["text", "close-reason"])
def test_data_that_is_not_utf8_is_1007_in_our_words(frame: bytes) -> None:
    p, client = _upgraded()
    p.receive_data(frame)
    said = "invalid data: a text message or close reason that is not UTF-8"
    assert _events(p) == [Ended(1007, said)]
    (close,) = _client_events(client, p.data_to_send())
    assert isinstance(close, wsproto.events.CloseConnection) and close.code == 1007
    assert close.reason == said and len(said.encode()) <= 123  # (not wsproto's `'utf-8' codec…`)


def test_the_stream_ending_without_a_close_frame_is_1006() -> None:
    p, _ = _upgraded()
    p.receive_data(b"")
    assert _events(p) == [Ended(1006)]


def test_text_is_what_the_prebuilt_frame_is() -> None:
    p, _ = _upgraded()
    for text in ("", "x" * 200, "é" * 40_000):
        assert p.text(text) == text_frame(text.encode())
        assert p.text(text) == FrameProtocol(client=False, extensions=[]).send_data(text, True)


def _posted(head: bytes) -> ServerProtocol:
    p = _protocol()
    p.receive_data(b"POST /mcp HTTP/1.1\r\nHost: x\r\n" + head)
    (request,) = _events(p)
    assert isinstance(request, Request) and request.method == "POST"
    return p


def test_a_body_is_read_as_it_comes_by_length_or_in_chunks() -> None:
    p = _posted(b"Content-Length: 11\r\n\r\nhello")
    assert p.body() == (b"hello", False)
    p.receive_body(b" world")
    assert p.body() == (b" world", True)
    chunked = _posted(b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    assert chunked.body() == (b"abc", False)
    chunked.receive_body(b"2\r\nde\r\n0\r\n\r\n")
    assert chunked.body() == (b"de", True)


def test_a_body_in_more_chunks_than_the_frame_budget_is_bad() -> None:
    # A client that sent its body in 1-byte chunks (6 bytes each on the wire) held the loop
    # 0.4-0.7 s for each 64 KiB read, every other client waiting: a chunk costs as a frame.
    for chunks, refused in ((FRAME_BURST, False), (FRAME_BURST + 1, True)):
        p = ServerProtocol(max_message_bytes=1 << 20, too_big="{}", frames=FrameRate())
        p.receive_data(b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        _events(p)
        p.receive_body(b"1\r\na\r\n" * chunks)
        if refused:
            with pytest.raises(BadBody, match="too many chunks: at most 2048 at once"):
                p.body()
        else:
            assert p.body() == (b"a" * chunks, False)


@pytest.mark.parametrize(
    ("head", "more"),
    [
        (b"Content-Length: 10\r\n\r\nshort", b""),  # the client closed before the end
        (b"Transfer-Encoding: chunked\r\n\r\n", b"zz\r\nnot a chunk\r\n"),
    ],
)
def test_a_body_cut_short_or_broken_is_bad(head: bytes, more: bytes) -> None:
    p = _posted(head)
    p.body()
    p.receive_body(more)
    with pytest.raises(BadBody) as bad:
        p.body()
    assert "b'" not in str(bad.value) and "bytearray" not in str(bad.value), bad.value
    if more:
        assert str(bad.value) == (
            "malformed request body: a chunk of the body does not begin with its size"
        )


def test_an_answer_without_a_length_is_chunked_and_ends_with_its_last_chunk() -> None:
    p = _posted(b"Content-Length: 0\r\n\r\n")
    assert p.body() == (b"", True)
    given = ((b"Content-Type", b"text/event-stream"),)
    data = p.respond_head(200, None, given, None)
    data += p.respond_body(b"data: 1\n\n") + p.respond_end()
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/mcp", headers=[("Host", "x")]))
    client.receive_data(data)
    response = client.next_event()
    assert isinstance(response, h11.Response) and response.status_code == 200
    headers = dict(response.headers)
    assert headers[b"transfer-encoding"] == b"chunked" and b"content-length" not in headers
    assert headers[b"content-type"] == b"text/event-stream"
    assert headers[b"x-frame-options"] == b"DENY"
    body = client.next_event()
    assert isinstance(body, h11.Data) and bytes(body.data) == b"data: 1\n\n"
    assert isinstance(client.next_event(), h11.EndOfMessage)
