"""The plain-HTTP client of the remote commands (`service/httpclient.py`) against a scripted
server: what it sends, what it makes of each answer, and that it leaves nothing open."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio

from mcpx_hooks.supervisor.service import httpclient
from mcpx_hooks.supervisor.service.remote import Remote
from mcpx_hooks.supervisor.service.remoteread import RemoteError

Answer = Callable[[trio.SocketStream], Awaitable[None]]


class Scripted:
    """A TCP server that keeps each request's head and answers as `answer` says."""

    def __init__(self) -> None:
        self.answer: Answer = self.send(b"")
        self.heads: list[bytes] = []
        self.port = 0

    @staticmethod
    def send(data: bytes) -> Answer:
        async def answer(stream: trio.SocketStream) -> None:
            await stream.send_all(data)

        return answer

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head and (got := await stream.receive_some(65536)):
                head += got
            self.heads.append(head)
            await self.answer(stream)

    def remote(self, token: str | None = "sekrit") -> Remote:
        return Remote(f"ws://127.0.0.1:{self.port}", token)


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[Scripted]:
    scripted = Scripted()
    listeners = await nursery.start(partial(trio.serve_tcp, scripted.handle, 0, host="127.0.0.1"))
    scripted.port = listeners[0].socket.getsockname()[1]
    yield scripted


def _answer(body: bytes, status: bytes = b"200 OK", headers: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s" % (status, headers, len(body), body)


def _ok(body: bytes) -> bytes:
    return _answer(body)


async def _said(remote: Remote, path: str = "/v1/runs") -> str:
    with pytest.raises(RemoteError) as caught:
        await httpclient.get_json(remote, path)
    return str(caught.value)


async def test_it_sends_a_plain_get_with_the_token(server: Scripted) -> None:
    server.answer = server.send(_ok(b'[{"runId": "r1"}]'))
    assert await httpclient.get_json(server.remote(), "/v1/runs") == [{"runId": "r1"}]
    request, *headers = server.heads[0].decode().split("\r\n\r\n")[0].split("\r\n")
    assert request == "GET /v1/runs HTTP/1.1"
    assert sorted(h.split(":")[0].lower() for h in headers) == [
        "accept",
        "authorization",
        "connection",
        "host",
    ]
    assert "Authorization: Bearer sekrit" in headers and "Connection: close" in headers
    await httpclient.get_json(server.remote(None), "/v1/runs")
    assert b"authorization" not in server.heads[1].lower()
    # The body is taken as sent: no content decoding.
    server.answer = server.send(_answer(b"[]", headers=b"Content-Encoding: gzip\r\n"))
    assert await httpclient.get_json(server.remote(), "/v1/runs") == []


async def test_an_artifact_path_is_sent_as_encoded(server: Scripted) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    server.answer = server.send(chunked)
    path = httpclient.artifact_path("r/1", "a b?")
    async with httpclient.open_get(server.remote(), path) as pieces:
        assert b"".join([piece async for piece in pieces]) == b"abcde"
    assert server.heads[0].startswith(b"GET /v1/runs/r%2F1/artifacts/a%20b%3F HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            _answer(b'{"message": "no token"}', b"401 Unauthorized"),
            "GET /v1/runs: HTTP 401 no token (pass --token-file F or set MCPX_HOOKS_TOKEN)",
        ),
        (
            _answer(b'{"message": "no run r1"}', b"404 Not Found"),
            "GET /v1/runs: HTTP 404 no run r1",
        ),
        # A redirect is an answer, not followed.
        (
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n",
            "GET /v1/runs: HTTP 302",
        ),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom", "GET /v1/runs: HTTP 500"),
        (_ok(b"[1, 2"), "/v1/runs: the server's answer is not JSON"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1,",
            "GET /v1/runs: the connection failed: peer closed connection without sending "
            "complete message body (received 3 bytes, expected 100)",
        ),
        (b"NOT HTTP\r\n\r\n", "GET /v1/runs: the connection failed: illegal status line"),
        (b"", "GET /v1/runs: the connection failed: Server disconnected"),
    ],
)
async def test_what_it_makes_of_each_answer(server: Scripted, answer: bytes, said: str) -> None:
    server.answer = server.send(answer)
    assert (await _said(server.remote())).startswith(said)


async def test_a_json_answer_is_capped(server: Scripted, monkeypatch: Any) -> None:
    monkeypatch.setattr(httpclient, "MAX_JSON_BYTES", 10)
    server.answer = server.send(_ok(b"[" + b"1," * 20 + b"1]"))
    assert await _said(server.remote()) == "/v1/runs: the answer is over 10 bytes"


async def test_a_stalled_answer_is_given_up(
    server: Scripted, monkeypatch: Any, autojump_clock: Any
) -> None:
    async def half(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[")
        await trio.sleep_forever()

    monkeypatch.setattr(httpclient, "STALL_S", 5.0)
    server.answer = half
    assert await _said(server.remote()) == "the server sent nothing for 5 s"


async def test_no_server_is_a_connect_failure() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    said = await _said(Remote(f"ws://127.0.0.1:{port}"))
    assert said.startswith(f"cannot connect to ws://127.0.0.1:{port}: ")


async def test_a_body_left_early_or_cancelled_leaves_nothing_behind(server: Scripted) -> None:
    """With warnings as errors, a generator of the body left suspended fails the test when
    it is collected; the cases: the consumer raises before reading or while reading, or is
    cancelled (the JSON cap: test_a_json_answer_is_capped)."""

    async def trickle(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
        await trio.sleep_forever()

    server.answer = trickle
    with pytest.raises(OSError, match="no such directory"):
        async with httpclient.open_get(server.remote(), "/a"):
            raise OSError("no such directory")
    with pytest.raises(OSError, match="disk full"):
        async with httpclient.open_get(server.remote(), "/a") as pieces:
            async for _ in pieces:
                raise OSError("disk full")
    with trio.move_on_after(0.2) as scope:
        async with httpclient.open_get(server.remote(), "/a") as pieces:
            async for piece in pieces:
                assert piece == b"x" * 10
    assert scope.cancelled_caught
    gc.collect()
