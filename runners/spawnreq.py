"""What every way of spawning shares: the request, its fds and limits, the reports.

Standard library only. See `spawner.py` for the protocol.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import json
import mmap
import os
import resource
import signal
import socket
import sys
import termios
from collections.abc import Callable, Iterable
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWPID = 0x20000000
MAX_MESSAGE = 256 * 1024
MAX_FDS = 16
#: Past the highest fd a process here can have (`os.closerange` bound).
MAX_FD = 1 << 20
#: The spawner's stdin: a pipe whose end of file means the supervisor is done with it.
LIFELINE_FD = 0

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0))


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (a host pid), parents before children, from /proc.

    Reads only the subtree (`/proc/P/task/T/children`), never the whole process table.
    """
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def signal_host(pid: int, sig: int) -> None:
    """Signals host pid `pid` from any PID namespace, through its /proc directory."""
    try:
        fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(fd, sig)
    finally:
        os.close(fd)


def sigterm_disposition(pid: int) -> str:
    """`caught`, `ignored` or `default`: what SIGTERM does to host pid `pid`."""
    bit = 1 << (signal.SIGTERM - 1)
    masks: dict[bytes, int] = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigCgt:", b"SigIgn:")):
                    masks[line[:6]] = int(line.split()[1], 16)
    except OSError:
        return "default"
    if masks.get(b"SigCgt", 0) & bit:
        return "caught"
    return "ignored" if masks.get(b"SigIgn", 0) & bit else "default"


def terminate_init(host: int, pidfd: int) -> None:
    """SIGTERM to a tree whose root `host` (a host pid, `pidfd` its pidfd) is PID 1 of its
    own namespace, as if it were an ordinary process: an init gets, from outside its
    namespace, only the signals it handles (and SIGKILL). SIGTERM to every other process of
    the tree; to the root if it catches SIGTERM, SIGKILL if it keeps the default action
    (which would have killed it), nothing if it ignores it."""
    for pid in descendants(host):
        signal_host(pid, signal.SIGTERM)
    how = sigterm_disposition(host)
    if how != "ignored":
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM if how == "caught" else signal.SIGKILL)


def recv_request(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One request and its fds, close-on-exec (`socket.recv_fds` drops its flags in 3.11)."""
    fds = array.array("i")
    msg, ancdata, flags, _ = sock.recvmsg(
        MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):  # more than a request may carry
        for fd in fds:
            os.close(fd)
        return msg, []
    return msg, list(fds)


#: Keeper mode: sent on a request's control socket as soon as it is taken, before anything can
#: start the child: a keeper that dies after it leaves the owner unsure whether the child ran.
#: (pidns mode counts requests in shared memory instead: `TakenCounter`.)
ACCEPTED = b'{"event": "accepted"}'


class TakenCounter:
    """How many requests this spawner has taken off its socket, in 8 bytes of memory shared
    with the supervisor (the memfd `fd` it passed; None: counted here only), counted before
    anything can start the child. When the spawner dies, the supervisor compares a request's
    number with it: taken, the child may have run and is lost; not taken, it can be sent
    again. No message, so no wake-up of the supervisor. Closed in every fork of this process
    (a hook must not write it)."""

    def __init__(self, fd: int | None) -> None:
        self._map = mmap.mmap(fd, _COUNTER_BYTES) if fd is not None else None
        self._taken = 0
        if fd is not None:
            os.close(fd)
            os.register_at_fork(after_in_child=self.close)

    def count(self) -> None:
        self._taken += 1
        if self._map is not None:
            self._map[:_COUNTER_BYTES] = self._taken.to_bytes(_COUNTER_BYTES, "little")

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


_COUNTER_BYTES = 8


def accept(ctrl: socket.socket) -> None:
    with contextlib.suppress(OSError):
        ctrl.send(ACCEPTED)


def send(ctrl: socket.socket, obj: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        ctrl.send(json.dumps(obj).encode())


def exit_report(status: int, usage: resource.struct_rusage) -> dict[str, Any]:
    code = os.waitstatus_to_exitcode(status)
    return {
        "event": "exit",
        "code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "cpuMs": round((usage.ru_utime + usage.ru_stime) * 1000),
        "maxRssKb": usage.ru_maxrss,
    }


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
        ctrl.sendmsg([json.dumps(report).encode()], rights)


class Sandbox:
    """A request's sandbox plan (`"sandbox"` in the request; the supervisor's `sandbox.py`
    makes it): `net` (keep the host network), `read` (read-only paths), `devices`, `scratch`
    (the one writable directory, a tmpfs of `scratchBytes`), `returnScratch` (copy it back to
    the host directory once the tree is gone), `uid` (run as a per-child unprivileged user)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.net = bool(plan["net"])
        self.read: list[str] = [str(p) for p in plan["read"]]
        self.devices: list[str] = [str(p) for p in plan.get("devices", ())]
        self.scratch = str(plan["scratch"])
        self.scratch_bytes = int(plan["scratchBytes"])
        self.return_scratch = bool(plan.get("returnScratch", False))
        self.switch_uid = bool(plan.get("uid", True))
        if not all(os.path.isabs(p) for p in (*self.read, *self.devices, self.scratch)):
            raise ValueError("sandbox paths must be absolute")


class ModuleCall:
    """A request's `"module"`: run a `module` hook in a fork of this warm process (`warm.py`)
    instead of `argv`. `spec`: the hook (`module_runner.py` SPEC); `path`: directories to add
    to `sys.path`; `envFd`: the child's fd (one of `"fds"`) holding its environment as JSON,
    which only the forked child reads (the request's `"env"` is then empty)."""

    def __init__(self, call: dict[str, Any], targets: list[int]) -> None:
        self.spec = call["spec"]
        self.path: list[str] = call.get("path", [])
        self.env_fd = call["envFd"]
        if not (isinstance(self.spec, str) and _all_str(self.path) and self.env_fd in targets):
            raise ValueError("malformed module call")


class StartError(Exception):
    """The child could not be started; the message says why, for the owner."""


def resolve(argv0: str, path: str) -> str:
    """The program to exec: a name with a slash as given (relative to cwd), else from PATH."""
    if "/" in argv0:
        return argv0
    for d in path.split(":"):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise StartError(f"cannot start {argv0!r}: not found on PATH")


#: Signals the spawned program starts with at their default action (Python ignores some).
DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCHLD,
)


class Collect:
    """A request's `"collect"`: the spawner reads the child's stdout (up to `stdout` bytes;
    past them the tree is killed) and stderr (its last `stderr` bytes kept) itself, and
    sends them with the exit report (`output_report`), so its owner watches one socket."""

    def __init__(self, caps: dict[str, Any]) -> None:
        self.stdout = int(caps["stdout"])
        self.stderr = int(caps["stderr"])
        if self.stdout < 0 or self.stderr < 1:  # a tail of 0 would be no ring at all
            raise ValueError("collect: stdout cap below 0 or stderr tail below 1")


class Request:
    """A parsed spawn request, with the child's fds where no dup2 clobbers another source.

    With `"collect"`, the child's stdout and stderr are pipes made here (`outputs`: their
    read ends), or, `attached`, already the last two of `fds` (a request handed on).
    """

    def __init__(self, raw: bytes, fds: list[int], *, attached: bool = False) -> None:
        self.fds = fds
        self.moved: list[int] = []
        #: The read ends of the stdout and stderr pipes made for a `"collect"` request.
        self.outputs: tuple[int, int] | None = None
        try:
            req = json.loads(raw)
            self.argv: list[str] = req["argv"]
            self.cwd: str = req["cwd"]
            self.env: dict[str, str] = req["env"]
            rlimits = req.get("rlimits") or ()
            self.limits = [(limit_number(n), int(soft), int(hard)) for n, soft, hard in rlimits]
            self.limit_names = {
                number: n for (n, _, _), (number, _, _) in zip(rlimits, self.limits, strict=True)
            }
            targets: list[int] = req["fds"]
            self.sandbox = Sandbox(req["sandbox"]) if req.get("sandbox") else None
            self.module = ModuleCall(req["module"], targets) if req.get("module") else None
            self.collect = Collect(req["collect"]) if req.get("collect") else None
            if self.collect is not None:
                if 1 in targets or 2 in targets:
                    raise ValueError("collect: stdout and stderr are the spawner's to make")
                targets = [*targets, 1, 2]
                if not attached:
                    self._make_outputs()
                fds = self.fds
            if not (
                self.argv
                and _all_str(self.argv)
                and isinstance(self.cwd, str)
                and _all_str(self.env)
                and _all_str(self.env.values())
                and len(targets) == len(fds)
                and all(isinstance(t, int) and t >= 0 for t in targets)
            ):
                raise ValueError("malformed argv, cwd, env or fds")
            floor = max(targets) + 1
            sources = fds
            if min(fds) < floor:  # else no dup2 can clobber a source still needed
                # Every source above every target.
                for fd in fds:
                    self.moved.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor))
                sources = self.moved
        except (KeyError, TypeError, ValueError, AttributeError, OSError) as exc:
            self.close()
            self.drop_outputs()
            raise StartError(f"bad spawn request: {exc!r}") from exc
        self.pairs = list(zip(sources, targets, strict=True))
        #: For a sandboxed child: the uid it runs as (None: the spawner's).
        self.uid: int | None = None

    def _make_outputs(self) -> None:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        try:
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
        except OSError:
            os.close(out_r)
            os.close(out_w)
            raise
        self.fds = [*self.fds, out_w, err_w]
        self.outputs = (out_r, err_r)

    def close(self) -> None:
        """Closes the child's fds here (not `outputs`, which the caller keeps or drops)."""
        for fd in (*self.fds, *self.moved):
            os.close(fd)
        self.fds = self.moved = []

    def drop_outputs(self) -> None:
        if self.outputs is not None:
            for fd in self.outputs:
                os.close(fd)
            self.outputs = None

    def place_fds(self) -> None:
        """Puts each fd at its number in this process and closes every other copy: for a
        fork that runs without an exec (`warm.py`), where close-on-exec does not help."""
        targets = {t for _, t in self.pairs}
        sources = {m for m, _ in self.pairs}
        for fd in self.fds:
            if fd not in sources and fd not in targets:
                os.close(fd)
        for moved, target in self.pairs:
            os.dup2(moved, target, inheritable=True)
        for fd in sources - targets:
            os.close(fd)
        self.fds = self.moved = []

    def chdir(self) -> None:
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            raise StartError(f"cannot use cwd {self.cwd!r}: {exc.strerror}") from exc

    def setrlimits(self) -> None:
        for number, soft, hard in self.limits:
            try:
                resource.setrlimit(number, (soft, hard))
            except (OSError, ValueError) as exc:
                raise StartError(f"cannot set {self.limit_names[number]}: {exc}") from exc

    def posix_spawn(self, program: str) -> int:
        return os.posix_spawn(
            program,
            self.argv,
            self.env,
            file_actions=[(os.POSIX_SPAWN_DUP2, m, t) for m, t in self.pairs],
            setsid=True,
            setsigmask=(),
            setsigdef=DEFAULT_SIGNALS,
        )


def _all_str(items: Iterable[object]) -> bool:
    return all(isinstance(item, str) for item in items)


#: Every resource limit this platform has, by name (looked up per limit per request).
_LIMIT_NUMBERS = {
    name: int(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")
}


def limit_number(name: object) -> int:
    number = _LIMIT_NUMBERS.get(name) if isinstance(name, str) else None
    if number is None:
        raise ValueError(f"unknown resource limit {name!r}")
    return number


def start_failed(program: str, exc: OSError) -> StartError:
    return StartError(f"cannot start {program!r}: {exc.strerror}")


def command(msg: bytes) -> str | None:
    try:
        cmd = json.loads(msg).get("cmd")
    except (ValueError, AttributeError):
        return None
    return cmd if isinstance(cmd, str) else None


def fork_exec(req: Request, program: str, confine: Callable[[], None] | None = None) -> int:
    """Starts the child by fork: for limits that cannot be borrowed, set in the fork, then
    `confine` (the sandbox's last steps, in the forked child only), then `execve`.

    The forked child says why it could not exec on a close-on-exec pipe; end of file on it
    means the exec happened.
    """
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        why = f"cannot start {program!r}"
        try:
            os.setsid()
            for sig in DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for moved, target in req.pairs:
                os.dup2(moved, target)
            # Only the child's own fds from here: the spawner's (close-on-exec, but open
            # until the exec) would fill an open-files limit set below their numbers.
            top = max(target for _, target in req.pairs) + 1
            os.closerange(top, err_w)
            os.closerange(err_w + 1, MAX_FD)
            req.setrlimits()
            if confine is not None:
                confine()
            os.execve(program, req.argv, req.env)
        except StartError as exc:
            why = str(exc)
        except OSError as exc:
            why = str(start_failed(program, exc))
        finally:
            os.write(err_w, why.encode())
            os._exit(127)
    os.close(err_w)
    try:
        failed = read_all(err_r)
    finally:
        os.close(err_r)
    if failed:
        os.waitpid(pid, 0)
        raise StartError(failed.decode(errors="replace"))
    return pid


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)
