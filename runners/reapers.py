"""The init of each child's PID namespace in pidns mode: a process of ours, not the child.

Standard library only. A PID namespace's first process is its init, and the kernel treats an
init apart: orphans of the namespace are reparented to it and stay zombies until it waits for
them, and a signal it does not handle, sent from inside the namespace, is dropped. A hook or
script that is that init (a test suite starting daemons, a shell script running `cmd &`)
fills its process limit with zombies ("Cannot fork" after about a hundred), and `kill $$`
does nothing. So the spawner makes each namespace's init first, a *reaper*, and the child
after it, PID 2 of the same namespace and still the spawner's own child (the spawning thread
is in the namespace's `pid_for_children`, `setns`).

The reaper is a program of ours of 129 bytes (`PROGRAM`: a static x86_64 ELF file whose only
code is `for (;;) pause();`, executed from a memfd), started with SIGCHLD ignored, which an
`exec` keeps: every orphan reparented to it is reaped at once by the kernel, with no code of
it running at all. It is started by the chain (`chain.py`: no fork of this process), sharing
this process's fd table only until its first step leaves it with an empty one of its own
(`CLOSE_RANGE_UNSHARE`: not a copy of this process's thousands of fds at a thousand hooks),
so that it costs about an exec of nothing (~0.12 ms; `cat`, dynamically linked, ~0.4 ms).
Elsewhere (another machine, `MCPX_HOOKS_HIDE=chain`, a policy refusing executable memfds)
it is `cat` reading a pipe no one writes to (`Sink`), started by the chain or a fork. Either
way it holds nothing of this process: an empty environment, no fds but `cat`'s 0-2, the root
directory, a session of its own.

Its tree: SIGKILL to the reaper kills everything in the namespace, the child included, and
the reaper becomes reapable only once everything else in the namespace is gone, the child
reaped by the spawner first (the kernel keeps an init alive while a process of its namespace
waits to be reaped by a parent outside it). So the spawner reaps the child when it exits,
SIGKILLs the reaper (whatever the child left running dies with it) and reports once the
reaper is reaped: the report still comes after the whole tree is gone. Unless the child was
unsandboxed and left nothing (`trees.alone`): the spawner then reports at once and keeps the
reaper for the next unsandboxed child, which joins its namespace (`TreeEnds._keep_reaper`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import signal
import struct

from . import chain
from .chain import Chain
from .isolation import hidden
from .libc import CLONE_FILES, ConfineError, nr

#: Where `cat` is looked for; a machine with neither has no reaper (the child is the init).
PROGRAMS = ("/usr/bin/cat", "/bin/cat")
#: What a reaper is called, in `ps` inside and outside its namespace.
NAME = b"mcpx-hooks-reaper"
_SIG_IGN_ACTION = struct.pack("=QQQQ", 1, 0, 0, 0)  # handler SIG_IGN, no flags, no mask
_EVERY_FD = 0xFFFFFFFF
_CLOSE_RANGE_UNSHARE = 0x2
_SIGSET_BYTES = 8
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def _program() -> bytes:
    """The reaper for x86_64: an ELF header, one read+execute segment, then `pause` in a loop
    (`mov eax, 34; syscall; jmp` back: a signal it would handle never comes, none being
    handled after an `exec`)."""
    base, code = 0x400000, bytes.fromhex("b8220000000f05ebf7")
    size = 64 + 56 + len(code)
    ident = b"\x7fELF" + bytes((2, 1, 1, 0)) + bytes(8)  # 64-bit, little-endian, System V
    header = struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, base + 120, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)
    return ident + header + segment + code


PROGRAM = _program()


class Reaper:
    """A reaper: its pid (in this process's namespace) and pidfd, through which a thread also
    enters its namespace (`setns` of a pidfd); its host pid once asked (`alone`)."""

    __slots__ = ("host", "pid", "pidfd")

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.host = 0

    def kill(self) -> None:
        """SIGKILL: its whole namespace goes."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        """Its pidfd, once it is reaped."""
        os.close(self.pidfd)

    @staticmethod
    def made() -> Reaper | None:
        """`made()`, for a caller that imports the class only."""
        return made()

    def discard(self) -> None:
        """Kills, reaps and forgets one that no child joined (the spawner is closing)."""
        self.kill()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.close()


class Sink:
    """What reapers are started from, made once: the program (a memfd of `PROGRAM`, by its
    path in this process's /proc directory, or `cat`) and, for `cat`, the pipe it reads
    (nothing is ever written; this process keeps the write end, close-on-exec) and
    /dev/null for its output, opened the first time `cat` is needed."""

    def __init__(self) -> None:
        self.read = self.write = self.null = -1
        self.program = next((p for p in PROGRAMS if os.access(p, os.X_OK)), None)
        self.own: bytes | None = None
        if os.uname().machine == "x86_64" and chain.available():
            try:
                fd = os.memfd_create("mcpx-hooks-reaper", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                os.write(fd, PROGRAM)
                # Sealed: no process that can open it through /proc (one of this user's, as
                # an ordinary user) may change what the next reaper runs.
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
                host = int(os.readlink("/proc/self"))  # (/proc is the host's)
                self.own = os.fsencode(f"/proc/{host}/fd/{fd}")
            except OSError:
                pass


@functools.cache
def _sink() -> Sink:
    return Sink()


def said() -> str:
    """How this spawner's reapers are made (once one was), for `doctor`."""
    if "reaper" in hidden():
        return "hidden by MCPX_HOOKS_HIDE: each hook is the first process of its namespace"
    sink = _sink()
    if sink.own is not None:
        return f"ok: {len(PROGRAM)} bytes of ours, from a memfd, started by a chain of system calls"
    if sink.program is not None:
        how = "a chain of system calls" if chain.available() else "a fork of the spawner"
        return f"ok: {sink.program} with SIGCHLD ignored, started by {how} (slower)"
    return "none can start (no cat): each hook is the first process of its namespace"


def made() -> Reaper | None:
    """Starts the reaper of the PID namespace the calling thread has just unshared (its next
    child is that namespace's init) and leaves the thread there, for the child to follow as
    PID 2. None where none can start (no `cat`, out of processes or fds): the child is then
    the init, as it would be without reapers (and where `MCPX_HOOKS_HIDE` names `reaper`)."""
    if "reaper" in hidden():
        return None
    sink = _sink()
    try:
        pid = _started(sink)
    except (OSError, ConfineError):
        return None
    if pid is None:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None
    return Reaper(pid, pidfd)


def _started(sink: Sink) -> int | None:
    if sink.own is not None:
        try:
            return _steps(sink.own, None).spawn(CLONE_FILES)
        except OSError:  # (a policy refusing to execute a memfd: `cat` from now on)
            sink.own = None
    if sink.program is None:
        return None
    _cat_fds(sink)
    if not chain.available():
        return _by_fork(sink)
    return _steps(os.fsencode(sink.program), (sink.read, sink.null)).spawn()


@functools.cache
def _steps(path: bytes, cat: tuple[int, int] | None) -> Chain:
    """The steps starting the reaper at `path`: `PROGRAM`, whose child shares this process's
    fd table until its first step leaves it an empty one, or `cat`, given its stdin and its
    output (`cat`: the pipe's read end and /dev/null)."""
    steps = Chain()
    if cat is None:
        steps.call(nr("close_range"), 0, _EVERY_FD, _CLOSE_RANGE_UNSHARE, what="fds")
    else:
        for fd, target in zip((cat[0], cat[1], cat[1]), (0, 1, 2), strict=True):
            steps.call(nr("dup3"), fd, target, 0, what=f"fd {target}")
        steps.call(nr("close_range"), 3, _EVERY_FD, 0, what="fds")
    steps.call(nr("setsid"), what="setsid")
    steps.call(nr("rt_sigaction"), signal.SIGCHLD, _SIG_IGN_ACTION, None, _SIGSET_BYTES,
               what="SIGCHLD")  # fmt: skip
    steps.call(nr("chdir"), b"/", what="cwd")
    steps.call(nr("rt_sigprocmask"), 2, bytes(8), None, _SIGSET_BYTES, what="signals")
    steps.call(nr("execve"), path, steps.strings([NAME]), steps.strings([]), what="exec")
    return steps


def _cat_fds(sink: Sink) -> None:
    if sink.read < 0:
        sink.read, sink.write = os.pipe()
        sink.null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


def _by_fork(sink: Sink) -> int:
    assert sink.program is not None
    pid = os.fork()
    if pid:
        return pid
    try:  # (the fork of a Python process: only calls that cannot take a lock held elsewhere)
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        os.dup2(sink.read, 0)
        os.dup2(sink.null, 1)
        os.dup2(sink.null, 2)
        os.closerange(3, 1 << 20)
        os.chdir("/")
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        os.execve(sink.program, [NAME], {})
    finally:
        os._exit(127)
