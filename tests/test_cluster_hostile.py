"""What anyone the NATS server lets publish on the cluster's subjects may put there, against
real parts: nats-server with docs/cluster.md's users, a gateway, a worker, and a client of
another library publishing as the worker's user. A frame that is not one (a field of another
type than its frame's) breaks the run's record there on every gateway, said in its log, and
the gateway goes on serving; a gateway started afterwards reads it from the stream and goes
on too. A follower of such a run, or of one with a gap in its seqs, gets the frames before
the break and then an error that says where it is, never a socket left open for ever."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from clusterparts import Cluster, need_nats, open_cluster, start_gateway
from service_client import Server, Stream, arun, http_get, open_ws, read_all, run_remote

#: How long a gateway may take to read what was published.
READ_S = 20.0
AT = "2026-12-04T20:00:00Z"
HOOK = {"name": "h", "on": "script", "phase": "before", "status": "ok", "type": "hook"}

#: The worst a follower of a broken run may wait for its error message and close, in s.
BROKEN_S = 15.0
#: The close code and word that end the socket of a run whose record is broken.
BROKEN = (1011, "internal-error")
#: A frame that is one: the first of a run.
START = {"type": "start", "argv": ["true"], "cwd": "/", "sandbox": "none"}

#: Frames that are not frames, each alone on a run's subject (seq 0), and what makes them so.
NOT_FRAMES: dict[str, dict[str, Any]] = {
    "a status that is a list": {**HOOK, "status": ["x"]},
    "a duration that is a word": {**HOOK, "durationMs": "slow"},
    "a duration past any float": {**HOOK, "durationMs": 10**400},
    "a type that is a list": {"type": ["x"]},
    "a refusal that is a number": {**HOOK, "refused": 7},
    "an end whose exit code is text": {"type": "end", "exitCode": "0"},
    "an end whose duration is past 64 bits": {"type": "end", "exitCode": 0, "durationMs": 2**70},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_nats()
    parts = open_cluster(tmp_path_factory.mktemp("hostile"), gateways=1, workers=1)
    try:
        yield parts
    finally:
        parts.stop()


async def publish_runs(
    url: str,
    stream: str,
    bodies: dict[str, dict[str, Any]],
    headers: dict[str, str] | None = None,
    **envelope: Any,
) -> dict[str, str]:
    """Each body on a run of its own (`mcpx.<stream>.<run id>`), under its `runId` and
    `envelope`; the run ids, by what each body is."""
    nc = await nats.connect(url)
    run_ids = {}
    try:
        js = nc.jetstream()
        for what, body in bodies.items():
            run_id = f"hostile{secrets.token_hex(6)}"
            line = json.dumps({"runId": run_id, **envelope, **body}).encode()
            await js.publish(f"mcpx.{stream}.{run_id}", line, headers=headers)
            run_ids[what] = run_id
    finally:
        await nc.close()
    return run_ids


async def publish_frames(url: str, frames: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each frame as frame 0 of a run of its own (a batch of one: `Mcpx-Seq` 0, as a gateway
    publishes a run's ending); the run ids, by what each frame is."""
    return await publish_runs(url, "frames", frames, {"Mcpx-Seq": "0"}, seq=0, at=AT)


def skipped(gateway: Server, run_ids: dict[str, str]) -> None:
    """Once the gateway's log says each run's frame 0 is not one (bounded), the gateway is
    running still and runs a run to its end."""
    deadline = time.monotonic() + READ_S
    while True:
        log = gateway.log()
        said = [f"run {r}: frame 0 is not one" in log for r in run_ids.values()]
        if all(said) or gateway.proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert gateway.proc.poll() is None, log
    assert all(said), (run_ids, log)
    assert "Traceback" not in log and "a bug" not in log, log
    ran = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo still here"]}))
    assert ran.code == 1000, ran
    assert [f["text"] for f in ran.frames if f["type"] == "stdout"] == ["still here"]


def test_frames_that_are_not_frames_are_skipped_and_the_gateway_serves_on(
    cluster: Cluster,
) -> None:
    run_ids = arun(publish_frames(cluster.nats.client_url("worker"), NOT_FRAMES))
    skipped(cluster.gateways[0], run_ids)
    # A gateway started afterwards, with a history of its own: it reads them all anew.
    config = cluster.cwd / "later.toml"
    config.write_text(f'[history]\npath = "{cluster.cwd / "later" / "history.db"}"\n')
    later = start_gateway(cluster.cwd, cluster.nats, "--config", str(config))
    cluster.gateways.append(later)
    skipped(later, run_ids)


#: Run summaries that are not summaries (a worker writes them), each on a run's subject.
NOT_SUMMARIES: dict[str, dict[str, Any]] = {
    "a run id that is a number": {"runId": 5, "status": "running"},
    "a status that is an object": {"status": {"a": 1}},
    "an argv of numbers": {"status": "result", "argv": [1, 2]},
    "no status": {"argv": ["x"]},
}


def test_summaries_that_are_not_summaries_are_not_listed(cluster: Cluster) -> None:
    # `GET /v1/runs` passed them on, and `runs list` printed "5  -  None  exit -".
    gateway = cluster.gateways[0]
    run_ids = arun(publish_runs(cluster.nats.client_url("worker"), "runs", NOT_SUMMARIES))
    deadline = time.monotonic() + READ_S
    while True:
        log = gateway.log()
        said = [f"run {r}: a summary on the bus that is not one" in log for r in run_ids.values()]
        if all(said) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert all(said), (run_ids, log)
    status, body = http_get(gateway, "/v1/runs")
    assert status == 200
    listed = {str(s.get("runId")) for s in json.loads(body)}
    assert not listed & {*run_ids.values(), "5"}, listed


async def follow(gateway: Server, run_id: str) -> Stream:
    """A follower of the run from seq 0 to its socket's close, bounded."""
    async with open_ws(gateway, f"/v1/runs/{run_id}?from=0") as ws:
        return await asyncio.wait_for(read_all(ws), BROKEN_S)


async def publish_after(url: str, run_id: str, seq: int, body: dict[str, Any]) -> None:
    """One frame more on the run's subject, said to be its frame `seq`."""
    nc = await nats.connect(url)
    try:
        line = json.dumps({"runId": run_id, "seq": seq, "at": AT, **body}).encode()
        await nc.jetstream().publish(f"mcpx.frames.{run_id}", line, headers={"Mcpx-Seq": str(seq)})
    finally:
        await nc.close()


def broken_at(seen: Stream, run_id: str, seq: int, frames: int) -> None:
    """The follower got the run's `frames` first frames, then the error that says where its
    record breaks, and the socket closed with its code."""
    assert [f["seq"] for f in seen.frames] == list(range(frames)), seen
    assert [(e["code"], e["error"]) for e in seen.errors] == [BROKEN], seen
    message = seen.errors[0]["message"]
    assert f"run {run_id}'s record on the cluster is broken at frame {seq}" in message, message
    assert seen.code == BROKEN[0], seen


def test_a_follower_of_a_run_whose_first_frame_is_not_one_is_told_and_let_go(
    cluster: Cluster,
) -> None:
    # It was told 4404, "no run is retained": the gateway had kept nothing of it.
    gateway = cluster.gateways[0]
    url = cluster.nats.client_url("worker")
    run_ids = arun(publish_frames(url, {"not a frame": NOT_FRAMES["a status that is a list"]}))
    run_id = run_ids["not a frame"]
    broken_at(arun(follow(gateway, run_id)), run_id, 0, 0)
    skipped(gateway, run_ids)
    # Found broken before: a follower that comes afterwards is told at once, too.
    broken_at(arun(follow(gateway, run_id)), run_id, 0, 0)


def test_a_follower_of_a_run_with_a_gap_gets_the_frames_before_it_and_is_let_go(
    cluster: Cluster,
) -> None:
    # It got frame 0, then waited for ever for frame 1.
    gateway = cluster.gateways[0]
    url = cluster.nats.client_url("worker")
    run_id = arun(publish_frames(url, {"a start": START}))["a start"]
    arun(publish_after(url, run_id, 5, {"type": "stdout", "text": "past a gap"}))
    broken_at(arun(follow(gateway, run_id)), run_id, 1, 1)
    broken_at(arun(follow(gateway, run_id)), run_id, 1, 1)
    ran = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo still here"]}))
    assert ran.code == 1000, ran
    assert "Traceback" not in gateway.log(), gateway.log()
