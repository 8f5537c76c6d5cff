"""Starting, reading and closing the resident spawner process (`runners/spawner.py`).

`start_spawner_process()` starts one and reads its report; `close_spawner()` ends it. The
`Spawner` handle (`spawner.py`) uses them, at first and whenever the spawner has died. As
root the process started here is the spawner, PID 1 of a new PID namespace; for an ordinary
user it is the one that holds the spawner's user namespace and waits for the spawner, its
child (rootless, `runners/userns.py`): closing or killing it ends the spawner just the same.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from ..core.errors import HooksError, SpawnError, SpawnModeError
from ..core.records import Record
from .runnerside import isolation, libc, protocol, runner_path

#: How long a closing spawner may take to exit before it is killed.
SPAWNER_EXIT_BOUND: Final = 2.0


class TakenCount:
    """The spawner's count of the requests it took off its socket, in 8 bytes of shared
    memory it writes before anything can start the child (`runners/protocol.py`
    `TakenCounter`). When the spawner dies before a child's "started", `reached(n)` says
    whether it had taken request `n`: then the child may have run and is lost, else it can
    be sent again. In keeper mode it stays 0 (keepers say "accepted" instead)."""

    def __init__(self, fd: int) -> None:
        os.ftruncate(fd, _TAKEN_BYTES)
        self._map = mmap.mmap(fd, _TAKEN_BYTES)

    def reached(self, number: int) -> bool:
        if self._map.closed:  # its spawner was closed: assume the worst, never send again
            return True
        return int.from_bytes(self._map[:_TAKEN_BYTES], "little") >= number

    def close(self) -> None:
        self._map.close()


_TAKEN_BYTES: Final = protocol.TAKEN_BYTES


#: Interpreter flags for runner processes: isolated, no site-packages, no bytecode writes
#: (a hook's imports must not leave `__pycache__` in the directories it imports from).
RUNNER_FLAGS: Final = ("-I", "-S", "-B")
#: The spawner's: the same, but its own bytecode is cached, as an installed package's is:
#: compiling the runner modules was half of its start.
SPAWNER_FLAGS: Final = ("-I", "-S")
#: Forces how the spawner owns trees: "pidns" (fails if it cannot be had) or "keeper".
#: Unset or "auto": pidns where it can be had (as root, PID namespaces; as another user, a
#: user namespace of the spawner's own, `runners/userns.py`), else keeper.
SPAWN_MODE_ENV: Final = "MCPX_HOOKS_SPAWN"
SPAWN_MODES: Final = ("pidns", "keeper")


class _NoPidNamespace(HooksError):
    """PID namespaces cannot be made here (not root, not allowed, no /proc)."""


@contextlib.contextmanager
def _pid_namespace_for_next_child() -> Iterator[None]:
    """Makes the next process this thread starts PID 1 of a new PID namespace.

    `unshare(CLONE_NEWPID)` changes only this thread's `pid_for_children`; it is set back
    before returning, so nothing else this thread starts later is affected. Raises
    `_NoPidNamespace` where PID namespaces cannot be made.
    """
    try:
        home = os.open("/proc/thread-self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _NoPidNamespace(f"/proc/thread-self/ns/pid: {exc.strerror}") from exc
    try:
        if libc.libc.unshare(libc.CLONE_NEWPID) != 0:
            raise _NoPidNamespace(libc.failure("unshare(CLONE_NEWPID)"))
        try:
            yield
        finally:
            restored = libc.libc.setns(home, libc.CLONE_NEWPID) == 0
            if not restored:  # pragma: no cover - cannot fail as root
                raise RuntimeError(libc.failure("cannot restore the PID namespace"))
    finally:
        os.close(home)


#: Hides isolation mechanisms from detection (comma-separated names), as if missing; for tests.
HIDE_ENV: Final = isolation.HIDE_ENV
#: How long a starting spawner may take to say which mechanisms it has.
SPAWNER_REPORT_BOUND: Final = 10.0
_MAX_REPORT: Final = 64 * 1024


def _start_spawner(
    mode: str, request_fd: int, taken_fd: int, why: str = ""
) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if os.environ.get(HIDE_ENV):
        env[HIDE_ENV] = os.environ[HIDE_ENV]
    return subprocess.Popen(
        [
            sys.executable,
            *SPAWNER_FLAGS,
            runner_path("spawner.py"),
            str(os.getpid()),
            str(request_fd),
            mode,
            str(taken_fd),
            *([why] if why else []),
        ],
        stdin=subprocess.PIPE,  # the lifeline: closed, the spawner exits
        stdout=subprocess.PIPE,  # one line: its mechanisms; then closed
        pass_fds=(request_fd, taken_fd),
        start_new_session=True,
        env=env,
    )


def _launch(request_fd: int, taken_fd: int) -> subprocess.Popen[bytes]:
    """Starts the spawner: as root PID 1 of a new PID namespace (pidns mode); as another user
    in mode `userns`, in which it makes a user namespace of its own and serves in pidns mode
    inside it, or in keeper mode where user namespaces are refused (`runners/userns.py`); its
    report says which."""
    asked = os.environ.get(SPAWN_MODE_ENV, "auto") or "auto"
    if asked not in (*SPAWN_MODES, "auto"):
        raise SpawnModeError(f"{SPAWN_MODE_ENV}={asked!r}: expected one of pidns, keeper, auto")
    if asked == "keeper":
        return _start_spawner("keeper", request_fd, taken_fd, f"{SPAWN_MODE_ENV}=keeper")
    if os.geteuid() != 0:
        return _start_spawner("userns", request_fd, taken_fd)
    try:
        with _pid_namespace_for_next_child():
            return _start_spawner("pidns", request_fd, taken_fd)
    except _NoPidNamespace as exc:
        if asked == "pidns":
            raise SpawnError(f"{SPAWN_MODE_ENV}=pidns, but {exc}") from exc
        return _start_spawner("keeper", request_fd, taken_fd, f"as root, {exc}")


def raise_open_files_limit() -> None:
    """Raises this process's soft open-files limit to its hard one (the spawner, started
    after, inherits it): each running child holds a few fds here and in the spawner, and
    a thousand hooks at once are a supported load. Children get their own limits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@attrs.frozen(repr=False, eq=False)
class SpawnerProcess(Record):
    """A started spawner: its process, request socket, mode, report (`mechanisms.py`), and
    the memory where it counts the requests it takes (`TakenCount`)."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket
    mode: str
    report: Mapping[str, Any]
    taken: TakenCount


#: A spawner started ahead of the event loop by `prestart`, for the next start to take.
_early: list[tuple[socket.socket, TakenCount, subprocess.Popen[bytes]]] = []


def prestart() -> None:
    """Starts a spawner now, from this thread, for the next `start_spawner_process` to take.

    A command that will run something (`exec`, `hook test`) calls it before it reads its
    config and imports what its run needs, so the spawner's start (another interpreter, its
    runner modules, the mechanism probes: ~35 ms) overlaps the command's own on another core.
    The spawner is tied to this thread as `open_spawner`'s would be (the command's event loop
    runs in it too). A spawner that cannot be started here is left for `start_spawner_process`
    to say why; `discard_prestarted` ends one that nothing took."""
    if _early:
        return
    raise_open_files_limit()
    with contextlib.suppress(SpawnError, OSError):
        _early.append(_begin())


@contextlib.contextmanager
def prestarted() -> Iterator[None]:
    """`prestart` on entry, `discard_prestarted` on exit: around a command that will run
    something, whose run takes the spawner (or which stops before it)."""
    prestart()
    try:
        yield
    finally:
        discard_prestarted()


def discard_prestarted() -> None:
    """Ends a `prestart`ed spawner that nothing took (the command stopped before its run):
    end of file on its lifeline, then up to `SPAWNER_EXIT_BOUND` before SIGKILL; reaped."""
    while _early:
        mine, taken, proc = _early.pop()
        mine.close()
        taken.close()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(SPAWNER_EXIT_BOUND)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _begin() -> tuple[socket.socket, TakenCount, subprocess.Popen[bytes]]:
    """A spawner's process, started; its report not yet read."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # A request is one datagram of at most the send buffer (less 32 bytes): raised towards
    # what the spawner takes, as far as net.core.wmem_max lets it (the kernel doubles it).
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, protocol.MAX_MESSAGE)
    try:
        taken_fd = os.memfd_create("mcpx-hooks-taken", os.MFD_CLOEXEC)
    except OSError as exc:
        mine.close()
        theirs.close()
        raise SpawnError(
            f"cannot start the spawner: memfd_create: {exc.strerror} (a system-call filter"
            " around this process, a container's or a service manager's, may refuse it:"
            " allow memfd_create)"
        ) from None
    try:
        taken = TakenCount(taken_fd)
        proc = _launch(theirs.fileno(), taken_fd)
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
        os.close(taken_fd)
    return mine, taken, proc


async def start_spawner_process() -> SpawnerProcess:
    """A new spawner (the one `prestart` started, if it is there); `SpawnError` if it does
    not start."""
    mine, taken, proc = _early.pop() if _early else _begin()
    try:
        report = await _read_report(proc)
        mode = report.get("mode")
        if mode not in SPAWN_MODES:
            raise SpawnError(f"the spawner reported an unknown mode: {mode!r}")
        asked = os.environ.get(SPAWN_MODE_ENV, "auto") or "auto"
        if asked == "pidns" and mode != "pidns":
            why = (report.get("mechanisms") or {}).get("pidns")
            raise SpawnError(f"{SPAWN_MODE_ENV}=pidns, but {why}")
    except BaseException:
        mine.close()
        await close_spawner(proc)
        raise
    return SpawnerProcess(proc, mine, mode, report, taken)


async def _read_report(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The spawner's first line (its mechanisms); a spawner that dies or says nothing in
    time is a `SpawnError`."""
    import trio  # here, not at the top: `prestart` runs before the command imports trio

    assert proc.stdout is not None
    stream = trio.lowlevel.FdStream(os.dup(proc.stdout.fileno()))
    proc.stdout.close()
    data = bytearray()
    try:
        with trio.move_on_after(SPAWNER_REPORT_BOUND):
            while b"\n" not in data and len(data) < _MAX_REPORT:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data.extend(chunk)
    finally:
        await stream.aclose()
    try:
        report = json.loads(data.split(b"\n")[0])
    except ValueError:
        report = None
    if not isinstance(report, dict):
        raise SpawnError(f"the spawner did not start: {bytes(data[:200])!r}")
    if isinstance(refused := report.get("refused"), str):  # (what it needs, it cannot have)
        raise SpawnError(refused)
    return report


async def close_spawner(proc: subprocess.Popen[bytes]) -> None:
    """End of file on its lifeline, then up to `SPAWNER_EXIT_BOUND` for it to kill and reap
    what is left, then SIGKILL; shielded."""
    import trio

    assert proc.stdin is not None
    proc.stdin.close()
    if proc.poll() is not None:  # dead and now reaped
        return
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
