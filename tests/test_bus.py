"""The event bus: numbering, history, bounded subscribers, gaps, resume, filters, wire forms."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.events import KINDS, Event, EventKind, Gap, kind_matches
from mcpx_hooks.supervisor.run.bus import DEFAULT_BUFFER, DEFAULT_HISTORY, Bus, Subscription

RUN = EventKind.RUN_STARTED


async def take(sub: Subscription, n: int) -> list[Event | Gap]:
    return [await sub.__anext__() for _ in range(n)]


def seqs(items: list[Event | Gap]) -> list[int]:
    assert all(isinstance(i, Event) for i in items), items
    return [i.seq for i in items if isinstance(i, Event)]


def publish_n(bus: Bus, n: int, kind: EventKind = RUN) -> None:
    for i in range(n):
        bus.publish(kind, {"i": i})


def test_kinds_table_describes_every_kind() -> None:
    assert set(KINDS) == set(EventKind)
    assert all(KINDS[k] and "\n" not in KINDS[k] for k in EventKind)


def test_seq_from_zero_without_gaps() -> None:
    bus = Bus()
    events = [bus.publish(RUN, {}) for _ in range(5)]
    assert [e.seq for e in events] == [0, 1, 2, 3, 4]
    assert bus.next_seq == 5


async def test_subscriber_gets_events_in_order() -> None:
    bus = Bus()
    async with bus.subscribe() as sub:
        publish_n(bus, 5)
        assert seqs(await take(sub, 5)) == [0, 1, 2, 3, 4]


async def test_waiting_reader_is_woken_by_publish() -> None:
    bus = Bus()
    got: list[Event | Gap] = []
    async with bus.subscribe() as sub, trio.open_nursery() as nursery:

        async def read() -> None:
            got.extend(await take(sub, 2))

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        publish_n(bus, 2)
    assert seqs(got) == [0, 1]


async def test_cancelled_reader_loses_nothing(autojump_clock: trio.abc.Clock) -> None:
    bus = Bus()
    async with bus.subscribe() as sub:
        with trio.move_on_after(5) as scope:
            await sub.__anext__()
        assert scope.cancelled_caught
        bus.publish(RUN, {})
        assert seqs(await take(sub, 1)) == [0]


async def test_history_bounded_since_zero_starts_with_gap() -> None:
    bus = Bus()
    publish_n(bus, 1100)
    async with bus.subscribe(since=0) as sub:
        first, *rest = await take(sub, 1 + DEFAULT_HISTORY)
        assert first == Gap(0, 1100 - DEFAULT_HISTORY - 1) == Gap(0, 75)
        assert seqs(rest) == list(range(76, 1100))
        bus.publish(RUN, {})
        assert seqs(await take(sub, 1)) == [1100]
        assert sub.dropped == 0  # the replay does not count against the live buffer


async def test_since_replays_then_follows_live_without_duplicate_or_loss() -> None:
    bus = Bus()
    publish_n(bus, 10)
    async with bus.subscribe(since=5) as sub:
        publish_n(bus, 3)
        assert seqs(await take(sub, 8)) == list(range(5, 13))
    async with bus.subscribe(since=bus.next_seq) as sub:
        bus.publish(RUN, {})
        assert seqs(await take(sub, 1)) == [13]


async def test_since_beyond_the_next_seq_is_refused() -> None:
    bus = Bus()
    publish_n(bus, 2)
    with pytest.raises(ValueError, match="since=3"):
        async with bus.subscribe(since=3):
            pass
    assert bus.subscriber_count == 0


async def test_stalled_subscriber_reads_buffer_then_gap_then_live_and_resumes() -> None:
    bus = Bus()
    async with bus.subscribe() as sub:
        publish_n(bus, 300)
        assert sub.dropped == bus.dropped == 300 - DEFAULT_BUFFER == 44
        assert seqs(await take(sub, DEFAULT_BUFFER)) == list(range(256))
        assert sub.last_seq == 255
        publish_n(bus, 2)
        assert await sub.__anext__() == Gap(256, 299)
        assert seqs(await take(sub, 2)) == [300, 301]
        assert sub.dropped == 44
        resume = 255 + 1  # the seq after the last one seen before the gap
    async with bus.subscribe(since=resume) as again:
        assert seqs(await take(again, 46)) == list(range(256, 302))
        assert again.dropped == 0


async def test_publish_never_blocks_with_a_stalled_subscriber() -> None:
    bus = Bus()
    async with bus.subscribe() as sub:
        for i in range(10_000):  # synchronous: no checkpoint, nothing can wait here
            bus.publish(RUN, {"i": i})
        assert bus.dropped == 10_000 - DEFAULT_BUFFER
        assert seqs(await take(sub, DEFAULT_BUFFER)) == list(range(DEFAULT_BUFFER))
        assert await sub.__anext__() == Gap(DEFAULT_BUFFER, 9_999)  # consecutive drops merge


async def test_gap_of_a_filtered_subscriber_spans_its_missed_seqs() -> None:
    bus = Bus(buffer=2)
    kinds = [
        EventKind.HOOK_FAILED,  # 0 kept
        EventKind.RUN_STARTED,  # 1 not wanted
        EventKind.HOOK_FINISHED,  # 2 kept
        EventKind.HOOK_STARTED,  # 3 dropped
        EventKind.RUN_FINISHED,  # 4 not wanted
        EventKind.HOOK_FAILED,  # 5 dropped
    ]
    async with bus.subscribe(kinds=["hook"]) as sub:
        for kind in kinds:
            bus.publish(kind, {})
        assert seqs(await take(sub, 2)) == [0, 2]
        assert await sub.__anext__() == Gap(3, 5)
        assert sub.dropped == 2


def test_kind_prefixes_match_on_dot_boundaries() -> None:
    assert kind_matches("hook.failed", ["hook"])
    assert not kind_matches("hooks.x", ["hook"])
    assert kind_matches("run.started", ["run.started"])
    assert not kind_matches("run.startedx", ["run.started"])
    assert not kind_matches("run.finished", ["run.started"])
    assert kind_matches("run.finished", ["hook", "run"])
    assert kind_matches("anything", [])


async def test_subscription_filters_kinds() -> None:
    bus = Bus()
    async with bus.subscribe(kinds=["hook"]) as hooks, bus.subscribe(kinds=["run.started"]) as rs:
        for kind in (EventKind.RUN_STARTED, EventKind.HOOK_FAILED, EventKind.RUN_FINISHED):
            bus.publish(kind, {})
        bus.publish(EventKind.HOOK_STARTED, {})
        assert [e.kind for e in await take(hooks, 2) if isinstance(e, Event)] == [
            "hook.failed",
            "hook.started",
        ]
        assert seqs(await take(rs, 1)) == [0]
        bus.publish(EventKind.RUN_STARTED, {})
        assert seqs(await take(rs, 1)) == [4]  # nothing else was queued for it


async def test_kinds_must_be_a_sequence_and_kind_declared() -> None:
    bus = Bus()
    with pytest.raises(TypeError):
        async with bus.subscribe(kinds="hook"):
            pass
    with pytest.raises(ValueError, match=r"hooks\.x"):
        bus.publish("hooks.x", {})
    assert bus.next_seq == 0


async def test_unsubscribe_on_exit() -> None:
    bus = Bus()
    assert bus.subscriber_count == 0
    async with bus.subscribe() as sub:
        assert bus.subscriber_count == 1
        async with bus.subscribe(kinds=["hook"]):
            assert bus.subscriber_count == 2
        assert bus.subscriber_count == 1
    assert bus.subscriber_count == 0
    publish_n(bus, DEFAULT_BUFFER + 1)
    assert bus.dropped == 0  # nobody is left to drop for
    assert [item async for item in sub] == []  # a closed subscription ends


async def test_closing_wakes_a_waiting_reader() -> None:
    bus = Bus()
    got: list[Event | Gap] = []
    async with trio.open_nursery() as nursery, bus.subscribe() as sub:

        async def read() -> None:
            got.extend([item async for item in sub])

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        bus.publish(RUN, {})
        await trio.testing.wait_all_tasks_blocked()
    assert seqs(got) == [0]


async def test_one_reader_at_a_time() -> None:
    bus = Bus()
    async with bus.subscribe() as sub, trio.open_nursery() as nursery:
        nursery.start_soon(sub.__anext__)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await sub.__anext__()
        nursery.cancel_scope.cancel()


def test_wire_forms() -> None:
    bus = Bus()
    plain = bus.publish(EventKind.SUPERVISOR_STARTED, {"pid": 1})
    tied = bus.publish(
        EventKind.RUN_FINISHED, {"exitCode": 0}, run_id="r1", caused_by_observer=True
    )
    assert to_json(plain) == {
        "seq": 0,
        "kind": "supervisor.started",
        "at": plain.at,
        "data": {"pid": 1},
    }
    assert to_json(tied) == {
        "seq": 1,
        "kind": "run.finished",
        "at": tied.at,
        "runId": "r1",
        "data": {"exitCode": 0},
    }
    assert plain.at.endswith("Z") and "T" in plain.at
    assert to_json(Gap(3, 7)) == {"kind": "gap", "from": 3, "to": 7}


def test_published_data_is_copied() -> None:
    bus = Bus()
    data = {"a": 1}
    event = bus.publish(RUN, data)
    data["a"] = 2
    assert event.data == {"a": 1}


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Bus(history=0)
    with pytest.raises(ValueError):
        Bus(buffer=0)
