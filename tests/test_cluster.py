"""The cluster with real parts: nats-server with JetStream on loopback, two gateways
(`serve --cluster`), three workers (`worker --cluster --lease 1`), clients of another
library. Every row of docs/cluster.md's failure table is a test here: a worker lost mid-run
(SIGKILL), a gateway lost, NATS restarted, a slow consumer; and every stream keeps the order
of a run's frames (`check_order`), as JetStream holds it and as each gateway serves it."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from clusterparts import (
    Cluster,
    Worker,
    need_nats,
    open_cluster,
    raw_frames,
    raw_lines,
    start_gateway,
    wait_line,
)
from service_client import (
    CLI,
    ENV,
    Server,
    Stream,
    arun,
    open_ws,
    read_all,
    read_until,
    run_remote,
)

from mcpx_hooks.supervisor.core.chain import check
from mcpx_hooks.supervisor.core.order import check_order


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_nats()
    cwd = tmp_path_factory.mktemp("cluster")
    parts = open_cluster(cwd, gateways=2, workers=3)
    try:
        yield parts
    finally:
        parts.stop()


def http_json(server: Server, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
        return json.loads(r.read())


def argv(script: str, marker: str = "mcpx-cluster") -> list[str]:
    return ["sh", "-c", script, marker]


async def follow(server: Server, run_id: str, start: int = 0) -> Stream:
    async with open_ws(server, f"/v1/runs/{run_id}?from={start}") as ws:
        return await read_all(ws)


def assert_whole(frames: list[dict[str, Any]]) -> None:
    check_order(frames)
    assert [f["seq"] for f in frames] == list(range(len(frames)))


def assert_raw_whole(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    """What JetStream holds for the run: each seq once, in order, the order of a run."""
    raw = arun(raw_frames(cluster.nats.client_url(), run_id))
    assert [seq for seq, _ in raw] == list(range(len(raw)))
    frames = [frame for _, frame in raw]
    assert_whole(frames)
    return frames


def test_a_run_through_one_gateway_is_followed_on_another(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]
    ran = arun(run_remote(a, {"argv": argv("echo one; echo two; echo '{\"n\": 3}'")}))
    assert ran.code == 1000, ran
    assert_whole(ran.frames)
    assert [f["text"] for f in ran.frames if f["type"] == "stdout"] == ["one", "two", '{"n": 3}']
    assert ran.frames[-2]["type"] == "result"
    run_id = ran.frames[0]["runId"]
    seen = arun(follow(b, run_id))
    assert seen.frames == ran.frames and seen.code == 1000
    later = arun(follow(b, run_id, 2))
    assert later.frames == ran.frames[2:]
    assert assert_raw_whole(cluster, run_id) == ran.frames
    past = arun(follow(b, run_id, len(ran.frames) + 1))
    assert past.code == 4416
    runs = http_json(b, "/v1/runs")
    mine = next(r for r in runs if r["runId"] == run_id)
    assert mine["status"] == "result" and mine["exitCode"] == 0 and mine["argv"][0] == "sh"


def test_the_events_of_every_part_come_from_one_stream(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]
    ran = arun(run_remote(a, {"argv": argv("echo hi")}))
    run_id = ran.frames[0]["runId"]

    async def events() -> list[dict[str, Any]]:
        async with open_ws(b, "/v1/events?kinds=run&since=0") as ws:
            stream = Stream()
            await read_until(
                ws, stream, lambda e: e.get("runId") == run_id and e["kind"] == "run.finished"
            )
            return stream.objects

    got = arun(events())
    assert all(e["kind"].startswith("run.") for e in got)
    seqs = [e["seq"] for e in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    mine = [e["kind"] for e in got if e.get("runId") == run_id]
    assert mine == ["run.started", "run.finished"]
    ahead = arun(run_remote_events(b, "/v1/events?since=99999999"))
    assert ahead.code == 4416


async def run_remote_events(server: Server, path: str) -> Stream:
    async with open_ws(server, path) as ws:
        return await read_all(ws)


def test_runs_at_once_are_each_taken_by_one_worker(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]
    marker = f"mcpx-test-{uuid.uuid4().hex}"

    async def many() -> list[Stream]:
        return await asyncio.gather(
            *(
                run_remote(a if i % 2 else b, {"argv": argv(f"sleep 0.3; echo {i}", marker)})
                for i in range(6)
            )
        )

    runs = arun(many())
    for i, ran in enumerate(runs):
        assert ran.code == 1000
        assert [f["text"] for f in ran.frames if f["type"] == "stdout"] == [str(i)]
        frames = assert_raw_whole(cluster, ran.frames[0]["runId"])
        assert [f["type"] for f in frames].count("start") == 1


def test_a_worker_lost_mid_run_ends_it_once_with_worker_lost(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]
    marker = f"mcpx-test-{uuid.uuid4().hex}"

    async def lose() -> tuple[Stream, Stream]:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv("echo begun; sleep 60", marker)}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("type") == "stdout")
            run_id = seen.frames[0]["runId"]
            worker = cluster.worker_running(marker)
            cluster.workers.remove(worker)
            family = worker.descendants()
            assert any(marker in " ".join(p.cmdline()) for p in family)
            worker.proc.send_signal(signal.SIGKILL)
            worker.stop(None)
            # Every process it had, the script's included, goes with it.
            _, alive = psutil.wait_procs(family, timeout=10)
            assert alive == []
            await read_all(ws, seen)
        return seen, await follow(b, run_id)

    seen, other = arun(lose())
    assert_whole(seen.frames)
    assert seen.frames[-2]["type"] == "error" and seen.frames[-2]["message"] == "worker lost"
    assert seen.frames[-1]["type"] == "end" and seen.frames[-1]["exitCode"] is None
    # It lasted from its start to the lapse: the worker's lease, seconds, not nothing.
    assert seen.frames[-1]["durationMs"] >= 1000
    assert other.frames == seen.frames
    # Both gateways saw the lapse; JetStream holds one error and one end.
    raw = assert_raw_whole(cluster, seen.frames[0]["runId"])
    assert [f["type"] for f in raw].count("error") == 1 and raw == seen.frames
    # Its `end`, a gateway's, chains the lines before it, the worker's and the gateway's.
    assert check(arun(raw_lines(cluster.nats.client_url(), raw[0]["runId"]))) is None
    summary = next(r for r in http_json(b, "/v1/runs") if r["runId"] == raw[0]["runId"])
    assert summary["status"] == "error"
    cluster.add_worker()


def test_a_worker_lost_after_the_outcome_is_said_and_the_outcome_stands(cluster: Cluster) -> None:
    """Lost in a suffix hook, after the run's `result`: no `error` (the outcome stands), but
    a `warning` says the worker was lost before `end`; without it the client saw the hook
    'still running' and then `end` with no word of why."""
    a = cluster.gateways[0]
    marker = f"mcpx-test-{uuid.uuid4().hex}"
    # The hook says it runs through a FIFO in the worker's root, the run's cwd.
    fifo = cluster.cwd / f"{marker}.fifo"
    os.mkfifo(fifo)
    script = f"echo up > {fifo.name}; sleep 60"
    hook = {"name": "slow", "on": "script", "phase": "suffix", "sandbox": "workspace"}
    slow = {**hook, "run": argv(script, marker)}

    def hook_up() -> bytes:  # (read-write: the open does not wait for the hook)
        fd = os.open(fifo, os.O_RDWR)
        try:
            return os.read(fd, 16) if select.select([fd], [], [], 30)[0] else b""
        finally:
            os.close(fd)

    async def lose() -> Stream:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": ["/bin/echo", "done"], "hooks": [slow]}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("type") == "result")
            assert await asyncio.to_thread(hook_up) == b"up\n"
            worker = cluster.worker_running(marker)
            cluster.workers.remove(worker)
            family = worker.descendants()
            worker.proc.send_signal(signal.SIGKILL)
            worker.stop(None)
            _, alive = psutil.wait_procs(family, timeout=10)
            assert alive == []
            return await read_all(ws, seen)

    seen = arun(lose())
    assert_whole(seen.frames)
    types = [f["type"] for f in seen.frames]
    assert "error" not in types and types[-2:] == ["warning", "end"], types
    assert seen.frames[-2]["message"].startswith("worker lost"), seen.frames[-2]
    assert seen.frames[-1]["exitCode"] is None
    raw = assert_raw_whole(cluster, seen.frames[0]["runId"])
    assert raw == seen.frames
    assert check(arun(raw_lines(cluster.nats.client_url(), raw[0]["runId"]))) is None
    summary = next(r for r in http_json(a, "/v1/runs") if r["runId"] == raw[0]["runId"])
    assert summary["status"] == "result"
    cluster.add_worker()


def test_a_client_of_a_lost_gateway_resumes_on_another(cluster: Cluster) -> None:
    doomed = cluster.add_gateway()
    b = cluster.gateways[1]

    async def resume() -> tuple[list[dict[str, Any]], Stream]:
        async with open_ws(doomed, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv("echo one; sleep 1; echo two")}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("text") == "one")
            doomed.proc.send_signal(signal.SIGKILL)
            doomed.stop(None)
            cluster.gateways.remove(doomed)
        first = seen.frames
        return first, await follow(b, first[0]["runId"], len(first))

    first, rest = arun(resume())
    whole = first + rest.frames
    assert_whole(whole)
    assert [f["text"] for f in whole if f["type"] == "stdout"] == ["one", "two"]
    assert whole[-2]["type"] == "result"


def test_a_lost_gateway_cancels_nothing_though_its_client_asked_cancel_on_disconnect(
    cluster: Cluster,
) -> None:
    """`exec --remote` asks `cancelOnDisconnect`: the gateway carries it out when its client
    goes. A gateway that dies (killed) carries out nothing: the run goes on to its end on its
    worker, and is followed to it on another gateway. `exec` said only "the server closed
    the socket: 1006", as if the run were gone with it; it now says the run may go on, and
    how to follow it."""
    doomed = cluster.add_gateway()
    b = cluster.gateways[1]
    script = "echo one; sleep 1; echo two"
    with subprocess.Popen(
        [*CLI, "exec", "--remote", doomed.url, "--json", "--", *argv(script)],
        cwd=cluster.cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        first = []
        while not first or first[-1].get("text") != "one":
            first.append(json.loads(proc.stdout.readline()))
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.stop(None)
        cluster.gateways.remove(doomed)
        code, said = proc.wait(timeout=60), proc.stderr.read()
    run_id = first[0]["runId"]
    assert code == 1 and said.splitlines() == [
        "mcpx-hooks exec: the connection to the server was lost (it ended without a close"
        " frame, 1006: the network cut it, or the server's process ended at once)",
        f"mcpx-hooks exec: run {run_id} had not ended; a serve cancels it once it finds this"
        " connection gone (exec asks it to), within a minute; a cluster's worker runs it on to"
        " its end when it was the gateway that was lost: mcpx-hooks runs show"
        f" {run_id} --remote {doomed.url} (or another gateway) says how it ended",
    ]
    rest = arun(follow(b, run_id, len(first)))
    whole = first + rest.frames
    assert_whole(whole)
    assert [f["text"] for f in whole if f["type"] == "stdout"] == ["one", "two"]
    assert whole[-2]["type"] == "result"


def test_a_slow_consumer_loses_nothing_and_slows_nothing(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]
    lines = 20_000

    async def slow() -> tuple[Stream, Stream]:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv(f"seq 1 {lines}")}))
            fast = Stream()
            await read_until(ws, fast, lambda f: f.get("type") == "start")
            run_id = fast.frames[0]["runId"]
            # The follower on the other gateway reads nothing until the run has ended.
            async with open_ws(b, f"/v1/runs/{run_id}?from=0", max_queue=1) as lagging:
                await read_all(ws, fast)
                return fast, await read_all(lagging)

    fast, lagging = arun(slow())
    assert fast.code == 1000 and lagging.code == 1000
    assert_whole(lagging.frames)
    assert lagging.frames == fast.frames
    assert sum(f["type"] == "stdout" for f in fast.frames) == lines


def test_a_stopped_gateway_gives_its_runs_its_grace_then_cancels_them_to_their_end(
    cluster: Cluster,
) -> None:
    # As a single `serve`: runs in progress may finish within `--grace`, then each is
    # cancelled and its client gets `error` "cancelled: the server is shutting down", `end`
    # and 1000 (not 1001 once the streams' drain ran out, the run cancelled behind it by
    # `cancelOnDisconnect`).
    stopping = start_gateway(cluster.cwd, cluster.nats, "--grace", "0")

    async def stop() -> Stream:
        async with open_ws(stopping, "/v1/exec") as ws:
            request = {"argv": argv("echo up; sleep 60"), "cancelOnDisconnect": True}
            await ws.send(json.dumps(request))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("type") == "stdout")
            stopping.proc.send_signal(signal.SIGTERM)
            return await read_all(ws, seen)

    seen = arun(stop())
    assert seen.code == 1000, seen
    assert_whole(seen.frames)
    assert seen.frames[-2]["type"] == "error"
    assert seen.frames[-2]["message"] == "cancelled: the server is shutting down"
    assert seen.frames[-1]["type"] == "end"
    assert stopping.stop(None) == 0
    assert "1 run(s) may finish within 0 s" in stopping.log()
    assert "Traceback" not in stopping.log()


def test_a_gateway_stopped_while_nats_stalls_exits_within_its_grace_and_30_s(
    tmp_path: Path,
) -> None:
    # NATS stopped (SIGSTOP: its connections stay open, nothing answers), then the gateway:
    # its cancel never reaches the worker, and it gave up on the run after 30 s, as
    # docs/cluster.md says; but its exec socket then waited out the 5 s drain for last
    # frames a run still going does not have (37 s, with --grace 0). `exec --remote` said
    # a serve would cancel the run once it found the connection gone, which this one,
    # shutting down, does not.
    parts = open_cluster(tmp_path, gateways=0, workers=1)
    gateway = parts.add_gateway("--grace", "0")
    client = subprocess.Popen(
        [*CLI, "exec", "--remote", gateway.url, "--", "sh", "-c", "echo up; sleep 120"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert parts.nats.proc is not None
    server = parts.nats.proc
    try:
        wait_line(client, client.stdout, "| up", tmp_path / "no.log")
        server.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        gateway.proc.send_signal(signal.SIGTERM)
        assert gateway.proc.wait(timeout=60) == 0
        took = time.monotonic() - stopped
        _, said = client.communicate(timeout=30)
    finally:
        server.send_signal(signal.SIGCONT)
        client.kill()
        client.communicate()
        parts.stop()
    # 30 s for the cancelled run, then the NATS connection closed (2 s for a flush that
    # does not come back).
    assert took < 35, took
    assert client.returncode == 1
    assert "the server said: the server is shutting down" in said
    assert "had not ended when the server shut down" in said, said
    assert "a serve cancels it once it finds this connection gone" not in said
    assert "1 run(s) did not end within 30 s of their cancel" in gateway.log()
    # (its runs' suffix hooks are on their workers: not "each within its timeoutMs" here)
    assert "1 run(s) cancelled after the grace; their workers run their suffix hooks" in (
        gateway.log()
    )
    assert "Traceback" not in gateway.log()


def test_a_stopped_worker_lets_its_runs_finish_and_says_so(tmp_path: Path) -> None:
    need_nats()
    parts = open_cluster(tmp_path, gateways=1, workers=0)
    log = tmp_path / "worker.log"
    # Its log on a pipe, read as it comes: the run may go on once the worker has said so.
    proc = subprocess.Popen(
        [*CLI, "worker", *parts.nats.flags("worker")],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = Worker(proc, log)
    gate = "mcpx-go"  # in the run's cwd, the worker's root, which it sees
    script = f"echo up; while [ ! -e {gate} ]; do sleep 0.05; done; echo done"

    async def stop() -> Stream:
        async with open_ws(parts.gateways[0], "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv(script)}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("type") == "stdout")
            proc.send_signal(signal.SIGTERM)
            said = "SIGTERM: taking no new requests; 1 run(s) may finish within 10 s"
            await asyncio.to_thread(wait_line, proc, proc.stdout, said, log)
            (tmp_path / gate).touch()
            return await read_all(ws, seen)

    try:
        wait_line(proc, proc.stdout, "taking runs", log)
        seen = arun(stop())
        assert worker.stop(None) == 0
    finally:
        if proc.poll() is None:
            worker.stop()
        parts.stop()
    assert [f.get("text") for f in seen.frames if f["type"] == "stdout"] == ["up", "done"]
    assert seen.frames[-2]["type"] == "result" and seen.frames[-1]["exitCode"] == 0


def test_a_request_too_large_for_nats_is_refused_and_the_gateway_goes_on(
    cluster: Cluster,
) -> None:
    # Under the WebSocket cap (1 MiB), but with the gateway's headers over NATS's
    # max_payload (1 MiB): NATS closed the gateway's connection for good, and every request
    # after it was "the cluster cannot be reached". Now it is refused, saying why.
    gateway = start_gateway(cluster.cwd, cluster.nats)
    try:
        large = arun(run_remote(gateway, {"argv": ["true"], "stdin": "x" * 1_048_450}))
        assert large.code == 1009, large
        said = large.errors[0]["message"]
        assert "as the cluster carries it" in said and "max_payload" in said, said
        after = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo after"]}))
        assert after.code == 1000 and after.frames[-1]["exitCode"] == 0, after
    finally:
        gateway.stop()
    assert "Traceback" not in gateway.log()


def test_a_gateway_refuses_a_run_past_max_runs_as_serve_does(cluster: Cluster) -> None:
    # A gateway took `--max-runs` and admitted every run all the same.
    gateway = start_gateway(cluster.cwd, cluster.nats, "--max-runs", "1")

    async def over() -> tuple[Stream, Stream, Stream]:
        async with open_ws(gateway, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv("echo up; sleep 60")}))
            first = Stream()
            await read_until(ws, first, lambda f: f.get("type") == "stdout")
            second = await run_remote(gateway, {"argv": ["true"]})
            await ws.send(json.dumps({"type": "cancel"}))
            await read_all(ws, first)
        return first, second, await run_remote(gateway, {"argv": ["true"]})

    try:
        first, second, after = arun(over())
    finally:
        assert gateway.stop() == 0
    assert second.code == 1013 and second.frames == [], second
    said = "too many runs in progress (the cap is 1); try again later"
    assert second.errors[0]["message"] == said
    assert first.frames[-1]["type"] == "end"
    assert after.code == 1000 and after.frames[-1]["exitCode"] == 0, after
    assert "Traceback" not in gateway.log()


def test_cancel_and_refusals_go_through_a_gateway(cluster: Cluster) -> None:
    a = cluster.gateways[0]

    async def cancel() -> Stream:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv("echo up; sleep 60")}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("type") == "stdout")
            await ws.send(json.dumps({"type": "cancel"}))
            return await read_all(ws, seen)

    seen = arun(cancel())
    assert_whole(seen.frames)
    assert seen.frames[-2]["type"] == "error" and "cancel" in seen.frames[-2]["message"]
    refused = arun(run_remote(a, {"argv": ["true"], "sandbox": "none"}))
    assert refused.code == 4400 and refused.frames == []
    assert "not allowed" in refused.errors[0]["message"]
    bad = arun(run_remote(a, {"argv": ["true"], "nonsense": 1}))
    assert bad.code == 4400
    missing = arun(follow(a, "no.such*run"))
    assert missing.code == 4404


def test_a_worker_refusing_a_cwd_says_it_is_the_worker_and_where(cluster: Cluster) -> None:
    # The client talks to a gateway; the cwd is the worker's to admit, on its machine: its
    # refusal said "this server" (or named nobody), which sent users to the gateway.
    gateway, host = cluster.gateways[0], socket.gethostname()
    gone = cluster.cwd / "not-on-the-worker"
    missing = arun(run_remote(gateway, {"argv": ["true"], "cwd": str(gone)}))
    assert missing.code == 4400 and missing.frames == [], missing
    assert missing.errors[0]["message"] == f"cwd: no such directory on the worker on {host}: {gone}"
    outside = arun(run_remote(gateway, {"argv": ["true"], "cwd": "/"}))
    assert outside.code == 4400, outside
    said = outside.errors[0]["message"]
    assert said.startswith(f"cwd: / is not inside a root of the worker on {host} ("), said
    assert "the directory it was started in" in said, said  # (its config sets no roots)
    assert "add its directory to each worker's config" in said, said


def test_hostile_queue_messages_are_dropped_and_the_workers_go_on(cluster: Cluster) -> None:
    import nats

    async def garbage() -> None:
        nc = await nats.connect(cluster.nats.client_url())
        js = nc.jetstream()
        for data in (
            b"",
            b"\xff\xfe",
            b"[]",
            b'{"runId": "x.y", "request": "{}"}',
            b'{"runId": "abc", "request": "not json"}',
            b"{" * 10_000,
        ):
            await js.publish("mcpx.requests", data)
        await nc.close()

    arun(garbage())
    ran = arun(run_remote(cluster.gateways[0], {"argv": argv("echo still")}))
    assert ran.code == 1000 and ran.frames[-2]["type"] == "result"
    assert all(w.proc.poll() is None for w in cluster.workers)
    for worker in cluster.workers:
        assert "Traceback" not in worker.log.read_text()


def test_nats_restarted_runs_keep_their_order(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]

    async def through_restart() -> Stream:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv("echo one; sleep 2; echo two")}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("text") == "one")
            cluster.nats.stop()
            cluster.nats.start()
            return await read_all(ws, seen)

    seen = arun(through_restart())
    assert seen.code == 1000
    assert_whole(seen.frames)
    assert [f["text"] for f in seen.frames if f["type"] == "stdout"] == ["one", "two"]
    assert arun(follow(b, seen.frames[0]["runId"])).frames == seen.frames
    after = arun(run_remote(b, {"argv": argv("echo after")}))
    assert after.code == 1000 and after.frames[-2]["type"] == "result"
    assert_raw_whole(cluster, after.frames[0]["runId"])
    for part in [*cluster.workers, *cluster.gateways]:
        log = part.log if isinstance(part.log, Path) else part.stderr
        assert "Traceback" not in Path(str(log)).read_text()


def test_nats_stalled_longer_than_a_lease_ends_no_run_as_worker_lost(cluster: Cluster) -> None:
    # Stopped, a server keeps its connections: to a gateway, its silence looked like the
    # worker's (a lease of 1 s here), and the run was ended while its worker ran it on.
    a = cluster.gateways[0]
    assert cluster.nats.proc is not None
    server = cluster.nats.proc
    # The parts are the module's: what this test reads of their logs starts here.
    parts = [*cluster.workers, *cluster.gateways]
    logs = [Path(str(p.log if isinstance(p.log, Path) else p.stderr)) for p in parts]
    before = [log.stat().st_size for log in logs]

    async def through_stall() -> Stream:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": argv("echo one; sleep 5; echo two")}))
            seen = Stream()
            await read_until(ws, seen, lambda f: f.get("text") == "one")
            server.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(12)  # twelve leases
            finally:
                server.send_signal(signal.SIGCONT)
            return await read_all(ws, seen)

    seen = arun(through_stall())
    assert seen.code == 1000
    assert_whole(seen.frames)
    assert [f["type"] for f in seen.frames if f["type"] == "error"] == []
    assert [f["text"] for f in seen.frames if f["type"] == "stdout"] == ["one", "two"]
    assert seen.frames[-2]["type"] == "result"
    # What failed meanwhile is said once, not at every second of the stall.
    for log, start in zip(logs, before, strict=True):
        with log.open("rb") as f:
            f.seek(start)
            written = f.read().decode()
        said = [line for line in written.splitlines() if "NATS: " in line]
        assert len(said) == len(set(said)), written
        assert "worker was lost" not in written


def test_a_frame_too_large_for_one_message_keeps_its_place(cluster: Cluster) -> None:
    # One line on the frames channel: a 2 MB result, over NATS's 1 MiB message size.
    big = (
        'exec 3>&"$MCPX_FRAMES_FD"; printf \'{"type": "result", "value": "\' >&3;'
        " head -c 2000000 /dev/zero | tr '\\0' x >&3; printf '\"}\\n' >&3"
    )
    ran = arun(run_remote(cluster.gateways[0], {"argv": argv(big)}))
    assert ran.code == 1000
    assert_whole(ran.frames)
    result = ran.frames[-2]
    assert result["type"] == "result" and result["value"] is None
    assert "over the cluster's message size" in result["advice"][-1]
    assert assert_raw_whole(cluster, ran.frames[0]["runId"]) == ran.frames


def asking_hook() -> dict[str, Any]:
    ask = {"ask": {"question": "ship it?", "default": "no", "deadlineMs": 60_000}}
    return {
        "name": "gate",
        "on": "script",
        "phase": "before",
        "effect": "ask",
        "sandbox": "workspace",
        "run": ["sh", "-c", f"cat >/dev/null; echo '{json.dumps(ask)}'"],
    }


def test_an_ask_is_answered_by_a_follower_on_another_gateway(cluster: Cluster) -> None:
    a, b = cluster.gateways[:2]
    # A second asking hook ("hold") keeps the run from its end until the second answer to
    # the first has been refused: the refusal cannot race the run's end.
    hooks = [asking_hook(), {**asking_hook(), "name": "hold"}]

    async def answer() -> tuple[Stream, Stream]:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": ["echo", "7"], "hooks": hooks}))
            started = Stream()
            ask = await read_until(ws, started, lambda o: o.get("type") == "ask")
            async with open_ws(b, f"/v1/runs/{ask['runId']}?from=0") as follower:
                followed = Stream()
                await read_until(follower, followed, lambda o: o.get("type") == "ask")
                reply = {"type": "answer", "askId": ask["askId"], "answer": "yes"}
                await follower.send(json.dumps(reply))
                await read_until(follower, followed, lambda o: o.get("type") == "hook")
                await follower.send(json.dumps(reply))  # a second answer: told, not taken
                await read_until(follower, followed, lambda o: "askId" in o and "seq" not in o)

                def second(o: dict[str, Any]) -> bool:
                    return o.get("type") == "ask" and o["askId"] != ask["askId"]

                held = [o for o in followed.frames if second(o)]
                hold = held[0] if held else await read_until(follower, followed, second)
                await follower.send(json.dumps({**reply, "askId": hold["askId"]}))
                await read_all(follower, followed)
            return await read_all(ws, started), followed

    started, followed = arun(answer())
    assert started.code == followed.code == 1000
    assert_whole(started.frames)
    assert started.frames == followed.frames
    gate, hold = [f for f in started.frames if f["type"] == "hook"]
    assert gate["name"] == "gate" and hold["name"] == "hold"
    assert gate["asked"] == {"question": "ship it?", "answer": "yes", "by": "client"}
    assert started.frames[-2]["type"] == "result" and started.frames[-2]["value"] == 7
    assert "the first counts" in followed.errors[0]["message"]
