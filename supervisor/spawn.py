"""The one spawn path: every hook and script process starts here, through the resident spawner.

`open_spawner()` starts `runners/spawner.py` (standard library only) and owns it; `Spawner.
open_child()` starts one child and owns it until its whole tree is gone. Timeouts belong to
the caller: cancel the scope around `open_child` and the child's tree gets SIGTERM, the grace,
then SIGKILL, and is reaped before `open_child` exits (shielded, bounded).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import resources
from typing import Any, Final

import attrs
import trio

from .errors import SpawnError

#: How long the keeper may take to report after SIGKILL before we kill it and give up waiting.
KILL_REPORT_BOUND: Final = 5.0
#: How long a closing spawner may take to exit before it is killed.
SPAWNER_EXIT_BOUND: Final = 2.0
_READ_CHUNK: Final = 65536


@attrs.frozen
class ChildSpec:
    """What to start. `rlimits` are `(RLIMIT_NAME, soft, hard)` applied in the child."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    rlimits: tuple[tuple[str, int, int], ...] = ()


@attrs.define
class Outcome:
    """What happened to a child; filled in as it runs, so a timeout still has the tail."""

    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int = 0
    max_rss_kb: int = 0
    stdout: bytearray = attrs.field(factory=bytearray)
    stdout_overflow: bool = False
    stderr_tail: bytearray = attrs.field(factory=bytearray)
    #: Set when the owner had to kill the tree (timeout, cancellation, overflow).
    killed: bool = False
    exited: bool = False


class Child:
    """A running child owned by `Spawner.open_child`. Talks to its keeper over `ctrl`."""

    def __init__(
        self,
        ctrl: trio.socket.SocketType,
        stdin: trio.lowlevel.FdStream | None,
        stdout: trio.lowlevel.FdStream,
        stderr: trio.lowlevel.FdStream,
        extra: Sequence[trio.lowlevel.FdStream],
    ) -> None:
        self._ctrl = ctrl
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        #: Extra channels the caller asked for (read ends), e.g. a frames fd.
        self.extra = tuple(extra)
        self.outcome = Outcome()
        self.keeper: int | None = None
        self._exit_seen = trio.Event()

    async def _recv(self) -> dict[str, Any] | None:
        """The keeper's next message; None once it is gone."""
        try:
            data = await self._ctrl.recv(4096)
        except ConnectionResetError:
            return None
        return json.loads(data) if data else None

    async def _wait_started(self) -> None:
        msg = await self._recv()
        if msg is None:
            raise SpawnError("the spawner went away before the child started")
        if msg["event"] == "error":
            raise SpawnError(msg["message"])
        self.outcome.pid = msg["pid"]
        self.keeper = msg["keeper"]

    async def wait(self) -> Outcome:
        """Waits until the whole tree is gone and reaped; returns the outcome."""
        if not self._exit_seen.is_set():
            msg = await self._recv()
            if msg is not None and msg.get("event") == "exit":
                self.outcome.exit_code = msg["code"]
                self.outcome.signal = msg["signal"]
                self.outcome.cpu_ms = msg["cpuMs"]
                self.outcome.max_rss_kb = msg["maxRssKb"]
                self.outcome.exited = True
            self._exit_seen.set()
        return self.outcome

    async def send_command(self, cmd: str) -> None:
        with contextlib.suppress(OSError):
            await self._ctrl.send(json.dumps({"cmd": cmd}).encode())

    async def kill(self) -> None:
        """SIGKILL the whole tree now (e.g. output over its cap); `wait` sees it reaped."""
        self.outcome.killed = True
        await self.send_command("kill")

    async def communicate(self, stdin: bytes, max_stdout: int, stderr_tail: int) -> Outcome:
        """Writes `stdin` and closes it, reads stdout (capped: over `max_stdout` the tree is
        killed) and stderr (its last `stderr_tail` bytes kept), and waits for the exit."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_stdin, stdin)
            nursery.start_soon(self._read_stdout, max_stdout)
            nursery.start_soon(self._read_stderr, stderr_tail)
            await self.wait()
        return self.outcome

    async def _write_stdin(self, data: bytes) -> None:
        if self.stdin is None:
            return
        # A child that exits or closes stdin without reading all of it is not an error.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            view = memoryview(data)
            for i in range(0, len(view), _READ_CHUNK):
                await self.stdin.send_all(view[i : i + _READ_CHUNK])
        await self.stdin.aclose()

    async def _read_stdout(self, cap: int) -> None:
        out = self.outcome.stdout
        while chunk := await self.stdout.receive_some(_READ_CHUNK):
            if len(out) + len(chunk) > cap:
                out.extend(chunk[: cap - len(out)])
                self.outcome.stdout_overflow = True
                await self.kill()
                return
            out.extend(chunk)

    async def _read_stderr(self, keep: int) -> None:
        tail = self.outcome.stderr_tail
        while chunk := await self.stderr.receive_some(_READ_CHUNK):
            tail.extend(chunk)
            if len(tail) > keep:
                del tail[: len(tail) - keep]

    async def _terminate(self, grace: float) -> None:
        """SIGTERM the tree, wait up to `grace`, SIGKILL, wait for the reap report."""
        if self._exit_seen.is_set() or self.outcome.pid is None:
            return  # reaped already, or never started
        self.outcome.killed = True
        with trio.move_on_after(grace) as scope:
            await self.send_command("term")
            await self.wait()
        if not scope.cancelled_caught:
            return
        await self.send_command("kill")
        with trio.move_on_after(KILL_REPORT_BOUND):
            await self.wait()
            return
        # The keeper itself is stuck: kill it; the spawner kills its orphans.
        if self.keeper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.keeper, signal.SIGKILL)

    async def aclose(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr, *self.extra):
            if stream is not None:
                await stream.aclose()
        self._ctrl.close()


class Spawner:
    """Handle to the resident spawner process. Use through `open_spawner()`."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._sock = sock
        self._lock = trio.Lock()

    @contextlib.asynccontextmanager
    async def open_child(
        self,
        spec: ChildSpec,
        *,
        kill_grace: float,
        stdin: bool = True,
        extra_fds: Sequence[int] = (),
    ) -> AsyncIterator[Child]:
        """Starts a child; on exit its whole tree is gone and reaped, whatever happened.

        Inside, the child runs in its own session with fds 0, 1, 2 as pipes to `Child.stdin`,
        `stdout`, `stderr` (stdin is /dev/null when `stdin` is false), and one pipe per entry of
        `extra_fds`, placed at that number in the child, whose read end is `Child.extra[i]`.
        When the block is left early (timeout, cancellation, error), the tree gets SIGTERM,
        then SIGKILL after `kill_grace` seconds, under a shielded scope.
        Raises `SpawnError` when the child cannot start (missing program, bad cwd).
        """
        ours: list[int] = []
        theirs: list[int] = []
        mine, keeper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if stdin:
                r, w = os.pipe2(os.O_CLOEXEC)
                theirs.append(r)
                ours.append(w)
            else:
                theirs.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            for _ in (1, 2, *extra_fds):
                r, w = os.pipe2(os.O_CLOEXEC)
                theirs.append(w)
                ours.append(r)
            request = json.dumps(
                {
                    "argv": list(spec.argv),
                    "cwd": spec.cwd,
                    "env": dict(spec.env),
                    "rlimits": [list(r) for r in spec.rlimits],
                    "fds": [0, 1, 2, *extra_fds],
                }
            ).encode()
            async with self._lock:
                await self._sock.sendmsg(
                    [request],
                    [
                        (
                            socket.SOL_SOCKET,
                            socket.SCM_RIGHTS,
                            _fd_array([keeper_end.fileno(), *theirs]),
                        )
                    ],
                )
        except BaseException:
            for fd in ours:
                os.close(fd)
            mine.close()
            raise
        finally:
            keeper_end.close()
            for fd in theirs:
                os.close(fd)
        streams = [trio.lowlevel.FdStream(fd) for fd in ours]
        child = Child(
            trio.socket.from_stdlib_socket(mine),
            streams.pop(0) if stdin else None,
            streams[0],
            streams[1],
            streams[2:],
        )
        try:
            await child._wait_started()
            yield child
        finally:
            with trio.CancelScope(shield=True):
                await child._terminate(kill_grace)
                await child.aclose()


def _fd_array(fds: Sequence[int]) -> bytes:
    import array

    return array.array("i", fds).tobytes()


def runner_path(name: str) -> str:
    """The file of a runner module, found without importing it (it runs in another process)."""
    return str(resources.files("mcpx_hooks.runners").joinpath(name))


#: Interpreter flags for runner processes: isolated, no site-packages, no bytecode writes.
RUNNER_FLAGS: Final = ("-I", "-S", "-B")


@contextlib.asynccontextmanager
async def open_spawner() -> AsyncIterator[Spawner]:
    """Starts the resident spawner and owns it; on exit it is closed and reaped.

    The spawner is forked from this (the main) thread, so its parent-death signal is tied to
    the thread that lives as long as the supervisor. It runs in its own session, so a terminal's
    Ctrl-C reaches the supervisor, which then cancels its runs, and not the spawner.
    """
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                *RUNNER_FLAGS,
                runner_path("spawner.py"),
                str(os.getpid()),
                str(theirs.fileno()),
            ],
            stdin=subprocess.PIPE,  # the lifeline: closed, the spawner exits
            stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    finally:
        theirs.close()
    sock = trio.socket.from_stdlib_socket(mine)
    try:
        yield Spawner(sock)
    finally:
        sock.close()
        assert proc.stdin is not None
        proc.stdin.close()
        with trio.CancelScope(shield=True):
            pidfd = os.pidfd_open(proc.pid)
            try:
                with trio.move_on_after(SPAWNER_EXIT_BOUND):
                    await trio.lowlevel.wait_readable(pidfd)
                if proc.poll() is None:
                    proc.kill()
                    await trio.lowlevel.wait_readable(pidfd)
                proc.wait()
            finally:
                os.close(pidfd)
