"""The resident spawner: the one place hook and script processes are started from.

Standard library only; started by the supervisor as `python -I -S spawner.py PARENT_PID FD`, FD
being its request socket. Never imports the supervisor or trio.

Why a resident process rather than spawning from the supervisor:

* Whole-tree kill needs a subreaper per child: a grandchild that calls `setsid()` or double-forks
  leaves the process group, and once its parent exits it is reparented to the nearest subreaper.
  For each child this spawner forks a *keeper*, a subreaper whose only job is that one child:
  everything the child ever starts stays below the keeper, so the keeper can find and kill it.
* `PR_SET_PDEATHSIG` fires when the *thread* that forked exits. The supervisor forks this
  spawner from its main thread, and the spawner is single-threaded, so nothing here is tied
  to a short-lived worker thread.
* The sandbox and the warm module runner plug in here (in the keeper's child) rather than
  around it.

Protocol. Requests arrive on FD, a SOCK_SEQPACKET socket: one JSON object per message with
file descriptors attached (SCM_RIGHTS). The first attached fd is the request's *control*
socket (SOCK_SEQPACKET), the rest are the child's fds, placed at the numbers listed in
`"fds"`. Everything about the child is then said on its control socket, by its keeper:

  keeper → supervisor  {"event": "started", "pid": P, "keeper": K}
                       {"event": "error", "message": "..."}           (could not start)
                       {"event": "exit", "code": C|null, "signal": S|null,
                        "cpuMs": n, "maxRssKb": n}                    (tree gone, all reaped)
  supervisor → keeper  {"cmd": "term"}   SIGTERM to every process of the tree
                       {"cmd": "kill"}   SIGKILL to every process of the tree
                       end of file       the owner is gone: SIGKILL the tree

When the child itself exits, the keeper kills what is left of its tree at once (a background
grandchild holding stdout open would otherwise keep the owner's read waiting), reaps it all,
reports, and exits. If a keeper dies, its orphans come to this spawner (also a subreaper),
which kills them. If the supervisor dies, even by SIGKILL, this spawner gets SIGKILL
(`PR_SET_PDEATHSIG`) and every keeper sees end of file on its control socket.
"""

from __future__ import annotations

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
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MAX_MESSAGE = 256 * 1024
MAX_FDS = 16

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, parents before children, from /proc.

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


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def kill_tree(sig: int = signal.SIGKILL) -> None:
    """SIGKILL every descendant of this process and reap them all; returns when none is left.

    A process forked while the sweep runs is a child of a process being killed; when that
    parent dies it is reparented here (we are a subreaper) and the next pass finds it.
    """
    me = os.getpid()
    while True:
        _signal_all(descendants(me), sig)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _send(ctrl: socket.socket, obj: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        ctrl.send(json.dumps(obj).encode())


def _resolve(argv0: str, path: str) -> str:
    """The program to exec: a name with a slash as given (relative to cwd), else from PATH."""
    if "/" in argv0:
        return argv0
    for d in path.split(":"):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise FileNotFoundError(errno.ENOENT, "not found on PATH", argv0)


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


def _spawn(req: dict[str, Any], fds: list[int]) -> int:
    """Starts the child from this keeper: its own session, fds in place, limits, cwd.

    `posix_spawn` (vfork underneath) costs a fraction of a fork of a Python process. What the
    child must inherit but `posix_spawn` cannot set (cwd, rlimits) is set on this keeper first:
    the keeper is disposable and does nothing after this but wait and kill.
    """
    os.chdir(req["cwd"])
    for name, soft, hard in req.get("rlimits", []):
        resource.setrlimit(getattr(resource, name), (soft, hard))
    targets: list[int] = list(req["fds"])
    floor = max(targets) + 1
    # Every source above every target, so no dup2 clobbers a source still needed.
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    env: dict[str, str] = req["env"]
    program = _resolve(req["argv"][0], env.get("PATH", os.defpath))
    try:
        return os.posix_spawn(
            program,
            req["argv"],
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, m, t) for m, t in zip(moved, targets, strict=True)
            ],
            setsid=True,
            setsigmask=(),
            setsigdef=_DEFAULT_SIGNALS,
        )
    finally:
        for m in moved:
            os.close(m)


def _keeper(req: dict[str, Any], ctrl: socket.socket, fds: list[int]) -> None:
    """One child's keeper: a subreaper that starts it, watches it, and kills its whole tree.

    Never returns; exits once the tree is gone and the exit is reported.
    """
    try:
        pid = _spawn(req, fds)
    except OSError as exc:
        what = exc.filename or req["argv"][0]
        _send(ctrl, {"event": "error", "message": f"{what}: {exc.strerror}"})
        os._exit(0)
    except (KeyError, TypeError, ValueError) as exc:
        _send(ctrl, {"event": "error", "message": f"bad spawn request: {exc!r}"})
        os._exit(0)
    finally:
        for fd in fds:
            os.close(fd)
    _send(ctrl, {"event": "started", "pid": pid, "keeper": os.getpid()})
    status = _watch(pid, ctrl)
    kill_tree()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = os.waitstatus_to_exitcode(status) if status is not None else None
    _send(
        ctrl,
        {
            "event": "exit",
            "code": code if code is not None and code >= 0 else None,
            "signal": -code if code is not None and code < 0 else None,
            "cpuMs": round((usage.ru_utime + usage.ru_stime) * 1000),
            "maxRssKb": usage.ru_maxrss,
        },
    )
    os._exit(0)


def _idle_keeper(requests: socket.socket, took: int) -> None:
    """A pre-forked keeper: waits for one request on the shared socket, then keeps it.

    Forking is the slow part of a spawn on this kind of machine, so it happens ahead of time;
    the kernel hands each request to exactly one waiting keeper. Never returns.
    """
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(
                    requests, MAX_MESSAGE, MAX_FDS, socket.MSG_CMSG_CLOEXEC
                )
            except InterruptedError:
                continue
            if not msg:  # the supervisor closed its end
                os._exit(0)
            if fds:
                break
        requests.close()
        os.write(took, b"k")
        os.close(took)
        ctrl = socket.socket(fileno=fds[0])
        try:
            req = json.loads(msg)
        except ValueError as exc:
            _send(ctrl, {"event": "error", "message": f"bad spawn request: {exc}"})
            os._exit(0)
        _keeper(req, ctrl, fds[1:])
    finally:
        os._exit(1)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _watch(pid: int, ctrl: socket.socket) -> int | None:
    """Waits for the child to exit, obeying commands; returns its wait status (None: lost)."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([pidfd, ctrl], [], [])
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                return status
            try:
                msg = ctrl.recv(4096)
            except OSError:
                msg = b""
            if not msg:  # the owner is gone
                kill_tree()
                return None
            cmd = json.loads(msg).get("cmd")
            if cmd == "term":
                _signal_all(descendants(os.getpid()), signal.SIGTERM)
            elif cmd == "kill":
                _signal_all(descendants(os.getpid()), signal.SIGKILL)
    finally:
        os.close(pidfd)


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
        _signal_all([stray, *descendants(stray)], signal.SIGKILL)


#: The spawner's stdin: a pipe whose end of file means the supervisor is done with it.
LIFELINE_FD = 0
#: Keepers forked ahead of requests. Two cores here: more would only queue.
IDLE_KEEPERS = 2


def _serve(requests: socket.socket) -> None:
    """Keeps `IDLE_KEEPERS` keepers waiting on `requests`; reaps them; kills strays.

    Returns at end of file on the lifeline (stdin): the supervisor is done.
    """
    keepers: set[int] = set()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    took_r, took_w = os.pipe2(os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    idle = 0
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


def main() -> None:
    parent, request_fd = int(sys.argv[1]), int(sys.argv[2])
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the owner died before the line above took hold
        sys.exit(1)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    requests = socket.socket(fileno=request_fd)
    try:
        _serve(requests)
    finally:
        kill_tree()


if __name__ == "__main__":
    main()
