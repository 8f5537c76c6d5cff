"""The event bus: numbered events, a bounded history, bounded subscribers.

`Bus.publish` is synchronous and never blocks: it numbers the event, keeps it in the history
(the last `history` events) and appends it to each matching subscriber's own buffer. A
subscriber whose buffer is full loses that event; the loss is counted and the subscriber is
told with one `Gap` covering the seqs it missed, placed where they would have been. It can
open a new subscription with `since=` the first missing seq to get them back from the history
while they are retained. Only waiting for the next item (`async for` over a subscription) is
asynchronous.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import trio

from ..core.events import Event, EventKind, Gap, kind_matches
from ..core.frames import now_rfc3339
from ..core.redact import NO_SECRETS, Redactor

DEFAULT_HISTORY: Final = 1024
DEFAULT_BUFFER: Final = 256


class Subscription:
    """One subscriber's view of the bus: `async for item in sub` gives `Event | Gap`, in seq
    order, until the `subscribe` block exits.

    Its buffer holds at most `buffer` live events (plus the replay of `since`, taken from the
    history at subscription time, and at most one `Gap` between two events). When it is full
    the newest event is the one dropped: what is buffered stays in order and the loss is one
    range, reported by a `Gap` right after the last buffered event. To get the range back,
    open a new subscription with `since=gap.from_seq` while the history still holds it.

    Cancelling a task waiting in `async for` loses nothing: the item stays for the next read.
    One task reads at a time (`trio.BusyResourceError` otherwise).
    """

    def __init__(self, kinds: tuple[str, ...], buffer: int, skip_observer_caused: bool) -> None:
        self.kinds = kinds
        self.skip_observer_caused = skip_observer_caused
        #: Live events this subscriber lost because its buffer was full.
        self.dropped = 0
        #: The seq of the last event handed out; a new subscription after this one closes
        #: continues with `since=last_seq + 1`.
        self.last_seq: int | None = None
        self._capacity = buffer
        self._items: collections.deque[Event | Gap] = collections.deque()
        self._replayed = 0  # items at the front that come from the history, not live
        self._live = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self._reading = False

    @property
    def pending(self) -> int:
        """Items waiting to be read (events and gaps)."""
        return len(self._items)

    def _wants(self, event: Event) -> bool:
        if self.skip_observer_caused and event.caused_by_observer:
            return False
        return kind_matches(event.kind, self.kinds)

    def _prime(self, replay: Iterable[Event | Gap]) -> None:
        """Puts the replay of `since` first; before any live event arrives."""
        self._items.extend(replay)
        self._replayed = len(self._items)

    def _offer(self, event: Event) -> bool:
        """Takes a live event, or records it in the trailing gap; False when it was dropped."""
        if self._live >= self._capacity:
            self.dropped += 1
            last = self._items[-1] if self._items else None
            if isinstance(last, Gap):
                self._items[-1] = Gap(last.from_seq, event.seq)
            else:
                self._items.append(Gap(event.seq, event.seq))
            return False
        self._items.append(event)
        self._live += 1
        self._lot.unpark_all()
        return True

    def _close(self) -> None:
        self._closed = True
        self._lot.unpark_all()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event | Gap:
        if self._reading:
            raise trio.BusyResourceError("another task is already reading this subscription")
        self._reading = True
        try:
            if self._items:
                await trio.lowlevel.checkpoint()
            while not self._items:
                if self._closed:
                    raise StopAsyncIteration
                await self._lot.park()
        finally:
            self._reading = False
        item = self._items.popleft()
        if self._replayed:
            self._replayed -= 1
        elif isinstance(item, Event):
            self._live -= 1
        if isinstance(item, Event):
            self.last_seq = item.seq
        return item


class Bus:
    """Numbers and fans out events. Not thread-safe: publish from the Trio thread."""

    def __init__(
        self,
        history: int = DEFAULT_HISTORY,
        buffer: int = DEFAULT_BUFFER,
        redactor: Redactor = NO_SECRETS,
    ) -> None:
        if history < 1 or buffer < 1:
            raise ValueError("history and buffer must be at least 1")
        #: The supervisor's own secrets (its hooks'): redacted in every event.
        self.redactor = redactor
        #: A running run's secrets, by run id: redacted in the events of that run too.
        self._runs: dict[str, Redactor] = {}
        self._history: collections.deque[Event] = collections.deque(maxlen=history)
        self._buffer = buffer
        self._next_seq = 0
        self._subscribers: dict[Subscription, None] = {}
        #: Events lost across all subscribers (one per subscriber that lost it).
        self.dropped = 0

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def publish(
        self,
        kind: EventKind | str,
        data: Mapping[str, Any],
        *,
        run_id: str | None = None,
        caused_by_observer: bool = False,
    ) -> Event:
        """Publishes one event now; never blocks, never waits for a subscriber.

        `kind` must be a declared `EventKind` (ValueError otherwise). `data` is copied one
        level deep and must be JSON-compatible; every secret in it (the supervisor's, and
        the run's while it is `redacting`) is replaced by `[secret NAME]`.
        """
        redactor = self._runs.get(run_id, self.redactor) if run_id else self.redactor
        event = Event(
            self._next_seq,
            EventKind(kind).value,
            now_rfc3339(),
            redactor.value(dict(data)),
            run_id,
            caused_by_observer,
        )
        self._next_seq += 1
        self._history.append(event)
        for sub in self._subscribers:
            if sub._wants(event) and not sub._offer(event):
                self.dropped += 1
        return event

    @contextlib.contextmanager
    def redacting(self, run_id: str, redactor: Redactor) -> Iterator[Redactor]:
        """While the block runs, the events of `run_id` are redacted with `redactor` as
        well as the supervisor's; yields the two together."""
        both = self.redactor | redactor
        self._runs[run_id] = both
        try:
            yield both
        finally:
            del self._runs[run_id]

    def redact_text(self, text: str) -> str:
        """`text` without any secret the bus knows now (for log lines)."""
        for redactor in (self.redactor, *self._runs.values()):
            text = redactor.text(text)
        return text

    @contextlib.asynccontextmanager
    async def subscribe(
        self,
        *,
        kinds: Sequence[str] = (),
        since: int | None = None,
        skip_observer_caused: bool = False,
    ) -> AsyncIterator[Subscription]:
        """A subscription to events whose kind matches one of `kinds` (dot-boundary prefixes;
        empty: all), live from now; unregistered when the block exits.

        With `since=N`, the retained events with seq >= N come first, then live ones, with no
        duplicate and nothing lost between them (both are taken in one step, without a
        checkpoint). If the history no longer holds seq N, a `Gap` for the missing range comes
        first. `since` beyond the next seq is a ValueError: that seq was never published
        here (the bus restarted).
        """
        if since is not None and not 0 <= since <= self._next_seq:
            raise ValueError(f"since={since} is not a published seq (next seq: {self._next_seq})")
        if isinstance(kinds, str):
            raise TypeError("kinds is a sequence of kind prefixes, not one string")
        sub = Subscription(tuple(kinds), self._buffer, skip_observer_caused)
        if since is not None:
            sub._prime(self._replay(sub, since))
        self._subscribers[sub] = None
        try:
            yield sub
        finally:
            del self._subscribers[sub]
            sub._close()

    def _replay(self, sub: Subscription, since: int) -> list[Event | Gap]:
        oldest = self._history[0].seq if self._history else self._next_seq
        items: list[Event | Gap] = []
        if since < oldest:
            items.append(Gap(since, oldest - 1))
        items += (e for e in self._history if e.seq >= since and sub._wants(e))
        return items
