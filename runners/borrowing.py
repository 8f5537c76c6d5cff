"""Resource limits a spawn borrows: which of a request's limits this process can carry for
the few hundred microseconds of a `posix_spawn` (set here, then put back), and the hard ones
set on a jailed child right after it (`seal_limits`).

Standard library only. A limit that cannot be lent without hurting this process makes the
spawn a fork that sets it itself (`start.fork_exec`; see `spawner.py`).
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .libc import nr, syscall
from .start import StartError

if TYPE_CHECKING:
    from .spawnreq import Request


class Broken(Exception):
    """This process could not restore its own state; it must not spawn again."""


#: Margins that keep a borrowed limit from biting this process while it is in force.
_CPU_MARGIN_S = 1
_MEMORY_MARGIN = 64 << 20
_STACK_MARGIN = 1 << 20
#: Open files: lent only above this many fds over the highest one in use (a spawn opens a
#: few, and posix_spawn refuses to place an fd at or above the soft limit); else set on the
#: child right after its exec (`open_files_after`).
_FD_MARGIN = 64
#: Limits this process can carry for the few hundred microseconds of a spawn whatever
#: their value: it writes no regular file, takes no lock, mlocks nothing then (and open
#: files are lent only when high enough, `open_files_after`).
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


#: How old a reading of this process's memory use (`_own_usage`) may be when a limit is
#: checked against it. It is read on a request's way otherwise (/proc/self/status: 60-150 us
#: here); what this process maps in a quarter of a second is a few trees' worth of fds and
#: buffers, far inside `_MEMORY_MARGIN` (64 MiB), which is what the reading is compared with.
_USAGE_MAX_AGE_S = 0.25
#: The last reading: when (monotonic) and what.
_last_usage: list[tuple[float, dict[bytes, int]]] = []


def _own_usage() -> dict[bytes, int]:
    """VmSize, VmData and VmStk of this process in bytes, read at most `_USAGE_MAX_AGE_S`
    ago."""
    now = time.monotonic()
    if _last_usage and now - _last_usage[0][0] < _USAGE_MAX_AGE_S:
        return _last_usage[0][1]
    found: dict[bytes, int] = {}
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith((b"VmSize:", b"VmData:", b"VmStk:")):
                found[line.split(b":")[0]] = int(line.split()[1]) * 1024
    _last_usage[:] = [(now, found)]
    return found


#: This process's own limits (soft, hard), by number, as read the first time a spawn asked:
#: only `borrowed` changes them, and it puts back these very values, so each spawn need not
#: read them again (a spawn under `none` read each of its limits twice: 12 calls of 30).
_own_limits: dict[int, tuple[int, int]] = {}


def own_limit(number: int) -> tuple[int, int]:
    """This process's own limit `number` (soft, hard), read once (`_own_limits`)."""
    found = _own_limits.get(number)
    if found is None:
        found = _own_limits[number] = resource.getrlimit(number)
    return found


CAP_SYS_RESOURCE = 24


def has_capability(cap: int) -> bool:
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"CapEff:"):
                return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def full_uid_map() -> bool:
    """Whether this process's uids are the host's (no user namespace): root is then exempt."""
    try:
        with open("/proc/self/uid_map", "rb") as f:
            return f.read().split() == [b"0", b"0", b"4294967295"]
    except OSError:
        return False


def open_files_after(
    limits: list[tuple[int, int, int]], highest_fd: int
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """`limits` split in those to lend for a spawn and the open-files limit when it is too
    low to lend (this process holds fds above it: two per running child). That one is set
    on the child with `prlimit` right after its exec: for the few microseconds between, the
    child has this process's limit instead."""
    lend: list[tuple[int, int, int]] = []
    after: list[tuple[int, int, int]] = []
    for limit in limits:
        too_low = limit[0] == resource.RLIMIT_NOFILE and limit[1] <= highest_fd + _FD_MARGIN
        (after if too_low else lend).append(limit)
    return lend, after


def borrowable(limits: list[tuple[int, int, int]], root: bool, raise_hard: bool) -> bool:
    """Whether every limit can be set on this process for a spawn, without hurting it, and
    put back after (a lowered hard limit comes back only with CAP_SYS_RESOURCE)."""
    usage: dict[bytes, int] | None = None
    for number, soft, hard in limits:
        if not raise_hard and hard != own_limit(number)[1]:
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


def soft_only(limits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The soft limits of `limits` under this process's own hard ones (a jailed child gets its
    hard limits after the spawn, `seal_limits`)."""
    out = []
    for number, wanted, _ in limits:
        hard = own_limit(number)[1]
        soft = wanted
        if hard != resource.RLIM_INFINITY:  # (an infinite soft limit is the largest)
            soft = hard if wanted == resource.RLIM_INFINITY else min(wanted, hard)
        out.append((number, soft, hard))
    return out


@contextlib.contextmanager
def borrowed(req: Request, limits: list[tuple[int, int, int]] | None = None) -> Iterator[None]:
    """Sets the request's limits (or `limits`) on this process for the block, then puts its
    own back."""
    chosen = req.limits if limits is None else limits
    saved = [(number, own_limit(number)) for number, _, _ in chosen]
    try:
        for number, soft, hard in chosen:
            try:
                resource.setrlimit(number, (soft, hard))
            except (OSError, ValueError) as exc:
                raise StartError(f"cannot set {req.limit_names[number]}: {exc}") from exc
        yield
    finally:
        for number, old in reversed(saved):
            try:
                resource.setrlimit(number, old)
            except (OSError, ValueError) as exc:
                raise Broken(f"cannot restore resource limit {number}") from exc


def seal_limits(
    pid: int, uid: int | None, limits: list[tuple[int, int, int]], names: dict[int, str]
) -> None:
    """Sets the child's limits, hard ones included, right after its spawn (the spawner lent
    only soft ones). A child of another uid is reached as that uid (`prlimit` needs it without
    CAP_SYS_RESOURCE): this thread's real and effective ids switch for the call and back.
    Raises `StartError` naming (`names`) the limit it could not set."""
    if not limits:
        return
    if uid is None:
        _set_limits(pid, limits, names)
        return
    setresuid, setresgid = nr("setresuid"), nr("setresgid")
    syscall(setresgid, uid, uid, 0)
    syscall(setresuid, uid, uid, 0)
    try:
        _set_limits(pid, limits, names)
    finally:
        if (
            syscall(setresuid, 0, 0, 0) != 0 or syscall(setresgid, 0, 0, 0) != 0
        ):  # pragma: no cover - the saved uid is 0
            raise RuntimeError("cannot return to uid 0")


def _set_limits(pid: int, limits: list[tuple[int, int, int]], names: dict[int, str]) -> None:
    for number, soft, hard in limits:
        try:
            resource.prlimit(pid, number, (soft, hard))
        except (OSError, ValueError) as exc:  # ValueError: soft above hard
            raise StartError(f"cannot set {names[number]}: {exc}") from exc
