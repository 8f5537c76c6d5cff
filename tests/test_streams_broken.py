"""A stream of a run whose record breaks off (a gateway's copy of a run, `MirrorJournal`, at a
frame that is not one or a gap), without sockets: every follower gets the frames before the
break, then the error that says where it is (1011), whether the run's broadcaster carries it
or it sends for itself, and whether it came before the break or after it."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import trio

from mcpx_hooks.supervisor.cluster.jet import Stored
from mcpx_hooks.supervisor.cluster.mirror import MirrorJournal
from mcpx_hooks.supervisor.cluster.names import Header
from mcpx_hooks.supervisor.core.frames import FrameType, StartFrame, blank
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.service.connection import ServerConnection
from mcpx_hooks.supervisor.service.streams import Streams, Wake
from mcpx_hooks.supervisor.service.wire import Close, WireError


class FakeConnection:
    """What a stream uses of a `ServerConnection`: it takes every message whole, and its
    client sends nothing."""

    unsent = False
    broken = False

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def offer(self, frame: bytes) -> bool:
        self.messages.append(frame)
        return True

    async def send_frame(self, frame: bytes) -> None:
        await trio.lowlevel.checkpoint()
        self.messages.append(frame)

    async def get_message(self) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def seqs(self) -> list[int]:
        out = []
        for message in self.messages:
            head = 2 if message[1] < 126 else 4 if message[1] == 126 else 10
            out += [json.loads(line)["seq"] for line in message[head:].split(b"\n")]
        return out


def _lines() -> list[bytes]:
    journal = RunJournal("r1")
    journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    journal.offer_output(FrameType.STDOUT, ["a", "b"])
    return journal.lines


def _message(lines: list[bytes], first: int, sequence: int) -> Stored:
    last = str(first + len(lines) - 1)
    return Stored(b"\n".join(lines), {Header.SEQ: str(first), Header.LAST_SEQ: last}, sequence)


async def _follow(
    streams: Streams, journal: MirrorJournal, ends: list[tuple[FakeConnection, Any]]
) -> None:
    conn = FakeConnection()
    ending = await streams.stream_run(cast(ServerConnection, conn), journal, 0, Wake(idle=False))
    ends.append((conn, ending))


@pytest.mark.parametrize("carried", [True, False], ids=["broadcaster", "own"])
async def test_followers_get_the_frames_before_the_break_then_why(
    carried: bool, autojump_clock: trio.abc.Clock
) -> None:
    streams = Streams(send_rate=12_500, send_stall_s=5, message_bytes=1 << 20)
    lines = _lines()
    mirror = MirrorJournal("r1", 1 << 20)
    ends: list[tuple[FakeConnection, Any]] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            if carried:
                nursery.start_soon(streams.serve_broadcaster, mirror)
            mirror.take(_message(lines[:2], 0, 1))
            for _ in range(3):
                nursery.start_soon(_follow, streams, mirror, ends)
            await trio.sleep(1)
            assert not ends  # caught up, waiting for the next frame
            if carried:  # (by the broadcaster, not each by itself)
                assert streams._broadcasters[mirror].live == 3
            mirror.take(_message([lines[2], b'{"type": ["x"]}'], 2, 2))
        # Every stream ended, and the broadcaster with them.
        await _follow(streams, mirror, ends)  # one that comes after the break
    assert len(ends) == 4
    for conn, ending in ends:
        assert conn.seqs() == [0, 1, 2]
        assert isinstance(ending, WireError) and ending.code is Close.INTERNAL_ERROR
        assert ending.message == (
            "run r1's record on the cluster is broken at frame 3 (not a frame: its type is not"
            " a string): the frames before it were sent, none after it can be"
        )
    assert streams.count == 0
