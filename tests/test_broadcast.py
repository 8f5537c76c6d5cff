"""The broadcaster without sockets: streams carried over to it share each message, a socket
that does not take a message whole is handed back with it, a stream that joins behind gets
what it missed, rounds are paced, and the run's end or a stream's cancellation lets go."""

from __future__ import annotations

import json
from typing import Any, cast

import trio

from mcpx_hooks.supervisor.core.frames import EndFrame, OutputFrame, blank
from mcpx_hooks.supervisor.run.journal import Follower, RunJournal
from mcpx_hooks.supervisor.service.broadcast import Broadcaster, EncodedRun
from mcpx_hooks.supervisor.service.connection import ServerConnection


class FakeSocket:
    """What the broadcaster uses of a `ServerConnection`: it takes messages while it has
    `room` bytes, then keeps the one it could not take, as `offer` does."""

    def __init__(self, room: int = 1 << 30) -> None:
        self.room = room
        self.messages: list[bytes] = []
        self.kept: bytes | None = None

    @property
    def unsent(self) -> bool:
        return self.kept is not None

    def offer(self, frame: bytes) -> bool:
        assert self.kept is None
        if len(frame) > self.room:
            self.kept = frame
            return False
        self.room -= len(frame)
        self.messages.append(frame)
        return True

    def flush(self) -> None:
        assert self.kept is not None
        self.messages.append(self.kept)
        self.kept = None

    def frames(self) -> list[dict[str, Any]]:
        out = []
        for message in self.messages:
            head = 2 if message[1] < 126 else 4 if message[1] == 126 else 10
            out += [json.loads(line) for line in message[head:].split(b"\n")]
        return out


def _broadcaster(pace: float = 0.0, message_bytes: int = 1 << 20) -> Broadcaster:
    journal = RunJournal("r1")
    return Broadcaster(EncodedRun(journal), pace=lambda: pace, message_bytes=message_bytes)


def _print(journal: RunJournal, *texts: str) -> None:
    for text in texts:
        journal.append(blank(OutputFrame, text=text))


async def _carry(b: Broadcaster, sock: FakeSocket, follower: Follower, *, task_status: Any) -> None:
    task_status.started()
    await b.carry(cast(ServerConnection, sock), follower)


async def test_streams_that_keep_up_share_each_message(autojump_clock: trio.abc.Clock) -> None:
    b = _broadcaster()
    socks = [FakeSocket() for _ in range(3)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        for sock in socks:
            await nursery.start(_carry, b, sock, b.journal.follow(0))
        _print(b.journal, "a", "b")
        await trio.sleep(1)
        _print(b.journal, "c")
        await trio.sleep(1)
        first, *others = socks
        assert [f["text"] for f in first.frames()] == ["a", "b", "c"]
        for sock in others:
            assert all(m is n for m, n in zip(sock.messages, first.messages, strict=True))
        nursery.cancel_scope.cancel()


async def test_a_socket_that_is_full_is_handed_back_with_its_message(
    autojump_clock: trio.abc.Clock,
) -> None:
    b = _broadcaster()
    slow, fast = FakeSocket(room=0), FakeSocket()
    follower = b.journal.follow(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        handed_back = trio.Event()

        async def carry_slow(task_status: Any) -> None:
            await _carry(b, slow, follower, task_status=task_status)
            handed_back.set()

        await nursery.start(carry_slow)
        await nursery.start(_carry, b, fast, b.journal.follow(0))
        _print(b.journal, "a", "b")
        await handed_back.wait()
        assert slow.unsent and follower.at == 2  # the message is given: its owner flushes it
        _print(b.journal, "c")
        await trio.sleep(1)
        assert [f["text"] for f in fast.frames()] == ["a", "b", "c"]
        slow.flush()
        slow.room = 1 << 30
        await nursery.start(_carry, b, slow, follower)  # joins again, one frame behind
        await trio.sleep(1)
        assert [f["text"] for f in slow.frames()] == ["a", "b", "c"]
        nursery.cancel_scope.cancel()


async def test_a_stream_behind_gets_what_it_missed_in_messages_of_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    b = _broadcaster(message_bytes=200)
    _print(b.journal, *(f"line {i}" for i in range(20)))
    sock = FakeSocket()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        await nursery.start(_carry, b, sock, b.journal.follow(5))
        await trio.sleep(1)
        assert [f["seq"] for f in sock.frames()] == list(range(5, 20))
        assert 1 < len(sock.messages) < 15
        assert all(len(m) < 200 + 100 for m in sock.messages)
        nursery.cancel_scope.cancel()


async def test_rounds_are_paced(autojump_clock: trio.abc.Clock) -> None:
    b = _broadcaster(pace=0.05)
    sock = FakeSocket()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        await nursery.start(_carry, b, sock, b.journal.follow(0))
        start = trio.current_time()
        for i in range(1000):  # a frame a millisecond for a second
            _print(b.journal, str(i))
            await trio.sleep_until(start + (i + 1) / 1000)
        await trio.sleep(1)
        assert len(sock.frames()) == 1000
        assert 19 <= len(sock.messages) <= 22  # one message per 50 ms, the first at once
        assert sock.frames()[0]["text"] == "0" and len(sock.messages[0]) < 100
        nursery.cancel_scope.cancel()


async def test_the_end_hands_every_stream_back_and_ends_the_broadcaster(
    autojump_clock: trio.abc.Clock,
) -> None:
    b = _broadcaster()
    socks = [FakeSocket() for _ in range(3)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        for sock in socks:
            await nursery.start(_carry, b, sock, b.journal.follow(0))
        _print(b.journal, "a")
        b.journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    # Every carry returned (the nursery closed by itself) and the broadcaster with them.
    assert not b.open
    for sock in socks:
        assert [f["type"] for f in sock.frames()] == ["stdout", "end"]


async def test_a_slow_stream_does_not_keep_the_broadcaster_past_the_end(
    autojump_clock: trio.abc.Clock,
) -> None:
    b = _broadcaster()
    slow, fast = FakeSocket(room=0), FakeSocket()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        await nursery.start(_carry, b, slow, b.journal.follow(0))
        await nursery.start(_carry, b, fast, b.journal.follow(0))
        _print(b.journal, "a")
        b.journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    assert not b.open
    assert [f["type"] for f in fast.frames()] == ["stdout", "end"]
    assert slow.unsent and slow.messages == []  # its own task writes it, at its pace


async def test_a_stream_cancelled_while_carried_just_leaves(
    autojump_clock: trio.abc.Clock,
) -> None:
    b = _broadcaster()
    gone, stays = FakeSocket(), FakeSocket()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.serve)
        scope = trio.CancelScope()
        nursery.start_soon(_carry_then, b, gone, scope)
        await nursery.start(_carry, b, stays, b.journal.follow(0))
        await trio.sleep(1)
        assert b.live == 2
        scope.cancel()
        _print(b.journal, "a")
        await trio.sleep(1)
        assert gone.messages == [] and len(stays.messages) == 1
        nursery.cancel_scope.cancel()


async def _carry_then(b: Broadcaster, sock: FakeSocket, scope: trio.CancelScope) -> None:
    with scope:
        await b.carry(cast(ServerConnection, sock), b.journal.follow(0))


async def test_a_broadcaster_that_stops_hands_its_streams_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    b = _broadcaster()
    sock = FakeSocket()
    async with trio.open_nursery() as nursery:
        serving = trio.CancelScope()
        nursery.start_soon(_serve_in, b, serving)
        await nursery.start(_carry, b, sock, b.journal.follow(0))
        serving.cancel()
    assert not b.open
    with trio.fail_after(1):  # a stream that comes later is not taken
        await b.carry(cast(ServerConnection, sock), b.journal.follow(0))


async def _serve_in(b: Broadcaster, scope: trio.CancelScope) -> None:
    with scope:
        await b.serve()
