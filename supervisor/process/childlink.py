"""A child's control socket to the spawner, the supervisor's end (`SpawnerLink`): the
reports about one child read as they come (`runners/spawner.py` has the protocol), the
output of a collected child taken from the memfds its exit report brings, and commands sent.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
from collections.abc import Callable
from typing import Any, Final

import orjson
import trio

from .runnerside import protocol

#: The largest message about a child, and room for the memfds of collected output.
_MAX_MESSAGE: Final = protocol.MAX_REPORT
_FD_SPACE: Final = socket.CMSG_SPACE(2 * array.array("i").itemsize)


class SpawnerLink:
    """A child's control socket to the spawner (`runners/spawner.py` has the protocol), and
    `taken`: whether the spawner took the request (`launch.TakenCount`); `on_listener`
    takes an `egress` child's proxy socket from "listening" (`ChildSpec.on_listener`). A
    report is read once the socket is readable (a checkpoint, one scheduler pass): not tried
    first, as a `trio.socket` read does, since a report almost never waits there yet."""

    def __init__(self, ctrl: socket.socket, taken: Callable[[], bool]) -> None:
        ctrl.setblocking(False)
        self._ctrl = ctrl
        self.taken = taken
        self.on_listener: Callable[[int], None] | None = None

    async def recv(self) -> dict[str, Any] | None:
        """The spawner's next message about this child; None once it is gone. A collected
        child's exit report brings its output in memfds: put in as `"output"`, (stdout,
        stderr tail)."""
        while True:
            await trio.lowlevel.wait_readable(self._ctrl)
            with contextlib.suppress(BlockingIOError):  # (woken for nothing: wait again)
                try:
                    data, ancdata, _, _ = self._ctrl.recvmsg(_MAX_MESSAGE, _FD_SPACE)
                    break
                except ConnectionResetError:  # it closed with a command of ours unread
                    return None
        if not data:
            return None
        try:
            msg: dict[str, Any] = orjson.loads(data)
        except orjson.JSONDecodeError:  # an escaped lone surrogate (a refused argv, said back)
            msg = json.loads(data)
        fds = received_fds(ancdata)
        try:
            if "memfds" in msg:
                msg["output"] = _collected(msg, dict(zip(msg["memfds"], fds, strict=True)))
            elif msg.get("event") == "started" and fds:  # pidns: the tree's pidfds, kept
                msg["pidfds"], fds = fds[:2], fds[2:]
            elif msg.get("event") == "listening" and fds and self.on_listener is not None:
                self.on_listener(fds.pop(0))
        finally:
            for fd in fds:
                os.close(fd)
        return msg

    async def send(self, cmd: str) -> None:
        await self.send_raw(json.dumps({"cmd": cmd}).encode())

    async def send_raw(self, data: bytes) -> None:
        """Sends one message as it is (a command; the tests' garbage); a checkpoint."""
        await trio.lowlevel.checkpoint()
        with contextlib.suppress(OSError):
            while not _sent(self._ctrl, data):
                await trio.lowlevel.wait_writable(self._ctrl)

    def close(self) -> None:
        if self._ctrl.fileno() != -1:
            trio.lowlevel.notify_closing(self._ctrl)
        self._ctrl.close()


def _sent(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.send(data, socket.MSG_NOSIGNAL)
    except BlockingIOError:
        return False
    return True


def _collected(msg: dict[str, Any], memfds: dict[str, int]) -> tuple[bytes, bytes]:
    """Stdout and the stderr tail from their memfds (`runners/collect.py` `Output`)."""
    out = os.pread(memfds["stdout"], msg["stdout"], 0) if "stdout" in memfds else b""
    err = b""
    if "stderr" in memfds:
        count, ring = msg["stderr"], msg["stderrRing"]
        err = os.pread(memfds["stderr"], min(count, ring), 0)
        if count > ring:  # written round: the oldest byte is where the next would go
            at = count % ring
            err = err[at:] + err[:at]
    return out, err


def received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds a message brought (SCM_RIGHTS)."""
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)
