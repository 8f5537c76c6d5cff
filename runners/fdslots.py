"""A child that leaves this process's fd table behind: low fd numbers (`Slots`) its fds are
copied to while it starts, for a spawner that holds thousands of fds.

Standard library only. Every spawn copies the parent's fd table into the child (a reference
taken on each open file) and the child's `execve` drops them all again, its fds being
close-on-exec: a spawner holding four fds for each of 1,000 running children spawns at twice
the cost of an idle one on a quiet machine, and at four times under load. Where its table is
large (`LARGE`), the child is started by the chain (`chained.py`) with `CLONE_FILES`: it shares
the table instead of copying it, and its first step, `close_range` with `CLOSE_RANGE_UNSHARE`
from `Slots.bound` up, gives it a table of its own holding only the fds below that bound. So
that its fds are among them, they are first copied here onto the slots, fds kept open on
/dev/null (made when the spawner starts, while low numbers are free); once the child has
exec'd (or failed), the slots hold /dev/null again, so that no pipe end stays open here.

Where the chain cannot run or `close_range` is not there (then no slots are made), the slots
could not be made, or a child's fds are too many or reach them, `start` says no (None) and
the caller spawns as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence, Sized
from typing import TYPE_CHECKING, NamedTuple

from . import chain, chained
from .libc import nr, syscall

if TYPE_CHECKING:
    from .spawnreq import Request

#: A spawner keeping fds for at most this many (its `trees`, by pidfd and control socket)
#: copies its table as it is: the copy costs less than the chain's own steps.
LARGE = 64
#: The first slot's lowest number, above every fd a child is given (its targets), and how
#: many slots there are (a child with more fds spawns as before): below 64, so that an idle
#: spawner's table stays the kernel's smallest, which every spawn copies whole.
FIRST = 40
COUNT = 16
_LAST = 0xFFFFFFFF


class Slots:
    """`COUNT` fds on /dev/null, close-on-exec, from `FIRST` up (the lowest free there)."""

    def __init__(self, fds: list[int]) -> None:
        #: The first holds /dev/null for the others to go back to; none: no slots here.
        self.fds = fds
        #: Every fd below it is copied into the child's own table; the slots are.
        self.bound = max(fds, default=-1) + 1

    def ready(self, req: Request, trees: Sized, extra: int = 0) -> Slots | None:
        """These slots, where `trees` (the spawner's, two fds or more each) are many and
        `req`'s fds and `extra` more fit them; else None: spawn as before."""
        if len(trees) <= LARGE or len(req.pairs) + extra >= len(self.fds):
            return None
        if max((t for _, t in req.pairs), default=0) >= FIRST:
            return None
        return self

    @contextlib.contextmanager
    def holding(self, req: Request, extra: Sequence[int] = ()) -> Iterator[Placed]:
        """`req`'s fds and `extra` copied onto the slots for the block: what the chain
        needs (`chained.start`'s `small`), and the slots holding `extra`."""
        fds = [*(source for source, _ in req.pairs), *extra]
        slots = self.fds[1 : 1 + len(fds)]
        try:
            for fd, slot in zip(fds, slots, strict=True):
                os.dup2(fd, slot, inheritable=False)
            pairs = [(slot, target) for slot, (_, target) in zip(slots, req.pairs, strict=False)]
            yield Placed((self.bound, pairs), slots[len(req.pairs) :])
        finally:
            for slot in slots:
                os.dup2(self.fds[0], slot, inheritable=False)

    def start(self, req: Request, program: str, trees: Sized) -> int | None:
        """The pid of an unsandboxed `program` started for `req` from a table of its own, or
        None where the slots are not `ready` for it."""
        if self.ready(req, trees) is None:
            return None
        with self.holding(req) as placed:
            return chained.start(req, program, limits=req.limits, small=placed.small)


class Placed(NamedTuple):
    """Where `Slots.holding` put the fds: `small` (the bound, the child's pairs from the
    slots) and the slots of the `extra` fds, in order."""

    small: tuple[int, list[tuple[int, int]]]
    extra: list[int]


def made() -> Slots:
    """The slots; none where they cannot be had (the chain not here, no fds left)."""
    fds: list[int] = []
    # (`close_range` of fds nobody has: 0 where the call is there, not refused by a filter.)
    if not chain.available() or syscall(nr("close_range"), _LAST - 1, _LAST, 0) != 0:
        return Slots(fds)
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for _ in range(COUNT):
                fds.append(fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, FIRST))
        finally:
            os.close(null)
    except OSError:
        for fd in fds:
            os.close(fd)
        return Slots([])
    return Slots(fds)
