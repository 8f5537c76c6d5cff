"""A child's process tree, found and signalled through /proc, and what pidns mode keeps of it.

Standard library only. Pids here are host pids (/proc is the host's, whatever PID namespace
this process is in); signals go through `/proc/PID` directory fds and pidfds, which need no
translation between namespaces.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import resource
import signal
import socket
import time
from typing import TYPE_CHECKING

from . import strays
from .protocol import KILL, TERM, command, send_started
from .start import StartError

if TYPE_CHECKING:
    from .collect import Output
    from .memcg import Cgroup
    from .reapers import Reaper
    from .spawnreq import Collect


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


def alone(reaper: Reaper) -> bool:
    """Whether nothing but `reaper` is left in its namespace, its child reaped: every other
    process there descends from it then (an orphan is reparented to the namespace's init
    before its parent can be reaped, and those of the reaper, which ignores SIGCHLD, are
    released as they exit), so it has no child. False where /proc cannot say."""
    try:
        host = strays.host_of(reaper)
        with open(f"/proc/{host}/task/{host}/children", "rb") as f:
            if f.read(1):
                return False
        return living(reaper.pidfd)
    except OSError:
        return False


def living(pidfd: int) -> bool:
    """Whether the child behind `pidfd` has not exited (a zombie's /proc says no children)."""
    return os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


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


#: Per-child uids: `UID_BASE + (host pid of this spawner mod 2**16) * UID_SLOTS + slot`, so
#: spawners running side by side use disjoint ranges, and a slot is reused only after its
#: tree is gone.
UID_BASE = 0x50000000
UID_SLOTS = 1024


class UidPool:
    """The per-child uids of this spawner's sandboxed trees, a slot each (see `UID_BASE`)."""

    def __init__(self) -> None:
        host = int(os.readlink("/proc/self"))  # /proc is the host's: its pid for this process
        self.base = UID_BASE + (host % (1 << 16)) * UID_SLOTS
        self.free = list(range(UID_SLOTS - 1, -1, -1))

    def take(self) -> int:
        if not self.free:
            raise StartError(f"sandbox: more than {UID_SLOTS} sandboxed children at once")
        return self.base + self.free.pop()

    def give(self, uid: int) -> None:
        self.free.append(uid - self.base)


def host_pid(pidfd: int) -> int:
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


class Tree:
    """One child in pidns mode and its own PID namespace, its tree: the child is PID 2 there,
    after its `reaper` (`reapers.py`), or PID 1 (a warm fork, or where no reaper starts)."""

    __slots__ = (
        "announce_at",
        "cgroup",
        "collect",
        "ctrl",
        "exited",
        "host",
        "net",
        "outputs",
        "overflow",
        "pid",
        "pidfd",
        "reaper",
        "reusable",
        "scratch",
        "strays",
        "uid",
    )

    def __init__(self, pid: int, pidfd: int, host: int, ctrl: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd  # (-1 once the child is reaped)
        self.host = host
        #: The init of its namespace; and the child's wait status and usage once reaped.
        self.reaper: Reaper | None = None
        #: Whether its reaper may serve the next unsandboxed child once the child is gone and
        #: nothing else is left in the namespace (`PidNsSpawner._keep_reaper`); its owner is
        #: then never given the reaper's pidfd (`given`), so none but this process can end it.
        self.reusable = False
        self.exited: tuple[int, resource.struct_rusage] | None = None
        #: Processes of its namespace whose parent is this process, not one there: ones the
        #: child made its siblings (`strays.py`), by pidfd (their host pids), to be reaped.
        self.strays: dict[int, int] = {}
        self.ctrl: socket.socket | None = ctrl
        #: An `egress` child's network namespace and proxy socket (`loopback.Spare`).
        self.net: tuple[int, int] | None = None
        #: A jailed child's uid slot, and its scratch tmpfs to copy back (fd, host path).
        self.uid: int | None = None
        self.scratch: tuple[int, str] | None = None
        #: A `"collect"` request's caps, its stdout and stderr (`collect.Output`), and whether
        #: stdout went over its cap.
        self.collect: Collect | None = None
        self.outputs: list[Output] = []
        self.overflow = False
        #: The memory cgroup it runs in (`memcg.py`), or None.
        self.cgroup: Cgroup | None = None
        #: When its held "started" is due (`Held`); 0: said, or never held.
        self.announce_at = 0.0

    def pump(self, fd: int, *, drain: bool = False) -> bool:
        """Moves what stdout or stderr `fd` holds to its memfd (all of it, `drain`: the tree
        is gone); at end of file, and at stdout past its cap (the tree killed), marks the
        pipe done and returns True: the caller forgets and closes `fd`."""
        assert self.collect is not None
        output = next(o for o in self.outputs if o.pipe == fd)
        cap = self.collect.stdout
        while True:
            try:
                moved = output.splice()
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                moved = 0
            over = output is self.outputs[0] and output.count > cap
            if moved and not over:
                if drain:
                    continue
                return False
            if over:
                self.overflow = True
                self.signal(signal.SIGKILL)
                output.count = cap
                os.ftruncate(output.memfd, cap)
            output.pipe = -1
            return True

    def obey(self) -> bool:
        """Carries out what the owner sent on the control socket; True when the owner is
        gone (the tree is then killed, to be reaped without a report)."""
        assert self.ctrl is not None
        announce(self)  # (held: the owner acting on it gets its pidfd first)
        try:
            msg = self.ctrl.recv(4096, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            msg = b""
        if not msg:
            self.signal(signal.SIGKILL)
            return True
        cmd = command(msg)
        if cmd == TERM:
            self.terminate()
        elif cmd == KILL:
            self.signal(signal.SIGKILL)
        return False

    @property
    def handles(self) -> tuple[int, ...]:
        """The pidfds that SIGKILL, in this order, kills the whole tree with: the child's (at
        once, as it is: the kernel's SIGKILL of the rest of the namespace comes a moment
        later, and the child would first see its output closed) and its reaper's."""
        alive = (self.pidfd,) if self.pidfd >= 0 else ()
        return alive if self.reaper is None else (*alive, self.reaper.pidfd)

    @property
    def given(self) -> tuple[int, ...]:
        """The pidfds its owner gets with "started": `handles`, but for a reusable tree the
        child's alone (killing it, the owner leaves the rest to this process, which kills the
        reaper when the child left anything behind, and reports once all of it is gone)."""
        return (self.pidfd,) if self.reusable and self.pidfd >= 0 else self.handles

    def signal(self, sig: int) -> None:
        for pidfd in self.handles:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, sig)

    def terminate(self) -> None:
        """SIGTERM to every process of the tree: the child, its descendants and the orphans
        its reaper took in; as if the child were an ordinary process where it is the init
        (`terminate_init`)."""
        if self.reaper is None:
            terminate_init(self.host, self.pidfd)
            return
        if self.pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGTERM)
            for pid in descendants(self.host):
                signal_host(pid, signal.SIGTERM)
        with contextlib.suppress(OSError):
            for pid in descendants(host_pid(self.reaper.pidfd)):
                signal_host(pid, signal.SIGTERM)

    def wait(self) -> None:
        """Reaps what is left of a tree SIGKILLed (the spawner is closing)."""
        if self.pidfd >= 0:
            os.waitpid(self.pid, 0)
        if self.reaper is not None:
            with contextlib.suppress(OSError):  # (the reaper waits for them: `strays.py`)
                host = strays.host_of(self.reaper)
                for fd in self.strays:
                    os.close(fd)
                while found := strays.siblings(host, ()):
                    for pid in found:
                        strays.reap(pid)
            os.waitpid(self.reaper.pid, 0)


#: How long a collected child runs before its owner hears "started" (`Held`).
ANNOUNCE_AFTER_S = 1.0


class Held:
    """The "started" reports held back: a `"collect"` request's owner only waits for the exit
    report, so a child that ends within `ANNOUNCE_AFTER_S` never has one (its exit report
    says its pid): one message and one wake-up of its owner, not two. One that runs longer
    is announced then, with its pidfd, as any other; at once when its owner sends a command
    first (it is acting on the child: a timeout)."""

    def __init__(self) -> None:
        #: In the order they are due (each is held as long); taken from either end at once.
        self.trees: collections.OrderedDict[Tree, None] = collections.OrderedDict()

    def started(self, tree: Tree, *, held: bool) -> None:
        """Says "started" for `tree` now, or, `held`, when it is due."""
        if not held:
            assert tree.ctrl is not None
            send_started(tree.ctrl, tree.host, pidfds=tree.given)
            return
        tree.announce_at = time.monotonic() + ANNOUNCE_AFTER_S
        self.trees[tree] = None

    def forget(self, tree: Tree) -> None:
        """`tree` is reaped: nothing to announce."""
        self.trees.pop(tree, None)

    def wait(self, wait: float) -> float:
        """An epoll timeout (seconds, -1: none) that is not past the next one due."""
        if not self.trees:
            return wait
        due = max(0.0, next(iter(self.trees)).announce_at - time.monotonic())
        return due if wait < 0 else min(wait, due)

    def announce_due(self) -> None:
        now = time.monotonic()
        while self.trees and next(iter(self.trees)).announce_at <= now:
            announce(self.trees.popitem(last=False)[0])


def announce(tree: Tree) -> None:
    """Says "started" for `tree` if it was held and its owner is still there."""
    if tree.announce_at and tree.ctrl is not None:
        send_started(tree.ctrl, tree.host, pidfds=tree.given)
    tree.announce_at = 0.0
