"""The cluster's parts on their own: the asyncio bridge under Trio (order, backpressure,
errors, cancellation, nothing left running), the names table, the command line's flags,
`doctor --cluster` against a real nats-server, and a single-machine `serve` that never
imports nats."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import nats.errors
import pytest
import trio
import trio.testing
from clusterparts import Nats, start_worker
from service_client import CLI, ENV

from mcpx_hooks.supervisor.cluster.bridge import Deliver, open_bridge
from mcpx_hooks.supervisor.cluster.jet import tolerating
from mcpx_hooks.supervisor.cluster.names import RUN_ID, Stream, stream_specs
from mcpx_hooks.supervisor.cluster.watch import (
    SHORT_AFTER_S,
    SHORT_WAIT_S,
    SUMMARY_WAIT_S,
    RunsIndex,
)
from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.run.hookcontext import new_run_id


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}


async def test_the_bridge_calls_asyncio_and_gives_back_results_and_errors() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def fail() -> None:
        raise ValueError("from asyncio")

    async with open_bridge() as bridge:
        assert await bridge.call(double, 21) == 42
        with pytest.raises(ValueError, match="from asyncio"):
            await bridge.call(fail)
    assert "mcpx-nats" not in _threads()


async def test_a_stream_keeps_order_and_holds_the_producer_back_while_the_reader_lags() -> None:
    produced: list[int] = []

    async def producer(deliver: Deliver) -> None:
        for i in range(200):
            await deliver(i)
            produced.append(i)

    got: list[int] = []
    async with open_bridge() as bridge, bridge.stream(producer, bound=4) as items:
        async for item in items:
            # Never more ahead of the reader than the channel holds (and one in hand, one
            # being handed over).
            assert len(produced) - len(got) <= 4 + 2
            got.append(item)
            if item % 50 == 0:
                await trio.sleep(0.01)  # a slow reader
    assert got == list(range(200))


async def test_leaving_a_stream_early_cancels_its_producer() -> None:
    stopped = threading.Event()

    async def forever(deliver: Deliver) -> None:
        try:
            i = 0
            while True:
                await deliver(i)
                i += 1
        finally:
            stopped.set()

    async with open_bridge() as bridge:
        async with bridge.stream(forever, bound=2) as items:
            assert await items.receive() == 0
        assert stopped.is_set()
    assert "mcpx-nats" not in _threads()


async def test_a_cancelled_call_cancels_its_asyncio_task() -> None:
    cancelled = threading.Event()

    async def wait_long() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with open_bridge() as bridge:
        with trio.move_on_after(0.1):
            await bridge.call(wait_long)
        assert await trio.to_thread.run_sync(cancelled.wait, 10)


def test_a_failure_gone_on_without_is_logged_and_a_bug_is_told_as_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="mcpx_hooks.cluster"):
        with tolerating("close"):
            raise nats.errors.ConnectionClosedError
        with tolerating("an ack not sent"):
            raise TimeoutError
        with tolerating("unsubscribe"):
            raise ValueError("not NATS's")
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    assert len(said) == 1 and said[0][0] == logging.ERROR
    assert "unsubscribe: ValueError: not NATS's (a bug" in said[0][1]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert "NATS: close: nats: connection closed" in debug
    assert "NATS: an ack not sent: TimeoutError" in debug
    with pytest.raises(KeyboardInterrupt), tolerating("close"):  # never a BaseException
        raise KeyboardInterrupt


def test_the_names_fit_subjects_and_the_retention_follows_the_config(tmp_path: Path) -> None:
    assert RUN_ID.fullmatch(new_run_id())
    for hostile in ("a.b", "*", ">", "", "x" * 65, "a b"):
        assert not RUN_ID.fullmatch(hostile)
    (tmp_path / "c.toml").write_text("[runs]\nretain = 7\n")
    config = load_config([str(tmp_path / "c.toml")], cwd=tmp_path, environ={}, discover=False)
    specs = {s.name: s for s in stream_specs(config)}
    assert set(specs) == set(Stream)
    assert specs[Stream.RUNS].max_msgs == 7 and specs[Stream.RUNS].max_msgs_per_subject == 1
    assert specs[Stream.FRAMES].max_bytes == config.runs_retain_bytes
    assert specs[Stream.REQUESTS].work_queue and specs[Stream.REQUESTS].storage == "memory"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], check=False, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("serve", "--cluster", "http://x:1"), "--cluster: expected nats://HOST:PORT"),
        (("serve", "--cluster", "nats://127.0.0.1"), "--cluster: expected nats://HOST:PORT"),
        (("worker", "--cluster", "nats://a b:1"), "--cluster: expected nats://HOST:PORT"),
        (("worker", "--cluster", "nats://h:1", "--concurrency", "0"), "--concurrency"),
        (("worker", "--cluster", "nats://h:1", "--lease", "nan"), "--lease"),
    ],
)
def test_wrong_cluster_flags_exit_2_naming_the_flag(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done
    assert says in done.stderr and "Traceback" not in done.stderr


def test_a_worker_or_gateway_without_nats_says_so_and_exits_1(tmp_path: Path) -> None:
    nats = Nats(tmp_path / "jetstream")  # never started
    url = nats.url
    for args in (
        ("worker", *nats.flags("worker")),
        ("serve", "--no-auth", "--port", "0", *nats.flags("gateway")),
    ):
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 1, done
        assert f"cannot reach NATS at {url}" in done.stderr
        assert "Traceback" not in done.stderr


def test_doctor_checks_the_cluster(tmp_path: Path) -> None:
    nats = Nats(tmp_path / "jetstream")
    nats.start()
    try:
        access = ("--nats-auth-file", str(nats.auth_file("worker")))
        done = cli("doctor", "--cluster", nats.url, *access, cwd=tmp_path)
        assert "ok       access    credentials required" in done.stdout
        assert "ok       server    reachable" in done.stdout
        assert "ok       jetstream on" in done.stdout
        assert "MISSING  MCPX_FRAMES" in done.stdout  # no gateway or worker made them yet
        assert done.returncode == 1
        worker = start_worker(tmp_path, nats)  # makes them, empty
        try:
            made = cli("doctor", "--cluster", nats.url, *access, cwd=tmp_path)
        finally:
            worker.stop()
        # Empty, not `seq 1..0`; the names in one column, the bucket's stream's too.
        assert "  ok       MCPX_REQUESTS      empty\n" in made.stdout, made.stdout
        assert "  ok       OBJ_MCPX_ARTIFACTS empty\n" in made.stdout, made.stdout
    finally:
        nats.stop()
    down = cli("doctor", "--cluster", nats.url, *access, cwd=tmp_path)
    assert down.returncode == 1 and "DOWN     cannot reach NATS" in down.stdout


def test_the_single_machine_serve_imports_no_nats() -> None:
    code = (
        "import sys, json\n"
        "import mcpx_hooks.supervisor.cli.serve, mcpx_hooks.supervisor.service.server\n"
        "import mcpx_hooks.supervisor.cli.doctor, mcpx_hooks.supervisor.cli.parser\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'nats')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[Any] = json.loads(done.stdout)
    assert loaded == []


def test_fit_keeps_a_frame_s_place_and_type() -> None:
    import orjson

    from mcpx_hooks.supervisor.cluster.names import fit

    small = orjson.dumps({"type": "stdout", "seq": 3, "text": "hi"})
    assert fit(small, 1 << 20) is small
    out = orjson.loads(fit(orjson.dumps({"type": "emit", "seq": 4, "value": "x" * 9000}), 8192))
    assert out["type"] == "warning" and out["seq"] == 4
    hook = {"type": "hook", "seq": 5, "phase": "before", "name": "h", "stderrTail": "y" * 9000}
    kept = orjson.loads(fit(orjson.dumps(hook), 8192))
    assert kept == {k: v for k, v in hook.items() if k != "stderrTail"}


async def test_two_gateways_ending_one_lost_run_at_once_end_it_once(tmp_path: Path) -> None:
    """The idempotence of `publish_lost`: two gateways' connections, each with its own
    mirror of a run whose worker is gone, end it at the same moment; JetStream holds one
    `error` "worker lost" and one `end`."""
    from clusterparts import raw_frames, raw_lines

    from mcpx_hooks.supervisor.cluster.ending import publish_lost
    from mcpx_hooks.supervisor.cluster.link import open_cluster
    from mcpx_hooks.supervisor.cluster.mirror import Mirrors
    from mcpx_hooks.supervisor.cluster.names import Header, frames_subject
    from mcpx_hooks.supervisor.core.chain import check
    from mcpx_hooks.supervisor.core.order import check_order

    nats = Nats(tmp_path / "jetstream")
    await trio.to_thread.run_sync(nats.start)
    try:
        config = load_config([], cwd=tmp_path, environ={}, discover=False)
        run_id = new_run_id()
        start = {
            "type": "start",
            "runId": run_id,
            "seq": 0,
            "at": "2026-01-01T00:00:00.000Z",
            "argv": ["true"],
            "cwd": "/",
            "sandbox": "workspace",
        }
        async with (
            open_cluster(nats.url, "one", nats.access()) as one,
            open_cluster(nats.url, "two", nats.access()) as two,
            trio.open_nursery() as nursery,
        ):
            await one.ensure_streams(stream_specs(config))
            headers = {Header.SEQ: "0", Header.MSG_ID: f"{run_id}.0"}
            await one.publish(frames_subject(run_id), json.dumps(start).encode(), headers)
            mirrors = [Mirrors(c, nursery, 8, 1 << 20, 1 << 30) for c in (one, two)]
            journals = [await m.open(run_id) for m in mirrors]
            assert all(len(j) == 1 for j in journals)
            ended: list[bool] = []

            async def end(cluster: Any, journal: Any) -> None:
                ended.append(await publish_lost(cluster, journal, 5))

            async with trio.open_nursery() as both:
                both.start_soon(end, one, journals[0])
                both.start_soon(end, two, journals[1])
            nursery.cancel_scope.cancel()
        raw = await trio.to_thread.run_sync(
            lambda: asyncio.run(raw_frames(nats.client_url(), run_id))
        )
        assert [seq for seq, _ in raw] == [0, 1, 2]
        frames = [f for _, f in raw]
        check_order(frames)
        assert [f["type"] for f in frames] == ["start", "error", "end"]
        assert frames[1]["message"] == "worker lost"
        assert True in ended
        # The gateway's `end` chains the lines before it, as a worker's does.
        lines = await trio.to_thread.run_sync(
            lambda: asyncio.run(raw_lines(nats.client_url(), run_id))
        )
        assert check(lines) is None
    finally:
        await trio.to_thread.run_sync(nats.stop)


async def test_a_fresh_run_event_waits_for_the_list_to_say_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`GET /v1/runs` on a gateway shows what a run event its client was told says: the
    event waits for the run's summary (bounded), the list and the events coming apart."""
    index = RunsIndex(retain=4)
    subject = "mcpx.runs.r1"
    finished = {"kind": "run.finished", "runId": "r1"}
    order: list[str] = []

    async def told() -> None:
        await index.caught_up(finished)
        order.append(index.summaries()[0]["status"])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(told)
        await trio.sleep(1)
        index.take_summary(subject, b'{"runId": "r1", "status": "running"}', {})
        await trio.sleep(1)
        assert order == []  # still running: not yet
        index.take_summary(subject, b'{"runId": "r1", "status": "result"}', {})
    assert order == ["result"]
    # A run that never gets its summary (no longer retained, say) waits no longer than
    # the bound; other events do not wait at all.
    start = trio.current_time()
    await index.caught_up({"kind": "run.started", "runId": "gone"})
    assert trio.current_time() - start == SUMMARY_WAIT_S
    start = trio.current_time()
    await index.caught_up({"kind": "hook.finished", "runId": "gone"})
    await index.caught_up({"kind": "run.finished"})
    assert trio.current_time() == start
    # Events of runs that never get one (a publisher that is not a worker) held a feed back
    # 10 s each: after a wait ran out, the next ones are short, for a while.
    for n in range(5):
        await index.caught_up({"kind": "run.started", "runId": f"forged{n}"})
    assert trio.current_time() - start == 5 * SHORT_WAIT_S
    await trio.sleep(SHORT_AFTER_S)
    start = trio.current_time()
    await index.caught_up({"kind": "run.started", "runId": "late"})
    assert trio.current_time() - start == SUMMARY_WAIT_S


async def test_two_gateways_ending_one_lost_request_at_once_end_it_once(tmp_path: Path) -> None:
    """The idempotence of a lost request's ending (`queued.py`): two gateways end the same
    never-begun run at once; JetStream holds one `start`, `error` and `end`, and a worker's
    first frame for it afterwards is refused (its subject is not empty)."""
    from clusterparts import raw_frames, raw_lines

    from mcpx_hooks.supervisor.cluster.ending import publish_ending
    from mcpx_hooks.supervisor.cluster.jet import WRONG_LAST_SEQUENCE, ClusterDown
    from mcpx_hooks.supervisor.cluster.link import open_cluster
    from mcpx_hooks.supervisor.cluster.mirror import Mirrors
    from mcpx_hooks.supervisor.cluster.names import Header, frames_subject
    from mcpx_hooks.supervisor.cluster.queued import REQUEST_LOST
    from mcpx_hooks.supervisor.core.chain import check
    from mcpx_hooks.supervisor.core.frames import ErrorCause, StartFrame, blank
    from mcpx_hooks.supervisor.core.order import check_order

    nats = Nats(tmp_path / "jetstream")
    await trio.to_thread.run_sync(nats.start)
    try:
        config = load_config([], cwd=tmp_path, environ={}, discover=False)
        run_id = new_run_id()
        start = blank(StartFrame, argv=("true",), cwd="/", sandbox="workspace")
        async with (
            open_cluster(nats.url, "one", nats.access()) as one,
            open_cluster(nats.url, "two", nats.access()) as two,
            trio.open_nursery() as nursery,
        ):
            await one.ensure_streams(stream_specs(config))
            mirrors = [Mirrors(c, nursery, 8, 1 << 20, 1 << 30) for c in (one, two)]
            journals = [await m.open(run_id) for m in mirrors]
            ended: list[bool] = []

            async def end(cluster: Any, journal: Any) -> None:
                ended.append(
                    await publish_ending(
                        cluster, journal, 0, REQUEST_LOST, cause=ErrorCause.FAILED, start=start
                    )
                )

            async with trio.open_nursery() as both:
                both.start_soon(end, one, journals[0])
                both.start_soon(end, two, journals[1])
            claim = {Header.SEQ: "0", Header.MSG_ID: f"{run_id}.0", Header.LAST_SUBJECT_SEQ: "0"}
            with pytest.raises(ClusterDown) as refused:
                await one.publish(frames_subject(run_id), b'{"type": "start"}', claim)
            assert getattr(refused.value, "code", None) == WRONG_LAST_SEQUENCE
            nursery.cancel_scope.cancel()
        raw = await trio.to_thread.run_sync(
            lambda: asyncio.run(raw_frames(nats.client_url(), run_id))
        )
        assert [seq for seq, _ in raw] == [0, 1, 2]
        frames = [f for _, f in raw]
        check_order(frames)
        assert [f["type"] for f in frames] == ["start", "error", "end"]
        assert frames[1]["message"] == REQUEST_LOST and frames[1]["cause"] == "failed"
        assert True in ended
        lines = await trio.to_thread.run_sync(
            lambda: asyncio.run(raw_lines(nats.client_url(), run_id))
        )
        assert check(lines) is None
    finally:
        await trio.to_thread.run_sync(nats.stop)


async def test_a_claim_onto_a_subject_not_empty_is_told_refused(tmp_path: Path) -> None:
    """A worker's claim of a run (its first frame, only onto an empty subject) whose subject
    holds another's frames (a gateway ended the run): JetStream refuses it, and the worker
    is told so at once, to run nothing. (nats-py never fails a pipelined publish's ack with
    JetStream's refusal: a claim sent so was sent again for ever.)"""
    from mcpx_hooks.supervisor.cluster.link import open_cluster
    from mcpx_hooks.supervisor.cluster.names import Header, frames_subject
    from mcpx_hooks.supervisor.cluster.publish import Publisher

    nats = Nats(tmp_path / "jetstream")
    await trio.to_thread.run_sync(nats.start)
    try:
        config = load_config([], cwd=tmp_path, environ={}, discover=False)
        run_id = new_run_id()
        subject = frames_subject(run_id)
        async with open_cluster(nats.url, "worker", nats.access("worker")) as cluster:
            await cluster.ensure_streams(stream_specs(config))
            ending = {Header.SEQ: "0", Header.MSG_ID: f"{run_id}.lost.0"}
            await cluster.publish(subject, b'{"type": "start"}', ending)
            claim = {Header.SEQ: "0", Header.MSG_ID: f"{run_id}.0", Header.LAST_SUBJECT_SEQ: "0"}
            with trio.fail_after(10):
                sent = await Publisher(cluster, 1).send([(subject, b"{}", claim)], run_id)
            assert sent is False
    finally:
        await trio.to_thread.run_sync(nats.stop)


def test_a_part_tells_each_failure_of_a_reconnection_once(tmp_path: Path) -> None:
    # A NATS server down for long is tried again 4 times a second: a line at each attempt
    # flooded the part's log; each failure is now said once until NATS is back.
    server = Nats(tmp_path / "jetstream")
    server.start()
    worker = start_worker(tmp_path, server)
    server.stop()
    # The server's port now takes each attempt and hangs up on it: attempts to count.
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", server.port))
        listener.listen()
        listener.settimeout(30)
        for _ in range(8):
            listener.accept()[0].close()
        assert worker.stop() == 0
    said = [line for line in worker.log.read_text().splitlines() if "NATS: " in line]
    # Each kind of failure once: a hang-up shows as one of a few (an unexpected EOF, no
    # INFO, a broken pipe, the connection lost, disconnected), which of them by timing; a
    # line an attempt would be one for each of the 8.
    assert len(said) == len(set(said)) and len(said) < 8, said
    assert any("disconnected from" in line for line in said)
