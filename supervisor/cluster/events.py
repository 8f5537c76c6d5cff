"""The cluster's event bus: every worker's and gateway's bus events go to the events stream
(`forward_events`), and a gateway's `/v1/events` reads them back (`EventFeed`), each with
the stream's sequence as its `seq`, so `since=N` means the same on every gateway."""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson
import trio

from ..core.convert import to_json
from ..core.events import Event, kind_matches
from ..core.jsontext import wire_loads
from ..run.bus import Bus
from .jet import ClusterDown, Stored
from .link import Cluster
from .names import events_subject

logger = logging.getLogger("mcpx_hooks.cluster")

#: Events published in one batch at most.
BATCH: Final = 256


async def forward_events(
    cluster: Cluster, bus: Bus, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Publishes every event of `bus` to the events stream, in order, until cancelled. A
    gap the bus reports (this forwarder fell behind) is logged: those events are not
    carried."""
    subject = events_subject()
    async with bus.subscribe() as sub:
        task_status.started()
        while True:
            items = [await sub.__anext__()]
            while sub.pending and len(items) < BATCH:
                items.append(await sub.__anext__())
            batch: list[tuple[str, bytes, dict[str, str]]] = [
                (subject, orjson.dumps(to_json(item)), {})
                for item in items
                if isinstance(item, Event)
            ]
            if len(batch) < len(items):
                logger.warning("events were dropped before they reached the cluster")
            if not batch:
                continue
            try:
                await cluster.publish_many(batch)
            except ClusterDown as exc:
                logger.warning("%d event(s) not carried: %s", len(batch), exc)


class EventFeed:
    """The events stream from a seq, as `Streams.stream_events` reads a bus subscription:
    events whose kind matches `kinds`, each with its stream sequence as `seq`, after a gap
    first when `since` is older than what the stream still holds. An event published after
    the client asked (its seq at or past `live_from`), or read as the stream's newest
    (nothing pending after it), is handed on once `settle` returns for it: a run's start
    followed at once by its first hook's is not told before the run is listed, and old
    events replayed from `since` do not each wait for runs long gone from the list."""

    def __init__(
        self,
        batches: trio.MemoryReceiveChannel[list[Stored]],
        kinds: tuple[str, ...],
        gap: tuple[int, int] | None,
        settle: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        live_from: int | None = None,
    ) -> None:
        self._batches = batches
        self._live_from = live_from
        self._kinds = kinds
        self._settle = settle
        #: Each ready event, and whether it is settled first (see above).
        self._ready: collections.deque[tuple[dict[str, Any], bool]] = collections.deque()
        if gap is not None:
            self._ready.append(({"kind": "gap", "from": gap[0], "to": gap[1]}, False))

    def _event(self, message: Stored) -> dict[str, Any] | None:
        try:
            event = wire_loads(message.data)
        except ValueError:
            return None
        if not isinstance(event, dict) or not kind_matches(str(event.get("kind")), self._kinds):
            return None
        event["seq"] = message.sequence
        return event

    @property
    def pending(self) -> int:
        """Events ready to be read now."""
        while True:
            try:
                batch = self._batches.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return len(self._ready)
            self._take(batch)

    def _take(self, batch: list[Stored]) -> None:
        for message in batch:
            event = self._event(message)
            if event is not None:
                live = self._live_from is not None and message.sequence >= self._live_from
                self._ready.append((event, live or message.pending == 0))

    def __aiter__(self) -> EventFeed:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._ready:
            try:
                batch = await self._batches.receive()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            self._take(batch)
        event, fresh = self._ready.popleft()
        if fresh and self._settle is not None:
            await self._settle(event)
        return event
