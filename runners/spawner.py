"""The resident spawner: the one place hook and script processes are started from.

Standard library only; started by the supervisor as `python -I -S -B spawner.py PARENT_PID FD
MODE`, FD being its request socket and its stdin the lifeline (end of file: the supervisor is
done). Never imports the supervisor or trio. It owns each child's whole tree in one of two ways:

`pidns` (root, where PID namespaces can be made; chosen by the supervisor). The supervisor
starts this process as PID 1 of a fresh PID namespace. Per child it calls `unshare(CLONE_NEWPID)`,
`posix_spawn`s the child, and `setns`es `pid_for_children` back: the child is PID 1 of its own
nested namespace, with no Python fork on the way. The kernel then does the containment: when
the child exits or is killed it SIGKILLs everything else in the namespace (`setsid` and
double-fork escapes included: nothing can leave a PID namespace), and the child is reaped only
once all of it is gone; when this spawner dies, by any means, everything in its namespace dies,
every child namespace included. One epoll loop here keeps all the children at once (request
socket, each child's pidfd and control socket); the namespace for the next child is made as
soon as the last one started, so only `posix_spawn` is on a request's way. Consequences for the
child, which is an init:
* signals it does not handle are dropped when sent from inside its namespace (`kill $$` in a
  shell, `os.kill(os.getpid(), SIGTERM)`, SIGXCPU at a soft CPU limit; a hard limit still kills);
  from here only SIGKILL gets through, so "term" is emulated: SIGTERM to every other process of
  the tree, and to the child if it catches SIGTERM; SIGKILL if it keeps the default action
  (which would have killed it); nothing if it ignores SIGTERM (the grace then runs out);
* orphaned grandchildren are reparented to it (zombies until it exits, unless it reaps them);
* `getpid()` is 1 and `getppid()` 0; /proc is the host's.
Pids: this process sees its own namespace, /proc shows the host's; pids reported and pids read
from /proc are host pids, and signals to them go through `/proc/PID` directory fds and
`pidfd_send_signal`, which need no translation.
cwd and rlimits, which `posix_spawn` cannot set: this process is single-threaded, so it
`chdir`s itself around the spawn. Limits must be in force before the child runs, so they are
*borrowed*: set on this process for the spawn and restored at once, for limits that cannot
hurt it in that window (file size, open files, locks, ...; CPU only below its own CPU time
plus a margin, address space, data and stack only above its own use plus a margin). A request
with any other limit is started by `fork` (limits set in the forked child, then `execve`):
correct, one Python fork slower.

`keeper` (the fallback; also `MCPX_HOOKS_SPAWN=keeper`). This process is a subreaper with
pre-forked *keepers*: each takes one request, becomes a subreaper, sets cwd and limits on
itself, `posix_spawn`s the child in its own session, and kills the whole remaining tree
(reparented to it) when the child exits, on "term"/"kill", or at end of file on its control
socket. If a keeper dies its orphans come here and are killed; if the supervisor dies this
process gets SIGKILL (`PR_SET_PDEATHSIG`) and every keeper sees end of file.

Protocol. Requests arrive on FD, a SOCK_SEQPACKET socket: one JSON object per message with
file descriptors attached (SCM_RIGHTS). The first attached fd is the request's *control*
socket (SOCK_SEQPACKET), the rest are the child's fds, placed at the numbers listed in
`"fds"`. Everything about the child is then said on its control socket:

  spawner → supervisor {"event": "started", "pid": P, "keeper": K|null}   (P: host pid)
                       {"event": "error", "message": "..."}           (could not start)
                       {"event": "exit", "code": C|null, "signal": S|null,
                        "cpuMs": n, "maxRssKb": n}                    (tree gone, all reaped)
  supervisor → spawner {"cmd": "term"}   SIGTERM to the tree (see above for pidns)
                       {"cmd": "kill"}   SIGKILL to the tree
                       end of file       the owner is gone: SIGKILL the tree, no report

`maxRssKb` includes the spawner's own resident size at exec time (the kernel carries the
high-water mark of the vfork'd or forked memory over exec).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import fcntl
import json
import os
import resource
import select
import signal
import socket
import sys
from collections.abc import Iterable, Iterator
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWPID = 0x20000000
MAX_MESSAGE = 256 * 1024
MAX_FDS = 16
#: The spawner's stdin: a pipe whose end of file means the supervisor is done with it.
LIFELINE_FD = 0
#: Keepers forked ahead of requests (keeper mode). Two cores here: more would only queue.
IDLE_KEEPERS = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _prctl(option: int, arg: int) -> None:
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


def _send(ctrl: socket.socket, obj: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        ctrl.send(json.dumps(obj).encode())


def _exit_report(status: int, usage: resource.struct_rusage) -> dict[str, Any]:
    code = os.waitstatus_to_exitcode(status)
    return {
        "event": "exit",
        "code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "cpuMs": round((usage.ru_utime + usage.ru_stime) * 1000),
        "maxRssKb": usage.ru_maxrss,
    }


class StartError(Exception):
    """The child could not be started; the message says why, for the owner."""


def _resolve(argv0: str, path: str) -> str:
    """The program to exec: a name with a slash as given (relative to cwd), else from PATH."""
    if "/" in argv0:
        return argv0
    for d in path.split(":"):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise StartError(f"cannot start {argv0!r}: not found on PATH")


#: Signals the spawned program starts with at their default action (Python ignores some).
_DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCHLD,
)


class _Request:
    """A parsed spawn request, with the child's fds where no dup2 clobbers another source."""

    def __init__(self, raw: bytes, fds: list[int]) -> None:
        self.fds = fds
        self.moved: list[int] = []
        try:
            req = json.loads(raw)
            self.argv: list[str] = req["argv"]
            self.cwd: str = req["cwd"]
            self.env: dict[str, str] = req["env"]
            rlimits = req.get("rlimits") or ()
            self.limits = [(_limit_number(n), int(soft), int(hard)) for n, soft, hard in rlimits]
            self.limit_names = {_limit_number(n): n for n, _, _ in rlimits}
            targets: list[int] = req["fds"]
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
            raise StartError(f"bad spawn request: {exc!r}") from exc
        self.pairs = list(zip(sources, targets, strict=True))

    def close(self) -> None:
        for fd in (*self.fds, *self.moved):
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
            setsigdef=_DEFAULT_SIGNALS,
        )


def _all_str(items: Iterable[object]) -> bool:
    return all(isinstance(item, str) for item in items)


def _limit_number(name: object) -> int:
    if not isinstance(name, str) or not name.startswith("RLIMIT_") or not hasattr(resource, name):
        raise ValueError(f"unknown resource limit {name!r}")
    return int(getattr(resource, name))


def _start_failed(program: str, exc: OSError) -> StartError:
    return StartError(f"cannot start {program!r}: {exc.strerror}")


# --------------------------------------------------------------------------- keeper mode


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def kill_tree(sig: int = signal.SIGKILL) -> None:
    """SIGKILL every descendant of this process and reap them all; returns when none is left.

    Children before parents: if this process dies mid-sweep (the spawner gets SIGKILL when
    the supervisor dies, just after its lifeline said so), the keepers are still alive and
    finish their own trees, rather than leaving them orphaned. A process forked while the
    sweep runs has a live subreaper above it (a keeper, or this process), and the next pass
    finds it.
    """
    me = os.getpid()
    while True:
        _signal_all(descendants(me)[::-1], sig)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _keeper_spawn(req: _Request) -> int:
    """Starts the child from this keeper: its own session, fds in place, limits, cwd.

    What the child must inherit but `posix_spawn` cannot set (cwd, rlimits) is set on this
    keeper first: the keeper is disposable and does nothing after this but wait and kill.
    """
    req.chdir()
    req.setrlimits()
    program = _resolve(req.argv[0], req.env.get("PATH", os.defpath))
    try:
        return req.posix_spawn(program)
    except OSError as exc:
        raise _start_failed(program, exc) from exc


def _keeper(msg: bytes, ctrl: socket.socket, fds: list[int]) -> None:
    """One child's keeper: a subreaper that starts it, watches it, and kills its whole tree.

    Never returns; exits once the tree is gone and the exit is reported.
    """
    try:
        req = _Request(msg, fds)
        try:
            pid = _keeper_spawn(req)
        finally:
            req.close()
    except StartError as exc:
        _send(ctrl, {"event": "error", "message": str(exc)})
        os._exit(0)
    _send(ctrl, {"event": "started", "pid": pid, "keeper": os.getpid()})
    status = _watch(pid, ctrl)
    kill_tree()
    if status is not None:
        _send(ctrl, _exit_report(status, resource.getrusage(resource.RUSAGE_CHILDREN)))
    os._exit(0)


def _idle_keeper(requests: socket.socket, took: int) -> None:
    """A pre-forked keeper: waits for one request on the shared socket, then keeps it.

    Forking is the slow part of a spawn in keeper mode, so it happens ahead of time; the
    kernel hands each request to exactly one waiting keeper. Never returns.
    """
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        while True:
            try:
                msg, fds = recv_request(requests)
            except InterruptedError:
                continue
            if not msg:  # the supervisor closed its end
                os._exit(0)
            if fds:
                break
        requests.close()
        os.write(took, b"k")
        os.close(took)
        _keeper(msg, socket.socket(fileno=fds[0]), fds[1:])
    finally:
        os._exit(1)


def _watch(pid: int, ctrl: socket.socket) -> int | None:
    """Waits for the child to exit, obeying commands; returns its wait status (None: lost)."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([pidfd, ctrl.fileno()], [], [])
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                return status
            try:
                msg = ctrl.recv(4096)
            except OSError:
                msg = b""
            if not msg:  # the owner is gone
                return None
            cmd = _command(msg)
            if cmd in ("term", "kill"):
                sig = signal.SIGTERM if cmd == "term" else signal.SIGKILL
                _signal_all(descendants(os.getpid()), sig)
    finally:
        os.close(pidfd)


def _command(msg: bytes) -> str | None:
    try:
        cmd = json.loads(msg).get("cmd")
    except (ValueError, AttributeError):
        return None
    return cmd if isinstance(cmd, str) else None


def _reap(keepers: set[int]) -> None:
    """Reaps finished keepers; any other child is an orphan of a dead keeper: kill its tree."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            break
        keepers.discard(pid)
    me = os.getpid()
    with open(f"/proc/{me}/task/{me}/children", "rb") as f:
        strays = [int(p) for p in f.read().split() if int(p) not in keepers]
    for stray in strays:
        _signal_all([*descendants(stray)[::-1], stray], signal.SIGKILL)


def _serve_keepers(requests: socket.socket) -> None:
    """Keeps `IDLE_KEEPERS` keepers waiting on `requests`; reaps them; kills strays.

    Returns at end of file on the lifeline: the supervisor is done.
    """
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    keepers: set[int] = set()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    took_r, took_w = os.pipe2(os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    idle = 0
    try:
        while True:
            while idle < IDLE_KEEPERS:
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (wake_r, wake_w, took_r):
                        os.close(fd)
                    _idle_keeper(requests, took_w)
                keepers.add(pid)
                idle += 1
            try:
                ready, _, _ = select.select([took_r, wake_r, LIFELINE_FD], [], [])
            except InterruptedError:
                continue
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                _reap(keepers)
            if took_r in ready:
                idle -= len(os.read(took_r, 64))
            if LIFELINE_FD in ready and not os.read(LIFELINE_FD, 64):
                return
    finally:
        kill_tree()


# --------------------------------------------------------------------------- pidns mode


class _Broken(Exception):
    """This process could not restore its own state; it must not spawn again."""


def _signal_host(pid: int, sig: int) -> None:
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


def _host_pid(pidfd: int) -> int:
    """The host pid of the process behind `pidfd` (/proc, the host's, says it in fdinfo)."""
    fd = os.open(f"/proc/self/fdinfo/{pidfd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        info = os.read(fd, 4096)
    finally:
        os.close(fd)
    for line in info.splitlines():
        if line.startswith(b"Pid:"):
            return int(line[4:])
    raise OSError(errno.ESRCH, "no Pid in pidfd fdinfo")


def _sigterm_disposition(pid: int) -> str:
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


#: Margins that keep a borrowed limit from biting this process while it is in force.
_CPU_MARGIN_S = 1
_MEMORY_MARGIN = 64 << 20
_STACK_MARGIN = 1 << 20
#: Limits this process can carry for the few hundred microseconds of a spawn whatever
#: their value: it writes no regular file, opens no fd, takes no lock, mlocks nothing then.
_HARMLESS = frozenset(
    getattr(resource, n)
    for n in (
        "RLIMIT_FSIZE",
        "RLIMIT_NOFILE",
        "RLIMIT_CORE",
        "RLIMIT_LOCKS",
        "RLIMIT_MEMLOCK",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
        "RLIMIT_SIGPENDING",
        "RLIMIT_RSS",
    )
    if hasattr(resource, n)
)


def _own_usage() -> dict[bytes, int]:
    found: dict[bytes, int] = {}
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith((b"VmSize:", b"VmData:", b"VmStk:")):
                found[line.split(b":")[0]] = int(line.split()[1]) * 1024
    return found


_CAP_SYS_RESOURCE = 24


def _has_capability(cap: int) -> bool:
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"CapEff:"):
                return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def _full_uid_map() -> bool:
    """Whether this process's uids are the host's (no user namespace): root is then exempt."""
    try:
        with open("/proc/self/uid_map", "rb") as f:
            return f.read().split() == [b"0", b"0", b"4294967295"]
    except OSError:
        return False


def _borrowable(limits: list[tuple[int, int, int]], root: bool, raise_hard: bool) -> bool:
    """Whether every limit can be set on this process for a spawn, without hurting it, and
    put back after (a lowered hard limit comes back only with CAP_SYS_RESOURCE)."""
    usage: dict[bytes, int] | None = None
    for number, soft, hard in limits:
        if not raise_hard and hard != resource.getrlimit(number)[1]:
            return False
        if number in _HARMLESS or soft == resource.RLIM_INFINITY:
            continue
        if number == resource.RLIMIT_NPROC:
            if root:  # never enforced on the real root user's forks
                continue
            return False
        if number == resource.RLIMIT_CPU:
            own = resource.getrusage(resource.RUSAGE_SELF)
            if soft >= own.ru_utime + own.ru_stime + _CPU_MARGIN_S:
                continue
            return False
        usage = usage or _own_usage()
        floor = {
            resource.RLIMIT_AS: usage.get(b"VmSize", 0) + _MEMORY_MARGIN,
            resource.RLIMIT_DATA: usage.get(b"VmData", 0) + _MEMORY_MARGIN,
            resource.RLIMIT_STACK: usage.get(b"VmStk", 0) + _STACK_MARGIN,
        }.get(number)
        if floor is None or soft < floor:
            return False
    return True


@contextlib.contextmanager
def _borrowed(req: _Request) -> Iterator[None]:
    """Sets the request's limits on this process for the block, then puts its own back."""
    saved = [(number, resource.getrlimit(number)) for number, _, _ in req.limits]
    try:
        req.setrlimits()
        yield
    finally:
        for number, old in reversed(saved):
            try:
                resource.setrlimit(number, old)
            except (OSError, ValueError) as exc:
                raise _Broken(f"cannot restore resource limit {number}") from exc


def _fork_exec(req: _Request, program: str) -> int:
    """Starts the child by fork: for limits that cannot be borrowed, set in the fork.

    The forked child says why it could not exec on a close-on-exec pipe; end of file on it
    means the exec happened.
    """
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        why = f"cannot start {program!r}"
        try:
            os.setsid()
            for sig in _DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for moved, target in req.pairs:
                os.dup2(moved, target)
            req.setrlimits()
            os.execve(program, req.argv, req.env)
        except StartError as exc:
            why = str(exc)
        except OSError as exc:
            why = str(_start_failed(program, exc))
        finally:
            os.write(err_w, why.encode())
            os._exit(127)
    os.close(err_w)
    try:
        failed = _read_all(err_r)
    finally:
        os.close(err_r)
    if failed:
        os.waitpid(pid, 0)
        raise StartError(failed.decode(errors="replace"))
    return pid


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


class _Tree:
    """One child in pidns mode: PID 1 of its own namespace, so its tree is that namespace."""

    __slots__ = ("ctrl", "host", "pid", "pidfd")

    def __init__(self, pid: int, pidfd: int, host: int, ctrl: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.host = host
        self.ctrl: socket.socket | None = ctrl

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, sig)

    def terminate(self) -> None:
        """SIGTERM as if this init were an ordinary process (see the module docstring)."""
        for pid in descendants(self.host):
            _signal_host(pid, signal.SIGTERM)
        how = _sigterm_disposition(self.host)
        if how != "ignored":
            self.signal(signal.SIGTERM if how == "caught" else signal.SIGKILL)


class _PidNsSpawner:
    """The pidns-mode loop: one epoll over requests, the lifeline, pidfds and control sockets."""

    def __init__(self, requests: socket.socket) -> None:
        self.requests = requests
        self.home = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.root = os.getuid() == 0 and _full_uid_map()
        self.raise_hard = _has_capability(_CAP_SYS_RESOURCE)
        self.epoll = select.epoll()
        self.trees: dict[int, _Tree] = {}  # by pidfd and by control socket fd
        requests.setblocking(False)
        self.epoll.register(requests.fileno(), select.EPOLLIN)
        self.epoll.register(LIFELINE_FD, select.EPOLLIN)
        os.chdir("/")  # keep no directory busy
        self.armed = False
        self._arm(quietly=True)

    def serve(self) -> None:
        """Returns at end of file on the lifeline, having killed and reaped every tree."""
        try:
            while True:
                try:
                    events = self.epoll.poll()
                except InterruptedError:
                    continue
                for fd, _ in events:
                    if fd == self.requests.fileno():
                        self._accept()
                    elif fd == LIFELINE_FD:
                        if not os.read(LIFELINE_FD, 64):
                            return
                    elif (tree := self.trees.get(fd)) is not None:
                        if fd == tree.pidfd:
                            self._reap(tree)
                        else:
                            self._obey(tree)
        finally:
            for tree in set(self.trees.values()):
                tree.signal(signal.SIGKILL)
            for tree in set(self.trees.values()):
                os.waitpid(tree.pid, 0)

    def _accept(self) -> None:
        while True:
            try:
                msg, fds = recv_request(self.requests)
            except (BlockingIOError, InterruptedError):
                return
            if not msg:  # the supervisor closed its end; the lifeline says when to go
                self.epoll.unregister(self.requests.fileno())
                return
            if fds:
                self._start(msg, socket.socket(fileno=fds[0]), fds[1:])

    def _start(self, msg: bytes, ctrl: socket.socket, fds: list[int]) -> None:
        try:
            req = _Request(msg, fds)
            try:
                pid = self._spawn(req)
            finally:
                req.close()
        except StartError as exc:
            _send(ctrl, {"event": "error", "message": str(exc)})
            ctrl.close()
            self._arm(quietly=True)
            return
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # out of fds: do not keep what cannot be watched
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            _send(ctrl, {"event": "error", "message": f"cannot watch the child: {exc.strerror}"})
            ctrl.close()
            return
        tree = _Tree(pid, pidfd, _host_pid(pidfd), ctrl)
        with contextlib.suppress(OSError):
            ctrl.send(b'{"event": "started", "pid": %d, "keeper": null}' % tree.host)
        self.trees[pidfd] = self.trees[ctrl.fileno()] = tree
        self.epoll.register(pidfd, select.EPOLLIN)
        self.epoll.register(ctrl.fileno(), select.EPOLLIN)
        self._arm(quietly=True)  # for the next request, while this child runs

    def _spawn(self, req: _Request) -> int:
        req.chdir()
        try:
            program = _resolve(req.argv[0], req.env.get("PATH", os.defpath))
            self._arm()
            try:
                if not req.limits:
                    return req.posix_spawn(program)
                if _borrowable(req.limits, self.root, self.raise_hard):
                    with _borrowed(req):
                        return req.posix_spawn(program)
                return _fork_exec(req, program)
            except OSError as exc:
                raise _start_failed(program, exc) from exc
            finally:
                self._disarm()  # a namespace whose init came and went takes no process
        finally:
            os.chdir("/")

    def _arm(self, *, quietly: bool = False) -> None:
        """Makes the next process created here PID 1 of a fresh PID namespace. Done ahead of
        the request that needs it, so that `unshare` is not on its way."""
        if self.armed:
            return
        if _libc.unshare(CLONE_NEWPID) == 0:
            self.armed = True
        elif not quietly:
            err = ctypes.get_errno()
            raise StartError(f"cannot create a PID namespace: {os.strerror(err)}")

    def _disarm(self) -> None:
        if self.armed:
            if _libc.setns(self.home, CLONE_NEWPID) != 0:
                raise _Broken("cannot return to the spawner's PID namespace")
            self.armed = False

    def _obey(self, tree: _Tree) -> None:
        assert tree.ctrl is not None
        try:
            msg = tree.ctrl.recv(4096, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            msg = b""
        if not msg:  # the owner is gone: kill, reap without a report
            tree.signal(signal.SIGKILL)
            self._forget_ctrl(tree)
            return
        cmd = _command(msg)
        if cmd == "term":
            tree.terminate()
        elif cmd == "kill":
            tree.signal(signal.SIGKILL)

    def _reap(self, tree: _Tree) -> None:
        pid, status, usage = os.wait4(tree.pid, os.WNOHANG)
        if pid == 0:
            return
        # The init is reaped only after everything else in its namespace is gone.
        if tree.ctrl is not None:
            _send(tree.ctrl, _exit_report(status, usage))
            self._forget_ctrl(tree)
        self.epoll.unregister(tree.pidfd)
        del self.trees[tree.pidfd]
        os.close(tree.pidfd)

    def _forget_ctrl(self, tree: _Tree) -> None:
        assert tree.ctrl is not None
        fd = tree.ctrl.fileno()
        self.epoll.unregister(fd)
        del self.trees[fd]
        tree.ctrl.close()
        tree.ctrl = None


def main() -> None:
    parent, request_fd = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "keeper"
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # The owner died before the line above took hold (as PID 1 of a namespace our parent is
    # invisible, getppid() is 0: the lifeline's end of file tells instead).
    if mode == "keeper" and os.getppid() != parent:
        sys.exit(1)
    requests = socket.socket(fileno=request_fd)
    requests.set_inheritable(False)
    if mode == "pidns":
        _PidNsSpawner(requests).serve()
    else:
        _serve_keepers(requests)


if __name__ == "__main__":
    main()
