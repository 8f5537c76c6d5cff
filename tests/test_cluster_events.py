"""The gateway's events feed: a run's event is told to a client only once the runs list
shows it (`EventFeed`'s settle), whether or not more events came right behind it. No NATS
here: the feed reads batches of stored messages as the cluster's follower hands them on."""

from __future__ import annotations

from typing import Any

import orjson
import trio

from mcpx_hooks.supervisor.cluster.events import EventFeed
from mcpx_hooks.supervisor.cluster.jet import Stored


def _stored(seq: int, pending: int, kind: str, run_id: str = "r1") -> Stored:
    return Stored(orjson.dumps({"kind": kind, "runId": run_id}), {}, seq, pending)


async def _told(live_from: int | None, batch: list[Stored]) -> tuple[list[int], list[int]]:
    """The seqs handed on, and those settled first."""
    send, receive = trio.open_memory_channel[list[Stored]](1)
    settled: list[int] = []

    async def settle(event: dict[str, Any]) -> None:
        settled.append(event["seq"])

    feed = EventFeed(receive, (), None, settle, live_from=live_from)
    await send.send(batch)
    await send.aclose()
    return [event["seq"] async for event in feed], settled


async def test_a_runs_start_with_its_first_hook_right_behind_is_settled_first() -> None:
    # The run's start, its gate's start and a client's leaving, in one batch: each was
    # published after the client asked, so each waits for the list (a run.started told
    # before the run is listed left the console's list without it until the run ended).
    batch = [
        _stored(29, 2, "run.started"),
        _stored(30, 1, "hook.started"),
        _stored(31, 0, "client.closed"),
    ]
    assert await _told(29, batch) == ([29, 30, 31], [29, 30, 31])


async def test_events_replayed_from_before_the_client_asked_settle_only_the_newest() -> None:
    # Replayed from `since`: a run long gone from the list must not hold each one up.
    batch = [_stored(5, 2, "run.started"), _stored(6, 1, "run.finished"), _stored(7, 0, "x")]
    assert await _told(8, batch) == ([5, 6, 7], [7])
    assert await _told(None, batch) == ([5, 6, 7], [7])
