"""The cluster's NATS client against a server that stalls: a `flush` given up (its timeout
passed, the server stopped) leaves the connection whole when the server answers again.
nats-py set the given-up ping's future when its PONG came late: an `InvalidStateError` in
its reading, told as an error, and its ping accounting broken from then on."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import nats.errors
import psutil
import pytest
from clusterparts import Nats, need_nats

from mcpx_hooks.supervisor.cluster.natsconnect import _Client


def _until_stopped(pid: int) -> None:
    """Returns once the process is stopped (a signal is delivered when its target next
    runs the kernel's way, not when `kill` returns)."""
    process = psutil.Process(pid)
    deadline = time.monotonic() + 10
    while process.status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, process.status()
        time.sleep(0.001)


def test_a_flush_given_up_while_the_server_stalls_leaves_the_connection_whole(
    tmp_path: Path,
) -> None:
    need_nats()
    server = Nats(tmp_path / "jetstream", open=True)
    server.start()
    assert server.proc is not None
    stalled = server.proc
    errors: list[Exception] = []

    async def error(exc: Exception) -> None:
        errors.append(exc)

    async def through_a_stall() -> list[bytes]:
        nc = _Client()
        await nc.connect(server.url, error_cb=error, allow_reconnect=False, connect_timeout=5)
        try:
            answers = await nc.subscribe("echo")
            stalled.send_signal(signal.SIGSTOP)
            _until_stopped(stalled.pid)
            try:
                with pytest.raises(nats.errors.TimeoutError):
                    await nc.flush(timeout=1)
            finally:
                stalled.send_signal(signal.SIGCONT)
            await nc.flush(timeout=5)  # (its own PONG: the late one is the given-up ping's)
            await nc.publish("echo", b"after")
            await nc.flush(timeout=5)
            got = await answers.next_msg(timeout=5)
            assert nc.is_connected
            return [got.data]
        finally:
            await nc.close()

    try:
        assert asyncio.run(through_a_stall()) == [b"after"]
    finally:
        server.stop()
    assert errors == []
