"""A tool server's `RawChannel` (`tools/rawchannel.py`), on a real pipe: a hearer of the
server's notifications that does not keep up holds the server's reading for at most
`HEAR_WAIT_S`, and one that fails does not end it, so the other uses of a shared server are
not held or ended by one client."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio
from mcp import types

from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.tools.hearing import HEAR_WAIT_S
from mcpx_hooks.supervisor.tools.jsonlines import LineWriter
from mcpx_hooks.supervisor.tools.rawchannel import RawChannel
from mcpx_hooks.supervisor.tools.serverentry import ServerEntry


@asynccontextmanager
async def channel(heard: Any) -> AsyncIterator[RawChannel]:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # (nothing is written in these tests)
    async with trio.lowlevel.FdStream(write_fd) as stream, trio.open_nursery() as nursery:
        yield RawChannel(LineWriter(stream), set(), nursery, heard)


def note(method: str, params: dict[str, Any]) -> types.JSONRPCNotification:
    return types.JSONRPCNotification(jsonrpc="2.0", method=method, params=params)


class Stuck:
    """A route, or a hearer, that never gets its notification through."""

    heard = 0

    async def __call__(self, params: Any) -> None:
        self.heard += 1
        await trio.sleep_forever()

    async def answered(self, message: Any) -> None:
        raise AssertionError("no answer was sent")

    async def progress(self, params: dict[str, Any]) -> None:
        await self(params)

    def gone(self) -> None:
        pass


async def test_a_hearer_that_does_not_keep_up_holds_the_reading_for_at_most_hear_wait_s(
    autojump_clock: trio.abc.Clock,
) -> None:
    stuck = Stuck()
    async with channel(stuck) as raw:
        raw.routes["mcpx-call-1"] = stuck
        logged = note("notifications/message", {"level": "info", "data": "x"})
        progress = note("notifications/progress", {"progressToken": "mcpx-call-1", "progress": 1})
        for message in (logged, progress):
            start = trio.current_time()
            with trio.fail_after(10 * HEAR_WAIT_S):  # (rather than wait for ever)
                assert await raw.divert(message) is True
            assert trio.current_time() - start == HEAR_WAIT_S
        # Not the routes': the session's to read, at once.
        other = note("notifications/progress", {"progressToken": 7, "progress": 1})
        assert await raw.divert(other) is False
    assert stuck.heard == 2


async def test_a_hearer_that_fails_misses_its_notification_and_the_reading_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hearer whose client is gone misses it quietly; one that fails otherwise is logged
    in a line. Neither reaches the reading of the server's stdout."""
    raised: list[BaseException] = [anyio.ClosedResourceError(), ValueError("no such level")]

    async def failing(params: Any) -> None:
        raise raised.pop(0)

    logged = note("notifications/message", {"level": "info", "data": "x"})
    async with channel(failing) as raw:
        assert await raw.divert(logged) is True
        assert await raw.divert(logged) is True
    assert raised == []
    said = [r.getMessage() for r in caplog.records if r.name == "mcpx_hooks.mcp"]
    assert said == ["a server's notification was not passed on: ValueError: no such level"]


class Quick:
    """A hearer that takes each message at once."""

    def __init__(self) -> None:
        self.heard: list[Any] = []

    async def __call__(self, params: Any) -> None:
        self.heard.append(params)


async def test_a_client_that_does_not_read_makes_no_other_client_miss_a_log_message(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A server's log message is told to each client with a call in flight to it. They were
    # told one after another within one HEAR_WAIT_S: a client not reading, first in line,
    # took it all, and every other client missed every message. Each is told on its own now.
    entry = ServerEntry(ServerSpec("h", ("true",), "/"))
    stuck, quick = Stuck(), Quick()
    entry.log_hearers.extend([stuck, quick])
    logged = note("notifications/message", {"level": "info", "data": "x"})
    async with channel(entry.heard) as raw:
        for _ in range(3):
            start = trio.current_time()
            with trio.fail_after(10 * HEAR_WAIT_S):
                assert await raw.divert(logged) is True
            assert trio.current_time() - start == HEAR_WAIT_S
    assert len(quick.heard) == 3 and stuck.heard == 3
