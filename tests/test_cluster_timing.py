"""The cluster's timing in virtual time (`autojump_clock`), against a fake of the `Cluster`
the gateways and workers are given: the backoff of every retry (publishing, taking requests,
following a run's frames, the runs stream), the lease watch that ends a lost worker's run,
and the look at queued requests after a reconnection. What needs a real nats-server (what
JetStream keeps, a restarted server, two gateways at once) is tests/test_cluster*.py's."""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from clusterparts import PublishedRun

from mcpx_hooks.supervisor.cluster import publish
from mcpx_hooks.supervisor.cluster.jet import WRONG_LAST_SEQUENCE, ClusterDown, Published, Stored
from mcpx_hooks.supervisor.cluster.link import RETRY_FIRST_S, RETRY_MAX_S, retry_s
from mcpx_hooks.supervisor.cluster.mirror import MirrorJournal, Mirrors
from mcpx_hooks.supervisor.cluster.names import (
    Header,
    every,
    frames_subject,
    lease_subject,
    runs_subject,
)
from mcpx_hooks.supervisor.cluster.publish import PUBLISH_S, Publisher
from mcpx_hooks.supervisor.cluster.queued import TICK_S, Queued, serve_queued
from mcpx_hooks.supervisor.cluster.watch import RunsIndex, serve_index
from mcpx_hooks.supervisor.cluster.worker import TAKE_WAIT_S, Worker, WorkerOptions
from mcpx_hooks.supervisor.core.backoff import retry_wait_s
from mcpx_hooks.supervisor.core.frames import EndFrame, LogFrame, StartFrame, blank
from mcpx_hooks.supervisor.run.journal import RunJournal

#: Long enough for every test here; virtual, so it costs nothing.
HORIZON_S = 120.0


def _down(code: int | None = None) -> ClusterDown:
    down = ClusterDown("NATS is away")
    if code is not None:
        down.code = code  # type: ignore[attr-defined]
    return down


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


class FakeCluster:
    """What a `Cluster` does, scripted, with the virtual time of every call kept."""

    def __init__(self) -> None:
        self.calls: defaultdict[str, list[float]] = defaultdict(list)
        #: Per subject: what each follow opened delivers, in turn: its batches, then whether
        #: it is cut short (True) or stays open (False). Past the script, one stays open.
        self.follows: defaultdict[str, list[tuple[list[list[Stored]], bool]]] = defaultdict(list)
        #: Per subject: the open listen's sender (None before one is opened).
        self.listening: dict[str, trio.MemorySendChannel[Any]] = {}
        self.connected, self.reconnects = True, 0
        #: Whether the server answers a question (False: stalled, its connection up).
        self.answering = True
        #: Raised by the named method's next calls, one each, while any are left.
        self.failing: defaultdict[str, list[BaseException]] = defaultdict(list)
        self.held = True

    def _called(self, name: str) -> None:
        self.calls[name].append(trio.current_time())
        if self.failing[name]:
            raise self.failing[name].pop(0)

    async def status(self, probe_s: float = 0.0) -> tuple[bool, int]:
        self._called("status")
        if probe_s and not self.answering:
            await trio.sleep(probe_s)  # (the question's bound passes unanswered)
            return False, self.reconnects
        return self.connected, self.reconnects

    async def publish(self, subject: str, data: bytes, headers: Any = None) -> Published:
        self._called("publish")
        return Published(1, False)

    async def send_many(self, items: list[Any]) -> list[Any]:
        self._called("send_many")
        return list(items)

    async def acked(self, handles: list[Any]) -> None:
        self._called("acked")

    async def drop(self, handles: list[Any]) -> None:
        pass

    async def take(self, subject: str, lease_s: float, wait_s: float) -> list[Any]:
        self._called("take")
        await trio.sleep(wait_s)  # no request came
        return []

    async def last(self, stream: str, subject: str) -> Stored | None:
        return None

    async def request_held(self, seq: int, run_id: str) -> bool:
        self._called("request_held")
        return self.held

    @contextlib.asynccontextmanager
    async def follow(
        self, subject: str, start_seq: int | None = None
    ) -> AsyncIterator[trio.MemoryReceiveChannel[list[Stored]]]:
        self._called(f"follow {subject}")
        send, receive = trio.open_memory_channel[list[Stored]](math.inf)
        batches, cut = self.follows[subject].pop(0) if self.follows[subject] else ([], False)
        for batch in batches:
            send.send_nowait(batch)
        if cut:
            send.close()
        async with receive:
            yield receive

    @contextlib.asynccontextmanager
    async def listen(self, subject: str) -> AsyncIterator[trio.MemoryReceiveChannel[Any]]:
        self._called(f"listen {subject}")
        send, receive = trio.open_memory_channel[Any](math.inf)
        self.listening[subject] = send
        async with receive:
            yield receive


def test_the_backoff_doubles_from_its_first_wait_to_its_most() -> None:
    assert [retry_wait_s(n, 1.0, 30.0) for n in range(8)] == [0, 1, 2, 4, 8, 16, 30, 30]
    assert retry_wait_s(10**6, 1.0, 30.0) == 30.0  # no overflow however long it fails
    assert retry_s(1) == RETRY_FIRST_S
    assert [retry_s(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 5, 5] and RETRY_MAX_S == 5


async def test_a_publish_is_tried_again_after_a_backoff_until_it_is_taken(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    cluster.failing["publish"] = [_down() for _ in range(6)]
    publisher = Publisher(cluster, lease_s=30)  # type: ignore[arg-type]
    assert await publisher.send([("s", b"x", {})], "r1")
    times = cluster.calls["publish"]
    assert times[0] == 0 and _gaps(times) == [0.5, 1, 2, 4, 5, 5]


async def test_a_publish_that_hangs_is_given_up_after_its_bound_and_sent_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    hung = trio.Event()

    async def hang_once(subject: str, data: bytes, headers: Any = None) -> Published:
        cluster.calls["publish"].append(trio.current_time())
        if len(cluster.calls["publish"]) == 1:
            await hung.wait()
        return Published(1, False)

    cluster.publish = hang_once  # type: ignore[method-assign]
    assert await Publisher(cluster, 30).send([("s", b"x", {})], "r1")  # type: ignore[arg-type]
    assert cluster.calls["publish"] == [0, PUBLISH_S + RETRY_FIRST_S]


async def test_a_first_frame_onto_a_subject_not_empty_is_not_tried_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    cluster.failing["publish"] = [_down(WRONG_LAST_SEQUENCE)]
    assert not await Publisher(cluster, 30).send([("s", b"x", {})], "r1")  # type: ignore[arg-type]
    assert cluster.calls["publish"] == [0]


def _two_frames_a_batch(monkeypatch: pytest.MonkeyPatch) -> RunJournal:
    """A run of two log lines, published one frame a batch, one batch in flight."""
    monkeypatch.setattr(publish, "BATCH", 1)
    monkeypatch.setattr(publish, "WINDOW", 1)
    journal = RunJournal("r1")
    journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    for n in range(2):
        journal.append(blank(LogFrame, level="info", message=f"line {n}"))
    journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    return journal


async def test_an_unacknowledged_batch_is_sent_again_after_a_backoff_reset_by_an_ack(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = _two_frames_a_batch(monkeypatch)
    cluster = FakeCluster()
    # Frame 1 three times unacknowledged, then taken; frame 2 once.
    cluster.failing["acked"] = [_down(), _down(), _down(), None, _down()]  # type: ignore[list-item]
    failing = cluster.failing["acked"]

    async def acked(handles: list[Any]) -> None:
        cluster.calls["acked"].append(trio.current_time())
        if failing and (error := failing.pop(0)) is not None:
            raise error

    cluster.acked = acked  # type: ignore[method-assign]
    await Publisher(cluster, 30).publish(PublishedRun(journal))  # type: ignore[arg-type]
    sent = cluster.calls["send_many"]
    # Each send again waits out the backoff of the failures in a row: 0.5, 1, 2; the ack of
    # frame 1 starts it again, so frame 2's one failure waits 0.5.
    assert _gaps(sent) == [0.5, 1, 2, 0, 0.5, 0]


async def test_a_run_whose_acks_do_not_come_says_each_failure_once_and_its_end_once(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A NATS that does not answer (paused, or its JetStream stalled) fails every try: a
    # line at each one, every 5 s, flooded the worker's log for as long as it lasted.
    journal = _two_frames_a_batch(monkeypatch)
    cluster = FakeCluster()
    cluster.failing["publish"] = [_down() for _ in range(4)]  # the first frame's send
    # Frame 1: acks that never come, then NATS away, then taken; frame 2: one never comes.
    script: list[str | None] = ["hang"] * 6 + ["down", "down", None, "hang"]

    async def acked(handles: list[Any]) -> None:
        step = script.pop(0) if script else None
        if step == "hang":
            await trio.sleep_forever()
        if step == "down":
            raise _down()

    cluster.acked = acked  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="mcpx_hooks.worker"):
        await Publisher(cluster, 30).publish(PublishedRun(journal))  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    again, back = "run r1: %s; sending again", "run r1: JetStream acknowledges again; sending on"
    assert said == [
        again % "NATS is away",
        back,
        again % "no ack in time",
        again % "NATS is away",
        back,
        again % "no ack in time",
        back,
    ]
    assert not script and len(cluster.calls["send_many"]) == 9 + 2 + 1  # frames 1, 2, end


async def test_a_worker_that_cannot_take_backs_off_and_a_stop_ends_the_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    cluster.failing["take"] = [_down() for _ in range(4)]
    worker = Worker(None, cluster, WorkerOptions(url="nats://x", key=b"k" * 32))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        await trio.sleep(7.5 + TAKE_WAIT_S + 0.25)
        # 0.5, 1, 2, 4 after the failures; then a take that waits its TAKE_WAIT_S for none.
        assert _gaps(cluster.calls["take"]) == [0.5, 1, 2, 4, TAKE_WAIT_S]
        cluster.failing["take"] = [_down() for _ in range(10)]
        await trio.sleep(TAKE_WAIT_S + 0.5 + 0.25)  # a new failure waits the first wait again
        assert _gaps(cluster.calls["take"])[-2:] == [TAKE_WAIT_S, 0.5]
        stopped_at = trio.current_time()
        worker.stop()  # in a wait of 1 s: it ends now
    assert trio.current_time() == stopped_at


async def test_a_gateway_follows_a_run_again_after_a_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    subject = frames_subject("r1")
    cluster.follows[subject] = [([], True)] * 7
    with trio.move_on_after(HORIZON_S):
        async with trio.open_nursery() as nursery:
            mirrors = Mirrors(cluster, nursery, 8, 1 << 20, 1 << 30)  # type: ignore[arg-type]
            await mirrors.open("r1")
            await trio.sleep(30)
            nursery.cancel_scope.cancel()
    assert _gaps(cluster.calls[f"follow {subject}"]) == [0.5, 1, 2, 4, 5, 5, 5]


def _summary(run_id: str, status: str, lease_s: float) -> Stored:
    data = orjson.dumps({"runId": run_id, "status": status})
    return Stored(data, {Header.LEASE: f"{lease_s:g}"}, 1, 0, runs_subject(run_id))


class _Mirrors:
    """What the lease watch uses of `Mirrors`: when it opened a run to end it."""

    def __init__(self) -> None:
        self.opened: list[float] = []

    def __contains__(self, run_id: str) -> bool:
        return True

    async def open(self, run_id: str) -> MirrorJournal:
        self.opened.append(trio.current_time())
        return MirrorJournal(run_id, 1 << 16)


async def test_a_run_whose_lease_is_not_renewed_is_ended_once_per_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster, mirrors, index = FakeCluster(), _Mirrors(), RunsIndex(retain=8)
    runs = every(runs_subject("-"))
    cluster.follows[runs] = [([[_summary("r1", "running", 3)]], False)]
    with trio.move_on_after(HORIZON_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_index, cluster, index, mirrors)
            heartbeats = cluster.listening[every(lease_subject("-"))]
            # Renewed every second for 10 s (between the watch's ticks): never lapsed.
            await trio.sleep(0.5)
            for _ in range(10):
                await trio.sleep(1)
                heartbeats.send_nowait(Stored(b"", {}, 0, 0, lease_subject("r1")))
            assert mirrors.opened == []
            await trio.sleep(10)
            nursery.cancel_scope.cancel()
    # Last heard at 10.5; the watch looks each TICK_S: lapsed (> 3 s) at 14, then again
    # a lease after each ending (its ending heard anew).
    assert mirrors.opened == [14, 18]


async def _judged_after_silence(
    cluster: FakeCluster, silence: Callable[[bool], None], silent_s: float, after_s: float
) -> list[float]:
    """When a running run (lease 3 s, never renewed) is judged lost, with NATS silent for
    `silent_s` (`silence(True)`), then heard again for `after_s` (`silence(False)`)."""
    mirrors, index = _Mirrors(), RunsIndex(retain=8)
    cluster.follows[every(runs_subject("-"))] = [([[_summary("r1", "running", 3)]], False)]
    with trio.move_on_after(HORIZON_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_index, cluster, index, mirrors)
            silence(True)
            await trio.sleep(silent_s)
            assert mirrors.opened == []
            silence(False)
            await trio.sleep(after_s)
            nursery.cancel_scope.cancel()
    return mirrors.opened


async def test_a_lease_is_not_judged_while_the_gateway_is_cut_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()

    def cut_off(silent: bool) -> None:
        cluster.connected = not silent
        cluster.reconnects += not silent

    # (20.5: between two ticks, which goes first is not for a test.) Heard again as the
    # connection came back (the tick at 21): lapsed (> 3 s) at 25.
    assert await _judged_after_silence(cluster, cut_off, 20.5, 5) == [25]


async def test_a_lease_is_not_judged_while_nats_is_stalled_with_its_connection_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A server stopped or frozen keeps its connections: only a question it does not answer
    # tells its silence from a lost worker's.
    cluster = FakeCluster()

    def stalled(silent: bool) -> None:
        cluster.answering = not silent

    opened = await _judged_after_silence(cluster, stalled, 40.5, 10)  # (a stall of leases)
    # Each lapse found during the stall was taken for NATS's silence (heard all anew, after
    # its question's 2 s); the first after it, NATS answering, starts every lease anew: the
    # run is judged a lease after that (its lapse found within a lease, a question and a tick).
    assert len(opened) >= 1
    assert 40.5 + 3 <= opened[0] <= 40.5 + (3 + 2 + 1) + 3 + 1


async def test_the_summaries_are_followed_again_after_a_backoff_reset_by_a_summary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster, index = FakeCluster(), RunsIndex(retain=8)
    runs = every(runs_subject("-"))
    cut: tuple[list[list[Stored]], bool] = ([], True)
    cluster.follows[runs] = [cut, cut, cut, ([[_summary("r1", "result", 3)]], True), cut]
    with trio.move_on_after(HORIZON_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_index, cluster, index, _Mirrors())
            await trio.sleep(20)
            nursery.cancel_scope.cancel()
    assert _gaps(cluster.calls[f"follow {runs}"]) == [0.5, 1, 2, 0.5, 1]
    assert index.known("r1")


async def test_queued_requests_are_looked_at_on_the_tick_after_a_reconnection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from mcpx_hooks.supervisor.core.hooks import Profile
    from mcpx_hooks.supervisor.service.execrequest import parse_exec

    cluster, mirrors, queued = FakeCluster(), _Mirrors(), Queued()
    request = parse_exec(orjson.dumps({"argv": ["true"]}).decode())
    queued.add("r1", 7, request, "/", Profile.NONE)
    cluster.failing["request_held"] = [_down()]  # cut off again at the first look
    with trio.move_on_after(HORIZON_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_queued, cluster, queued, mirrors)
            await trio.sleep(3.2)
            assert cluster.calls["request_held"] == []
            cluster.reconnects = 1
            await trio.sleep(5)
            nursery.cancel_scope.cancel()
    # Looked at on the next tick (4), cut off, looked at again on the tick after (5): held.
    assert cluster.calls["request_held"] == [4 * TICK_S, 5 * TICK_S]
    assert _gaps(cluster.calls["status"])[:4] == [TICK_S] * 4


async def test_a_worker_renews_its_lease_every_third_of_it_through_failures(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster()
    published: list[tuple[float, str]] = []

    async def renew(msg: Any) -> None:
        cluster._called("renew")

    async def core_publish(subject: str, data: bytes) -> None:
        published.append((trio.current_time(), subject))

    cluster.renew, cluster.core_publish = renew, core_publish  # type: ignore[method-assign]
    cluster.failing["renew"] = [_down(), _down()]  # NATS away for a moment: renewed on
    options = WorkerOptions(url="nats://x", key=b"k" * 32, lease_s=3)
    worker = Worker(None, cluster, options)  # type: ignore[arg-type]
    with trio.move_on_after(9.5):
        await worker._keep_lease(object(), "r1")
    # The first a third of the lease after the take (the ack wait began at the delivery).
    assert cluster.calls["renew"] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    # Heard by the gateways each time it was renewed (not while NATS failed it).
    assert published == [(t, lease_subject("r1")) for t in (3, 4, 5, 6, 7, 8, 9)]


async def test_the_leases_are_listened_to_again_after_a_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster, index = FakeCluster(), RunsIndex(retain=8)
    leases = every(lease_subject("-"))
    cut: list[float] = []
    with trio.move_on_after(HORIZON_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_index, cluster, index, _Mirrors())
            for _ in range(3):  # cut off three times in a row, hearing nothing between
                cut.append(trio.current_time())
                cluster.listening[leases].close()
                await trio.sleep(4.25)
            nursery.cancel_scope.cancel()
    again = cluster.calls[f"listen {leases}"][1:]
    assert [b - a for a, b in zip(cut, again, strict=True)] == [0.5, 1, 2]
