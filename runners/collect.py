"""A `"collect"` request's output: the child's stdout and stderr spliced into memfds by the
spawner, and sent with the exit report (`spawner.py`, pidns mode).

Standard library only.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import socket
import sys
import termios
from typing import Any


class Output:
    """One collected output of a `"collect"` request: the read end of the child's pipe,
    spliced into a memfd, kernel to kernel (the bytes never enter this process, whose memory
    a warm fork copies for a later hook). `ring`: keep only the last `ring` bytes, the memfd
    written round; 0: keep all (the caller caps it). The memfd is made at the first byte."""

    __slots__ = ("count", "memfd", "pipe", "ring")

    def __init__(self, pipe: int, ring: int) -> None:
        self.pipe = pipe
        self.ring = ring
        self.memfd = -1
        #: Bytes read from the pipe so far.
        self.count = 0

    def splice(self) -> int:
        """Moves what the pipe holds now; 0 at end of file. Raises `BlockingIOError` when
        it holds nothing yet. Called when the pipe is readable or its writers are gone: an
        empty pipe is then at its end."""
        if self.memfd < 0:
            if not _pending(self.pipe):
                return 0
            self.memfd = os.memfd_create("mcpx-hook-output", os.MFD_CLOEXEC)
        at = self.count % self.ring if self.ring else self.count
        size = min(_SPLICE_CHUNK, self.ring - at) if self.ring else _SPLICE_CHUNK
        moved = os.splice(self.pipe, self.memfd, size, offset_dst=at)
        self.count += moved
        return moved

    def close(self) -> None:
        for fd in (self.pipe, self.memfd):
            if fd >= 0:
                os.close(fd)
        self.pipe = self.memfd = -1


_SPLICE_CHUNK = 1 << 16


def _pending(fd: int) -> int:
    """Bytes waiting in pipe `fd`."""
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def send_collected(
    ctrl: socket.socket, report: dict[str, Any], outputs: list[Output], overflow: bool
) -> None:
    """Sends the exit report of a `"collect"` request: `"stdout"` and `"stderr"` (bytes
    read), `"stderrRing"` (the stderr memfd's round size), `"overflow"`, and `"memfds"`, the
    names of the outputs whose memfds are attached, in that order."""
    out, err = outputs
    sent = [(name, o.memfd) for name, o in (("stdout", out), ("stderr", err)) if o.memfd >= 0]
    report = {
        **report,
        "stdout": out.count,
        "stderr": err.count,
        "stderrRing": err.ring,
        "overflow": overflow,
        "memfds": [name for name, _ in sent],
    }
    rights = []
    if sent:
        fds = array.array("i", [fd for _, fd in sent]).tobytes()
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
    with contextlib.suppress(OSError):
        ctrl.sendmsg([json.dumps(report).encode()], rights, socket.MSG_DONTWAIT)
