"""Keeper mode: one pre-forked subreaper process per child (see `spawner.py`).

Standard library only.
"""

from __future__ import annotations

import array
import contextlib
import os
import resource
import select
import signal
import socket

from . import protocol
from .libc import PR_SET_CHILD_SUBREAPER, prctl
from .spawnreq import Request
from .start import BAD_INPUT, StartError, resolve, start_failed
from .trees import descendants

#: Keepers forked ahead of requests (keeper mode). Two cores here: more would only queue.
IDLE_KEEPERS = 2

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
        try:  # (no child left: no descendant either, and no /proc to read)
            if os.waitpid(-1, os.WNOHANG)[0] != 0:
                continue
        except ChildProcessError:
            return
        _signal_all(descendants(me)[::-1], sig)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _prepare(req: Request) -> str:
    """Sets on this keeper what the child must inherit but `posix_spawn` cannot set (cwd,
    rlimits: the keeper is disposable and does nothing after the spawn but wait and kill);
    returns the program to start."""
    if req.outputs is not None:
        req.drop_outputs()
        raise StartError("keeper mode does not collect output (pidns mode only)")
    if req.sandbox is not None:
        raise StartError("sandbox: cannot be enforced here: missing pidns (keeper mode)")
    req.chdir()
    req.setrlimits()
    return resolve(req.argv[0], req.env.get("PATH", os.defpath))


def _keeper(msg: bytes, ctrl: socket.socket, fds: list[int], took: int) -> None:
    """One child's keeper: a subreaper that starts it, watches it, and kills its whole tree.

    The request is checked and this keeper readied first; "accepted" goes out just before
    the spawn (a keeper that dies before it never started the child: its request may be
    sent again), and the spawner hears on `took` that this keeper is busy only once the
    child runs, so that the next keeper is forked while the child runs rather than while
    this one readies it. Never returns; exits once the tree is gone and the exit is
    reported, or once it said why the child could not start.
    """
    try:
        req = Request(msg, fds)
        try:
            program = _prepare(req)
            protocol.accept(ctrl)
            try:
                pid = req.posix_spawn(program)
            except OSError as exc:
                raise start_failed(program, exc) from exc
        finally:
            req.close()
    except (StartError, *BAD_INPUT) as exc:
        _busy(took)
        protocol.fail(ctrl, str(exc) if isinstance(exc, StartError) else f"cannot start: {exc}")
        os._exit(0)
    protocol.send_started(ctrl, pid, keeper=os.getpid())
    _busy(took)
    status = _watch(pid, ctrl)
    kill_tree()
    if status is not None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        protocol.send(ctrl, protocol.exit_report(status, usage))
    os._exit(0)


def _busy(took: int) -> None:
    os.write(took, b"k")
    os.close(took)


def _idle_keeper(requests: socket.socket, took: int) -> None:
    """A pre-forked keeper: waits for one request on the shared socket, then keeps it.

    Forking is the slow part of a spawn in keeper mode, so it happens ahead of time; the
    kernel hands each request to exactly one waiting keeper. A message that brings no
    control socket is dropped (its fds closed) and the keeper waits on. Never returns.
    """
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        if not select.select([requests], [], [], 0)[0]:
            _rehearse()
        while True:
            try:
                got = protocol.recv_request(requests)
            except InterruptedError:
                continue
            if got is None:  # the supervisor closed its end
                os._exit(0)
            msg, fds = got
            if fds and (ctrl := protocol.control(fds)) is not None:
                break
        requests.close()
        _keeper(msg, ctrl, fds[1:], took)
    finally:
        os._exit(1)


#: A request like the supervisor's, for `_rehearse`: no fds, nothing to start.
_REHEARSAL = (
    b'{"argv": ["/bin/true"], "cwd": "/", "env": {"PATH": "/usr/bin:/bin"},'
    b' "rlimits": [["RLIMIT_NOFILE", 1024, 1024]], "fds": [], "sandbox": null}'
)


def _rehearse() -> None:
    """What a request makes this keeper do in Python, done while it waits: a fork writes
    to every page its Python touches (reference counts), and each such write copies the page
    from the spawner; done now, those copies are off the request's way. A request like the
    supervisor's is taken off a socket pair of this keeper's own (with an fd, as a control
    socket comes), checked, and answered on it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        rights = array.array("i", [theirs.fileno()]).tobytes()
        ours.sendmsg([_REHEARSAL], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        got = protocol.recv_request(theirs)
        assert got is not None
        msg, fds = got
        ctrl = protocol.control(fds)
        assert ctrl is not None
        with ctrl:
            Request(msg, fds[1:]).close()
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            protocol.send(ctrl, {"event": "started", "pid": 0, "keeper": 0})
            protocol.send(ctrl, protocol.exit_report(0, usage))
    finally:
        ours.close()
        theirs.close()


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
            cmd = protocol.command(msg)
            if cmd in (protocol.TERM, protocol.KILL):
                sig = signal.SIGTERM if cmd == protocol.TERM else signal.SIGKILL
                _signal_all(descendants(os.getpid()), sig)
    finally:
        os.close(pidfd)


def _reap(keepers: set[int]) -> None:
    """Reaps finished keepers; any other child is an orphan of a dead keeper: kill its tree.

    A keeper that exits 0 has reaped its whole tree (`kill_tree`), so orphans are looked for
    (in /proc) only after a keeper died otherwise, or an orphan itself was reaped here.
    """
    orphaned = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            break
        orphaned = orphaned or status != 0 or pid not in keepers
        keepers.discard(pid)
    if not orphaned:
        return
    me = os.getpid()
    with open(f"/proc/{me}/task/{me}/children", "rb") as f:
        strays = [int(p) for p in f.read().split() if int(p) not in keepers]
    for stray in strays:
        _signal_all([*descendants(stray)[::-1], stray], signal.SIGKILL)


def serve_keepers(requests: socket.socket) -> None:
    """Keeps `IDLE_KEEPERS` keepers waiting on `requests`; reaps them; kills strays.

    Returns at end of file on the lifeline: the supervisor is done.
    """
    prctl(PR_SET_CHILD_SUBREAPER, 1)
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
                ready, _, _ = select.select([took_r, wake_r, protocol.LIFELINE_FD], [], [])
            except InterruptedError:
                continue
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                _reap(keepers)
            if took_r in ready:
                idle -= len(os.read(took_r, 64))
            if protocol.LIFELINE_FD in ready and not os.read(protocol.LIFELINE_FD, 64):
                return
    finally:
        kill_tree()
