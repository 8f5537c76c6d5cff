"""Whether a reaper kept for the next unsandboxed child is still only ours (`treeends.py`).
Stdlib only.

An unsandboxed child can `ptrace` its reaper (PID 1 where the child is, a process of the same
user) and make it run a program or code of its own: then it leaves no process of the
reaper's to see, the reaper alone in its namespace, which was kept, what the child put there
running on past its report as PID 1 of the next child's namespace. A reaper asleep in its
call for good (`pause()`, or `read` for `cat`), its orphans released without waking it, is
put on a CPU again only if stopped (a tracer's too), signalled from outside or traced: so the
number of times it was (`/proc/PID/schedstat`, third field), noted before a child joins it
(`settle`) and unchanged when the child is gone (`untouched`), says that nothing touched it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import TYPE_CHECKING

from .libc import nr
from .trees import host_pid

if TYPE_CHECKING:
    from .reapers import Reaper


def settle(reaper: Reaper) -> None:
    """Notes how many times `reaper` has run, before a child joins its namespace; not if it
    is not asleep yet (a fresh one, started for this child): it is then never kept."""
    reaper.runs = -1
    with contextlib.suppress(OSError, ValueError, IndexError):
        if asleep(reaper):
            reaper.runs = _runs(reaper.host)


def untouched(reaper: Reaper) -> bool:
    """Whether `reaper` has not run since `settle`; True where it was not settled (it is then
    never kept, only told alone from the rest)."""
    if reaper.runs < 0:
        return True
    try:
        return _runs(reaper.host) == reaper.runs
    except (OSError, ValueError, IndexError):
        return False


def asleep(reaper: Reaper, within: float = 0.0) -> bool:
    """Whether `reaper` sleeps in its call for good, waiting `within` seconds at most."""
    if not reaper.host:
        reaper.host = host_pid(reaper.pidfd)
    until = time.monotonic() + within
    while True:
        call = _read(f"/proc/{reaper.host}/syscall").split(b" ", 1)[0]
        if call.isdigit() and int(call) in _waits():
            return True
        if time.monotonic() >= until:
            return False
        os.sched_yield()


def _runs(host: int) -> int:
    return int(_read(f"/proc/{host}/schedstat").split()[2])


@functools.cache
def _waits() -> frozenset[int]:
    """The calls a reaper sleeps in for good: `pause` (`reapers.PROGRAM`), `read` (`cat`)."""
    with contextlib.suppress(OSError):
        return frozenset(n for n in (nr("pause"), nr("read")) if n is not None)
    return frozenset()


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1024)
    finally:
        os.close(fd)
