"""What the observe hooks did (`observe.py`), and whether they are idle: a runtime keeps
this even when no observe hook is declared, so it is apart from the hooks' runner, which
such a runtime never loads."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs
import trio

from ..core.hooks import Hook
from ..core.points import Phase
from ..core.records import Record
from .bus import Subscription

#: How many failed and cut-short observe hooks `ObserverStats` names; past it, it counts.
NAMED_AT_MOST: Final = 32


@attrs.frozen(repr=False, eq=False)
class Unwell(Record):
    """An observe hook that failed or was cut short: which, on what event, and why."""

    name: str
    kind: str
    status: str
    reason: str


@attrs.define(repr=False)
class ObserverStats(Record):
    """What `serve_observers` did; given to the caller by `nursery.start`."""

    #: Events read from the subscription.
    events: int = 0
    #: Hook runs finished (whatever their status).
    runs: int = 0
    #: Gaps reported to the subscription, and how many seqs they covered (an upper bound on
    #: the events the observers missed because they fell behind).
    gaps: int = 0
    missed: int = 0
    #: Observe hooks that failed (status not `ok`), and that were cancelled while running or
    #: before they started (the command ended: `[observe] drainMs` passed), the first
    #: `NAMED_AT_MOST` of each; `unwell` counts them all.
    failed: list[Unwell] = attrs.field(factory=list)
    cut_short: list[Unwell] = attrs.field(factory=list)
    unwell: int = 0
    #: Events taken from the bus but not yet looked at when the observers were cancelled.
    unread: int = 0
    _sub: Subscription | None = None
    _busy: int = 0
    _changed: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)

    @property
    def idle(self) -> bool:
        """Nothing waiting in the subscription, nothing being handed over or run."""
        return self._busy == 0 and (self._sub is None or self._sub.pending == 0)

    async def wait_idle(self) -> None:
        """Waits until every event published so far that the observers took is handled.

        Callers bound it (`move_on_after`): a busy bus may never leave the observers idle.
        """
        while not self.idle:
            await self._changed.park()

    def _note(self, into: list[Unwell], unwell: Unwell) -> None:
        self.unwell += 1
        if len(into) < NAMED_AT_MOST:
            into.append(unwell)

    def _settle(self, delta: int) -> None:
        self._busy += delta
        if self.idle:
            self._changed.unpark_all()


def observe_hooks(hooks: Iterable[Hook]) -> tuple[Hook, ...]:
    """The observe hooks among `hooks` that run: enabled, at phase `observe`."""
    return tuple(hook for hook in hooks if hook.enabled and hook.phase is Phase.OBSERVE)
