"""A child's fds while the spawner client starts it (`spawner.py`): the pipes for its stdin,
stdout, stderr and extra fds, which end goes to the child and which stays here, and its
environment in a memfd.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Mapping, Sequence

import attrs
import orjson
import trio

from ..core.errors import SpawnError
from ..core.records import Record
from .child import Child, Outcome, SpawnerLink

#: A pipe's size as made; and the most an ordinary user may grow one to (Linux's default
#: `/proc/sys/fs/pipe-max-size`).
_PIPE_BYTES = 65536
_PIPE_MAX_BYTES = 1 << 20


@attrs.define(repr=False)
class ChildFds(Record):
    """A child's fds while it is being started: `theirs` go to it, at `targets`; `ours` stay
    here (the stdin writer, when something is left to write; the read ends)."""

    theirs: list[int]
    targets: list[int]
    ours: list[int]
    writer: bool
    unwritten: bytes
    outputs: bool

    @classmethod
    def make(
        cls, stdin: bool | bytes, extra: Sequence[int], *, outputs: bool, inputs: Sequence[int]
    ) -> ChildFds:
        """Pipes for stdin (`stdin`: False for /dev/null, True for a pipe, bytes for a pipe
        holding as much of them as it takes), stdout and stderr when `outputs`, each of `extra`
        and of `inputs` (read by the child). Raises `SpawnError` when out of fds."""
        fds = cls([], [], [], bool(stdin), b"", outputs)
        try:
            if stdin:
                r, w = os.pipe2(os.O_CLOEXEC)
                fds.give(r, 0)
                fds.ours.append(w)
                if isinstance(stdin, bytes):
                    fds.unwritten = _prefill(w, stdin)
                    if not fds.unwritten:  # all of it waits in the pipe, then end of file
                        os.close(fds.ours.pop())
                        fds.writer = False
            else:
                fds.give(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), 0)
            for target in (*((1, 2) if outputs else ()), *extra, *inputs):
                r, w = os.pipe2(os.O_CLOEXEC)
                theirs, ours = (r, w) if target in inputs else (w, r)
                fds.give(theirs, target)
                fds.ours.append(ours)
        except OSError as exc:
            fds.close_ours()
            fds.close_theirs()
            raise SpawnError(f"cannot make the child's pipes: {exc.strerror}") from exc
        return fds

    def give(self, fd: int, target: int) -> None:
        self.theirs.append(fd)
        self.targets.append(target)

    def close_theirs(self) -> None:
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []

    def close_ours(self) -> None:
        for fd in self.ours:
            os.close(fd)
        self.ours = []

    def child(self, link: SpawnerLink, outcome: Outcome) -> Child:
        streams = [trio.lowlevel.FdStream(fd) for fd in self.ours]
        self.ours = []
        stdin = streams.pop(0) if self.writer else None
        out = (streams.pop(0), streams.pop(0)) if self.outputs else None
        child = Child(link, stdin, out, streams, outcome)
        child._unwritten = self.unwritten
        return child


def _prefill(fd: int, data: bytes) -> bytes:
    """Writes what the empty pipe `fd` takes of `data` without blocking, the pipe grown to
    hold it first where the system lets it (an ordinary user's pipes up to 1 MiB); returns
    the rest."""
    if len(data) > _PIPE_BYTES:
        with contextlib.suppress(OSError):  # (EPERM past the system's bound: as it is)
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(len(data), _PIPE_MAX_BYTES))
    os.set_blocking(fd, False)
    try:
        written = os.write(fd, data)
    except BlockingIOError:
        written = 0
    return data[written:]


def _env_json(env: Mapping[str, str]) -> bytes:
    """`env` as JSON: orjson's, in a tenth of the time, but where a value holds a lone
    surrogate (bytes of no encoding, from the environment), which only `json` writes."""
    try:
        return orjson.dumps(env if type(env) is dict else dict(env))
    except orjson.JSONEncodeError:
        return json.dumps(dict(env)).encode()


def env_memfd(env: Mapping[str, str]) -> int:
    """A memfd holding `env` as JSON, for the child to read its environment from."""
    fd = os.memfd_create("mcpx-hook-env", os.MFD_CLOEXEC)
    try:
        data = _env_json(env)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd
