"""The processes a pidns child made its siblings (`pidns.py`, `treeends.py`). Stdlib only.

A child's parent is the spawner, outside the child's PID namespace, so `clone(CLONE_PARENT)`
from the child makes a process in that namespace whose parent is the spawner: it descends
from no process there, its reaper's included, and it makes more of its kind the same way.
Its reaper having no child does not say the namespace is empty then; and once the reaper is
killed, the kernel keeps the reaper until the spawner reaps these (a parent outside the
namespace), so they are found here, watched and reaped like the child.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import os
from collections.abc import (
    Callable,
    Collection,
    Container,
    Generator,
    Hashable,
    Iterable,
)
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .reapers import Reaper


def siblings(
    reaper: int, seen: Container[int], known: Callable[[], Container[int]] = frozenset
) -> list[int]:
    """The host pids of this process's children in the namespace of reaper `reaper` (a host
    pid) but the reaper, those it keeps already aside: those in `seen`, and, asked only when
    a child is in neither, in `known()` (a set that costs more to make); `OSError` where /proc
    cannot say. Back to back, every child is the reaper or seen: one read of /proc each."""
    if (found := siblings_of((reaper,), seen, known).get(reaper, [])) is None:
        raise ProcessLookupError(reaper)
    return found


def siblings_of(
    reapers: Collection[int], seen: Container[int], known: Callable[[], Container[int]]
) -> dict[int, list[int] | None]:
    """`siblings` for several reapers in one pass (/proc read once, `known()` made once: a
    burst of trees ending in one wake-up of the spawner costs one pass, not one a tree);
    only the reapers with any are keys, and None for one whose namespace /proc cannot say
    (that namespace alone is not searched: `sort_out`). `OSError` where the children of this
    process cannot be read."""
    return sort_out(_children(), reapers, seen, known, ns_of=_pid_ns, chain=_ns_chain)


def _children() -> list[int]:
    kids: list[int] = []
    for tid in os.listdir("/proc/self/task"):  # (a thread's children are its own)
        with open(f"/proc/self/task/{tid}/children", "rb") as f:
            kids += (int(x) for x in f.read().split())
    return kids


#: How many PID namespaces a process's own is nested in at most, its own included: the
#: kernel's 32 levels below the host's (`MAX_PID_NS_LEVEL`). A walk up takes no more steps.
NS_DEPTH = 33


def sort_out(
    kids: Iterable[int],
    reapers: Collection[int],
    seen: Container[int],
    known: Callable[[], Container[int]],
    *,
    ns_of: Callable[[int], Hashable],
    chain: Callable[[int], Generator[Hashable, None, None]],
) -> dict[int, list[int] | None]:
    """`siblings_of` from what /proc says: `kids`, this process's children; `ns_of(reaper)`,
    the PID namespace of a reaper (`OSError`: it cannot say); `chain(pid)`, the namespace of
    process `pid`, then those above it (ending where it cannot say). A child is the reaper's
    whose namespace comes first of the first `NS_DEPTH` it is in; named once at most, in
    the order of `kids`. A reaper whose namespace cannot be
    read, or is another's of `reapers` too (a pid reused), is None, its namespace none's:
    only where a child is left to check (none, the most common: nothing is read)."""
    batch = set(reapers)
    others = [pid for pid in kids if pid not in batch and pid not in seen]
    if not others:
        return {}
    kept = known()
    others = [pid for pid in others if pid not in kept]
    if not others:
        return {}
    found: dict[int, list[int] | None] = {}
    targets: dict[Hashable, int] = {}
    for reaper in batch:
        try:
            ns = ns_of(reaper)
        except OSError:  # (gone: whatever its namespace held is not known here)
            found[reaper] = None
            continue
        if (twin := targets.setdefault(ns, reaper)) != reaper:
            found[reaper] = found[twin] = None
    for ns in [ns for ns, reaper in targets.items() if reaper in found]:
        del targets[ns]
    held: dict[int, list[int]] = {}
    for pid in dict.fromkeys(others):
        with contextlib.closing(chain(pid)) as walk:
            owner = next(
                (targets[n] for n in itertools.islice(walk, NS_DEPTH) if n in targets), None
            )
        if owner is not None:
            held.setdefault(owner, []).append(pid)
    found.update(held)
    return found


#: `ioctl` on a namespace's fd: an fd of its parent (`ioctl_ns(2)`).
NS_GET_PARENT = 0xB702


def _ns(st: os.stat_result) -> tuple[int, int]:
    return st.st_ino, st.st_dev


def _pid_ns(pid: int) -> tuple[int, int]:
    return _ns(os.stat(f"/proc/{pid}/ns/pid"))


def _ns_chain(pid: int) -> Generator[tuple[int, int], None, None]:
    """The PID namespace of host pid `pid` (inode and device), then those above it: a
    process the child made its sibling may be the init of a namespace of the child's, whose
    processes are in the child's namespace too. Ends where there is none to see (EPERM at
    the top), or the process is gone."""
    try:
        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # (reaped meanwhile)
        return
    try:
        while True:
            yield _ns(os.fstat(fd))
            parent = fcntl.ioctl(fd, NS_GET_PARENT)
            os.close(fd)
            fd = parent
    except OSError:  # (EPERM at the top: no parent of this process's to see)
        return
    finally:
        os.close(fd)


def host_of(reaper: Reaper) -> int:
    """The host pid of `reaper`: its pid where this process's PID namespace is the host's
    (/proc's), else read once (`trees.host_pid`)."""
    if not reaper.host:
        from .trees import host_pid  # (`trees` imports this module; not per call: see above)

        reaper.host = reaper.pid if _level() == 0 else host_pid(reaper.pidfd)
    return reaper.host


def reap(host: int) -> None:
    """Waits for this process's child `host` (a host pid, SIGKILLed) and reaps it."""
    with contextlib.suppress(OSError):
        fd = pidfd_of(host)
        try:
            os.waitid(os.P_PIDFD, fd, os.WEXITED)
        finally:
            os.close(fd)


def pidfd_of(host: int) -> int:
    """A pidfd of this process's child `host` (a host pid), which only this process reaps:
    the pid cannot be another's meanwhile."""
    with open(f"/proc/{host}/status", "rb") as f:
        for line in f:
            if line.startswith(b"NSpid:"):
                return os.pidfd_open(int(line.split()[_level()]))
    raise ProcessLookupError(host)


@functools.cache
def _level() -> int:
    """Where this process's own PID namespace is in an `NSpid:` line of /proc (the host's)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"NSpid:"):
                return len(line.split()) - 1
    return 1
