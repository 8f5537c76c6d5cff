"""Keeper mode: pre-forked subreaper processes, each keeping one child at a time (see
`spawner.py`).

Standard library only.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
import select
import signal
import socket
from collections.abc import Callable

from . import protocol
from .libc import PR_SET_CHILD_SUBREAPER, prctl
from .spawnreq import Request
from .start import BAD_INPUT, StartError, resolve, start_failed
from .trees import descendants

#: Keepers waiting for requests, at most (keeper mode); more are forked when only one is left
#: waiting. Two cores here: more would only queue.
IDLE_KEEPERS = 3
#: A keeper that has used this much CPU itself (seconds) exits once its child is done, rather
#: than wait for another: the CPU limit a request sets applies to the keeper too until then.
KEEPER_CPU = 0.5

# --------------------------------------------------------------------------- keeper mode


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


class Usage:
    """What the processes a keeper reaped used, as `RUSAGE_CHILDREN` says for a process that
    reaped nothing else (a keeper keeps one child after another): CPU summed, the largest
    resident size (each reaped process's own figures include what it reaped)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.max_rss = 0

    def add(self, usage: resource.struct_rusage) -> None:
        self.cpu += usage.ru_utime + usage.ru_stime
        self.max_rss = max(self.max_rss, usage.ru_maxrss)

    def rusage(self) -> resource.struct_rusage:
        return resource.struct_rusage((self.cpu, 0.0, self.max_rss, *[0] * 13))


def kill_tree(sig: int = signal.SIGKILL, usage: Usage | None = None) -> None:
    """SIGKILL every descendant of this process and reap them all; returns when none is left.
    What the reaped used is added to `usage`.

    Children before parents: if this process dies mid-sweep (the spawner gets SIGKILL when
    the supervisor dies, just after its lifeline said so), the keepers are still alive and
    finish their own trees, rather than leaving them orphaned. A process forked while the
    sweep runs has a live subreaper above it (a keeper, or this process), and the next pass
    finds it.
    """
    me = os.getpid()
    flags = os.WNOHANG  # (no child left: no descendant either, and no /proc to read)
    while True:
        try:
            pid, _, used = os.wait4(-1, flags)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if usage is not None and pid != 0:
            usage.add(used)
        if pid == 0:
            _signal_all(descendants(me)[::-1], sig)
        flags = 0 if pid == 0 else os.WNOHANG


def _prepare(req: Request) -> str:
    """Sets on this keeper what the child must inherit but `posix_spawn` cannot set (cwd,
    rlimits; `_restored` undoes it once the tree is gone); returns the program to start."""
    if req.outputs is not None:
        req.drop_outputs()
        raise StartError("keeper mode does not collect output (pidns mode only)")
    if req.sandbox is not None:
        raise StartError("sandbox: cannot be enforced here: missing pidns (keeper mode)")
    req.chdir()
    req.setrlimits()
    return resolve(req.argv[0], req.env.get("PATH", os.defpath))


def _keep(
    msg: bytes, ctrl: socket.socket, fds: list[int], home: int, done: Callable[[], None]
) -> bool:
    """Keeps one child: starts it, watches it, kills its whole tree and reports its exit (or
    says why it could not start). Returns whether this keeper is as it was before, so it
    may keep another (`_restored`).

    The request is checked and this keeper readied first; "accepted" goes out just before
    the spawn: a keeper that dies before it never started the child, whose request may then
    be sent again. `done` is called once the tree is reaped, before the owner hears of it.
    """
    saved: list[tuple[int, tuple[int, int]]] = []
    try:
        try:
            req = Request(msg, fds)
            try:
                saved = [(number, resource.getrlimit(number)) for number, _, _ in req.limits]
                program = _prepare(req)
                protocol.accept(ctrl)
                try:
                    pid = req.posix_spawn(program)
                except OSError as exc:
                    raise start_failed(program, exc, req) from exc
            finally:
                req.close()
        except (StartError, *BAD_INPUT) as exc:
            why = str(exc) if isinstance(exc, StartError) else f"cannot start: {exc}"
            done()
            protocol.fail(ctrl, why)
            return _restored(saved, home)
        protocol.send_started(ctrl, pid, keeper=os.getpid())
        usage = Usage()
        status = _watch(pid, ctrl, usage)
        kill_tree(usage=usage)
        done()
        if status is not None:
            protocol.send(ctrl, protocol.exit_report(status, usage.rusage()))
    finally:
        ctrl.close()
    return _restored(saved, home)


def _restored(saved: list[tuple[int, tuple[int, int]]], home: int) -> bool:
    """Puts back this keeper's working directory (`home`) and the limits it set (`saved`);
    whether it could, and has used little enough CPU to keep another child (`KEEPER_CPU`).
    (A hard limit lowered stays lowered for a keeper that is not root.)"""
    os.fchdir(home)
    try:
        for number, limits in saved:
            resource.setrlimit(number, limits)
    except (OSError, ValueError):
        return False
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime < KEEPER_CPU


class Places:
    """Which keepers wait, known to the spawner and its keepers without a message: a byte per
    keeper (its slot) in memory they share, saying whether it waits, keeps a child, or is
    done with one and about to wait again (counted as waiting: the owner sends its next
    request as soon as it hears of the exit), or is no keeper (gone, reaped). A keeper that
    takes a request wakes the spawner only when that leaves one keeper waiting (or none),
    and the spawner then forks up to `IDLE_KEEPERS`; a keeper done with its child waits
    again if fewer than `IDLE_KEEPERS` others do, else exits (two finishing at once may both
    stay: one more waits, until it next finishes). Back to back, the waiting keepers take
    the requests in turn and nothing is forked. A keeper that dies is no longer counted once
    the spawner has reaped it."""

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, _SLOTS + 4)
        self._slots: dict[int, int] = {}
        self._free: list[int] = []

    def waiting(self) -> int:
        top = self._map[: int.from_bytes(self._map[_SLOTS:], "little")]
        return top.count(_WAITING) + top.count(_DONE)

    def busy(self, slot: int) -> bool:
        """Keeper `slot` took a request; whether the spawner should fork more now."""
        self._map[slot] = _BUSY
        return self.waiting() <= 1

    def done(self, slot: int) -> None:
        """Keeper `slot` has reaped its child's tree."""
        self._map[slot] = _DONE

    def back(self, slot: int) -> bool:
        """Keeper `slot`, done, may put itself back: whether it waits again."""
        if self.waiting() - 1 >= IDLE_KEEPERS:
            self._map[slot] = _BUSY  # (on its way out: no longer counted)
            return False
        self._map[slot] = _WAITING
        return True

    def slot(self) -> int:
        """The spawner's: a slot for the keeper it forks next, counted as waiting."""
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._slots)
            self._map[_SLOTS:] = (slot + 1).to_bytes(4, "little")
        self._map[slot] = _WAITING
        return slot

    def forked(self, pid: int, slot: int) -> None:
        self._slots[pid] = slot

    def gone(self, pid: int) -> None:
        """Keeper `pid` was reaped."""
        slot = self._slots.pop(pid)
        self._map[slot] = _GONE
        self._free.append(slot)


#: Keepers alive at once, at most: one byte each in `Places`' shared memory (pages never
#: touched cost nothing).
_SLOTS = 1 << 20
_GONE, _WAITING, _BUSY, _DONE = 0, 1, 2, 3


def _take(requests: socket.socket) -> tuple[bytes, socket.socket, list[int]] | None:
    """The next request off the shared socket: its message, control socket and the child's
    fds; None at end of file. A message that brings no control socket is dropped (its fds
    closed) and the wait goes on."""
    while True:
        try:
            got = protocol.recv_request(requests, shared=True)
        except InterruptedError:
            continue
        if got is None:  # the supervisor closed its end
            return None
        msg, fds = got
        if fds and (ctrl := protocol.control(fds)) is not None:
            return msg, ctrl, fds[1:]


def _idle_keeper(requests: socket.socket, took: int, places: Places, slot: int) -> None:
    """A pre-forked keeper: waits for a request on the shared socket, keeps its child, and
    waits again while it may (`Places`, `_restored`). Never returns.

    Forking is the slow part of a spawn in keeper mode, so it happens ahead of time, and is
    skipped altogether where a keeper can keep another child; the kernel hands each request
    to exactly one waiting keeper.
    """
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        home = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        while (taken := _take(requests)) is not None:
            if places.busy(slot):
                os.write(took, b"k")
            if not (_keep(*taken, home, lambda: places.done(slot)) and places.back(slot)):
                break
        os._exit(0)
    finally:
        os._exit(1)


def _watch(pid: int, ctrl: socket.socket, usage: Usage) -> int | None:
    """Waits for the child to exit, obeying commands; returns its wait status (None: lost),
    having added what it used to `usage`."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([pidfd, ctrl.fileno()], [], [])
            if pidfd in ready:
                _, status, used = os.wait4(pid, 0)
                usage.add(used)
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


def _reap(keepers: set[int], places: Places) -> None:
    """Reaps finished keepers (`Places.gone`); any other child is an orphan of a dead keeper:
    kill its tree.

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
        if pid in keepers:
            keepers.discard(pid)
            places.gone(pid)
    if orphaned:
        me = os.getpid()
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            strays = [int(p) for p in f.read().split() if int(p) not in keepers]
        for stray in strays:
            _signal_all([*descendants(stray)[::-1], stray], signal.SIGKILL)


def serve_keepers(requests: socket.socket) -> None:
    """Keeps up to `IDLE_KEEPERS` keepers waiting on `requests` (`Places`); reaps them; kills
    strays.

    Returns at end of file on the lifeline: the supervisor is done.
    """
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    keepers: set[int] = set()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    took_r, took_w = os.pipe2(os.O_CLOEXEC)
    places = Places()
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    forks = IDLE_KEEPERS
    try:
        while True:
            for _ in range(forks):
                slot = places.slot()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (wake_r, wake_w, took_r):
                        os.close(fd)
                    _idle_keeper(requests, took_w, places, slot)
                keepers.add(pid)
                places.forked(pid, slot)
            forks = 0
            try:
                ready, _, _ = select.select([took_r, wake_r, protocol.LIFELINE_FD], [], [])
            except InterruptedError:
                continue
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                _reap(keepers, places)
            if took_r in ready:
                os.read(took_r, 512)
            # Filled when one keeper is left waiting (or none).
            waiting = places.waiting()
            forks = IDLE_KEEPERS - waiting if waiting <= 1 else 0
            if protocol.LIFELINE_FD in ready and not os.read(protocol.LIFELINE_FD, 64):
                return
    finally:
        kill_tree()
