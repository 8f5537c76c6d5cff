"""A sandboxed child tree's memory bound: a memory cgroup of its own where one can be made,
else what bounds it without one (`STATE.why` says why).

Standard library only. `memoryBytes` of a request's plan bounds everything the tree can pin:
private memory, shared anonymous mappings, memfds, SysV and POSIX shared memory, tmpfs.

**cgroup v1** (the memory controller mounted on its own, as on hosts that still boot with
v1): the spawner makes, ahead of each sandboxed child, a cgroup `mcpx-<spawner pid>-<n>`
beside itself in the memory hierarchy (it must be root, or own the directory it lives in);
the request writes `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes` (no swap beyond
it), and the child joins it in its chain before its exec (`chained.Root`), or, where jail
threads are used, the thread (or waiting fork) that starts the child joins it before the
request comes and the child starts in it: nothing the hook runs was ever outside. In v1 the
memory of a process is charged to the cgroup of the process that owns it (the thread group's
leader), so the spawner's own memory stays the spawner's while one of its threads sits in a
child's cgroup. Its OOM notifications (`cgroup.event_control` on `memory.oom_control`) wake the
spawner, which kills the whole tree; the exit report says it went over (`oom_kill` counted,
or a notification seen). The cgroup is removed once the tree is reaped (and the thread that
started it gone). A spawner that died leaves its cgroups; the next one to start removes those
of spawners no longer running, beside it and in its sibling cgroups that nothing runs in.

**Elsewhere** (no v1 memory controller this process may make cgroups in: an ordinary user,
a container): each process gets `RLIMIT_AS` (the supervisor plans it), the scratch tmpfs is
no larger than the bound, the child's own IPC namespace has `shmmax`/`shmall` at the bound,
and `memfd_create` fails with ENOMEM (seccomp): a memfd filled with `write()` is counted by
nothing else. cgroup v2 (`memory.max`) is not used yet: where only v2 is mounted the fallback
applies, and `doctor` says so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time

#: Name prefix of the cgroups made here.
PREFIX = "mcpx-"
#: How long the spawner waits, idle, before it removes finished trees' cgroups; how many may
#: wait while it is busy.
SWEEP_AFTER_S = 0.002
MAX_PENDING = 32
_V1_MOUNT_TYPE = "cgroup"


def _own_v1() -> tuple[str | None, str]:
    """The directory of this process's v1 memory cgroup, or None and why not."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self/cgroup: {exc.strerror}"
    rel = next(
        (
            line.split(":", 2)[2]
            for line in lines
            if line.count(":") >= 2 and "memory" in line.split(":", 2)[1].split(",")
        ),
        None,
    )
    if rel is None:
        v2 = any(line.startswith("0::") for line in lines)
        return None, (
            "no cgroup v1 memory controller (cgroup v2 memory.max is not used yet)"
            if v2
            else "no memory cgroup controller on this system"
        )
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = f.read().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self/mountinfo: {exc.strerror}"
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != _V1_MOUNT_TYPE:
            continue
        if "memory" not in tail[2].split(","):
            continue
        root, point = fields[3], fields[4].replace("\\040", " ")
        if rel != root and not rel.startswith(root.rstrip("/") + "/"):
            continue
        return os.path.join(point, rel[len(root.rstrip("/")) :].lstrip("/")).rstrip("/"), ""
    return None, "the cgroup v1 memory controller is not mounted where this process sees it"


class Hierarchy:
    """Where this spawner makes its children's cgroups (v1): beside itself."""

    version = 1

    def __init__(self, base: str) -> None:
        self.base = base
        #: Cgroups are made and removed relative to this fd of `base`, opened here: a thread
        #: that sits in a read-only mount namespace (an armed `inline.py`) still can.
        self.dir = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._tag = f"{PREFIX}{int(os.readlink('/proc/self'))}-"
        self._made = 0
        #: Cgroups (names in `base`) whose tree is gone but that could not be removed yet (a
        #: thread that started the child still leaving); tried again (`sweep`).
        self.pending: list[str] = []

    def make(self) -> Cgroup:
        """A new, empty cgroup (no limit yet); raises `OSError`."""
        self._made += 1
        return Cgroup(self, f"{self._tag}{self._made}")

    def remove(self, path: str) -> None:
        """Removes a finished tree's cgroup, once the spawner is idle (`sweep`): a removal
        takes a fraction of a millisecond the next request need not wait for."""
        self.pending.append(os.path.basename(path))

    def sweep(self) -> None:
        """Removes the pending cgroups that can be (a thread that started a tree may still be
        leaving its cgroup)."""
        if self.pending:
            self.pending = [p for p in self.pending if not _rmdir(p, self.dir)]

    def overdue(self) -> bool:
        """Whether so many wait that they are removed even while busy."""
        return len(self.pending) > MAX_PENDING

    def finish(self, bound_s: float = 1.0) -> None:
        """At the spawner's end: removes what is pending, waiting (bounded) for the threads
        that started its trees to be gone."""
        deadline = time.monotonic() + bound_s
        self.sweep()
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.002)
            self.sweep()

    def remove_stale(self) -> None:
        """Removes the cgroups of spawners that are no longer running (killed before they
        could remove theirs): those beside this one, and those a spawner started from a
        sibling cgroup made there (a supervisor started from another job, session or
        service of the same parent). An empty one only: the kernel refuses to remove one
        that holds a task. (Whether a sibling still runs something cannot be told from
        here: this spawner's PID namespace sees no other process in its `cgroup.procs`.)"""
        parent = os.path.dirname(self.base)
        places = [self.base]
        if os.path.exists(f"{parent}/tasks"):  # (the hierarchy's root is not left)
            with contextlib.suppress(OSError):
                places += [e.path for e in os.scandir(parent) if e.is_dir() and e.path != self.base]
        for where in places:
            for name in _dead_spawners(where):
                _rmdir(f"{where}/{name}")


def _dead_spawners(base: str) -> list[str]:
    """The cgroups in `base` made by a spawner (`mcpx-<pid>-<n>`) no longer running."""
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            owner = name[len(PREFIX) :].split("-")[0]
            ours = name.startswith(PREFIX) and owner.isascii() and owner.isdigit()
            if ours and not _running(owner):
                found.append(name)
    return found


def _running(pid: str) -> bool:
    """Whether process `pid` runs (a zombie does not: a killed spawner waits as one until
    whoever inherited it reaps it, which an init that is not one may do late)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return state not in ([b"Z"], [b"X"])


def _rmdir(path: str, dir_fd: int | None = None) -> bool:
    try:
        os.rmdir(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError as exc:  # busy: later; anything else: nothing this process can do
        return exc.errno not in (errno.EBUSY, errno.EAGAIN)
    return True


class Cgroup:
    """One child tree's cgroup (v1), made ahead of its request: its files opened relative to
    the hierarchy's fd (an armed thread's tree is read-only after `arm`), its OOM
    notification registered (`event`, an eventfd the spawner polls)."""

    def __init__(self, hierarchy: Hierarchy, name: str) -> None:
        os.mkdir(name, 0o755, dir_fd=hierarchy.dir)
        self.path = f"{hierarchy.base}/{name}"
        self._fds: list[int] = []
        self._dir = -1
        try:
            flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
            self._dir = os.open(name, flags, dir_fd=hierarchy.dir)
            #: Its `tasks` (write "0" to join it: `join`, or a child's chain).
            self.tasks = self._open("tasks", os.O_WRONLY)
            self._limit = self._open("memory.limit_in_bytes", os.O_WRONLY)
            self._memsw: int | None = None
            with contextlib.suppress(FileNotFoundError):  # (no swap accounting)
                self._memsw = self._open("memory.memsw.limit_in_bytes", os.O_WRONLY)
            self._oom = self._open("memory.oom_control", os.O_RDONLY)
            self.event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._fds.append(self.event)
            control = self._open("cgroup.event_control", os.O_WRONLY)
            os.write(control, b"%d %d" % (self.event, self._oom))
        except BaseException:
            self.close()
            _rmdir(name, hierarchy.dir)
            raise
        finally:
            if self._dir >= 0:
                os.close(self._dir)
        #: An OOM notification was seen (the spawner then killed the tree).
        self.notified = False

    def _open(self, name: str, flags: int) -> int:
        fd = os.open(name, flags | os.O_CLOEXEC, dir_fd=self._dir)
        self._fds.append(fd)
        return fd

    def fds(self) -> list[int]:
        return list(self._fds)

    def join(self) -> None:
        """Moves the calling thread into it (what it starts from now on starts there)."""
        os.write(self.tasks, b"0")

    def limit(self, nbytes: int) -> None:
        """Bounds it to `nbytes` of memory, and as much of memory and swap together."""
        os.write(self._limit, b"%d" % nbytes)
        if self._memsw is not None:
            os.write(self._memsw, b"%d" % nbytes)

    def over(self) -> bool:
        """Whether the tree went over its bound: an OOM kill in it, or a notification."""
        if self.notified:
            return True
        try:
            text = os.pread(self._oom, 4096, 0).decode()
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return counts.get("oom_kill", "0") != "0" or counts.get("under_oom", "0") != "0"

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class _State:
    """This spawner's hierarchy, once found (`detect`); None: the fallback, and `why`."""

    def __init__(self) -> None:
        self.hierarchy: Hierarchy | None = None
        self.why = "not probed"


STATE = _State()
#: `MCPX_HOOKS_HIDE` name that hides memory cgroups (the fallback is then used).
HIDE_NAME = "memcg"  # (in `isolation.OTHER_PARTS`)


def drop(cgroup: Cgroup | None) -> None:
    """Removes a cgroup whose tree is gone (later, if a thread is still leaving it)."""
    if cgroup is not None and STATE.hierarchy is not None:
        cgroup.close()
        STATE.hierarchy.remove(cgroup.path)


def detect(hidden: bool, rootless: bool = False) -> None:
    """Finds where this spawner can make memory cgroups (root, or a directory it owns), and
    removes those dead spawners left. Sets `STATE`. `rootless`: a
    spawner in a user namespace of its own starts its sandboxed children from its own thread
    (`inline.py`), which joins no cgroup: it says whether it could, and uses the fallback."""
    STATE.hierarchy = None
    if hidden:
        STATE.why = f"memory cgroups hidden by MCPX_HOOKS_HIDE={HIDE_NAME}"
        return
    base, why = _own_v1()
    if base is None:
        STATE.why = why
        return
    try:
        found = Hierarchy(base)
    except OSError as exc:
        STATE.why = f"cannot open {base}: {exc.strerror}"
        return
    try:
        probe = found.make()
    except OSError as exc:
        os.close(found.dir)
        STATE.why = f"cannot make a cgroup in {base}: {exc.strerror}"
        return
    probe.close()
    _rmdir(probe.path)
    if rootless:
        os.close(found.dir)
        STATE.why = f"{base} is writable, but a rootless spawner does not use cgroups yet"
        return
    found.remove_stale()
    STATE.hierarchy = found
    STATE.why = ""


def report() -> dict[str, object]:
    """What bounds memory here, for the spawner's report line."""
    if STATE.hierarchy is not None:
        found = STATE.hierarchy
        return {"by": "cgroup", "version": found.version, "path": found.base}
    return {"by": "rlimit", "why": STATE.why}


#: `/proc/sys/kernel` files of the IPC namespace a child is started in, and how each is
#: counted: bytes, or pages.
SHM_LIMITS = (("shmmax", 1), ("shmall", os.sysconf("SC_PAGE_SIZE")))


def write_shm_limits(nbytes: int) -> None:
    """Bounds SysV shared memory to `nbytes` in the calling thread's IPC namespace (through a
    writable /proc; raises `OSError`)."""
    for name, unit in SHM_LIMITS:
        fd = os.open(f"/proc/sys/kernel/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"%d" % max(1, nbytes // unit))
        finally:
            os.close(fd)
