"""Each gateway's own run history, with real parts: nats-server with JetStream on loopback,
gateways each with a history database of its own, a worker. A run queued on one gateway is
found by `/v1/search` on another, its downloads from that other one pass `runs verify`, a
gateway that was down catches up from the frames stream, and a gateway started again after
the cluster lost its streams serves the run from its history, frame for frame."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from clusterparts import Cluster, frames_until_end, need_nats, open_cluster, start_gateway
from service_client import (
    CLI,
    ENV,
    Server,
    Stream,
    arun,
    http_get,
    open_ws,
    read_all,
    read_until,
    run_remote,
)

#: How long a gateway may take to have indexed what a client of another saw end.
INDEXED_S = 20.0


def gateway(cluster: Cluster, name: str) -> Server:
    """A gateway of `cluster` whose history is `name`'s own."""
    config = cluster.cwd / f"{name}.toml"
    if not config.exists():
        config.write_text(f'[history]\npath = "{cluster.cwd / name / "history.db"}"\n')
    server = start_gateway(cluster.cwd, cluster.nats, "--config", str(config))
    cluster.gateways.append(server)
    return server


def searched(server: Server, query: str) -> list[dict[str, Any]]:
    """`/v1/search` on `server` once it finds the 3 lines `run` prints (bounded: the
    gateway indexes what the stream brings in its own time, not the client's)."""
    deadline = time.monotonic() + INDEXED_S
    while True:
        status, body = http_get(server, f"/v1/search?q={query}&limit=500")
        assert status == 200, body
        found = json.loads(body)
        printed = [m for m in found if m["type"] == "stdout"]
        if len(printed) >= 3 or time.monotonic() > deadline:
            return list(found)
        time.sleep(0.05)


def run(server: Server, needle: str, *, again: bool = False) -> list[dict[str, Any]]:
    """A run through `server`; `again`: asked again while the cluster is not back (1013)."""
    script = f"for i in 1 2 3; do echo {needle} line $i; done; echo '{{\"ok\": 1}}'"
    request = {
        "argv": ["sh", "-c", script],
        "hooks": [{"name": "hello", "on": "script", "phase": "before", "run": ["true"]}],
    }
    deadline = time.monotonic() + INDEXED_S
    stream = arun(run_remote(server, request))
    while again and stream.code == 1013 and time.monotonic() < deadline:
        time.sleep(0.2)
        stream = arun(run_remote(server, request))
    assert stream.code == 1000, stream
    assert stream.frames[-1]["type"] == "end"
    return stream.frames


def replayed(server: Server, run_id: str, start: int = 0) -> list[dict[str, Any]]:
    async def follow() -> list[dict[str, Any]]:
        async with open_ws(server, f"/v1/runs/{run_id}?from={start}") as ws:
            stream = await read_all(ws)
        assert stream.code == 1000, stream
        return stream.frames

    return list(arun(follow()))


def verified(tmp_path: Path, server: Server, run_id: str, frames: list[dict[str, Any]]) -> None:
    """The run's downloads from `server`: its frames as the client got them, whole, and a
    file `runs verify` passes."""
    status, ndjson = http_get(server, f"/v1/runs/{run_id}/frames.ndjson")
    assert status == 200, ndjson
    assert [json.loads(line) for line in ndjson.splitlines()] == frames
    status, text = http_get(server, f"/v1/runs/{run_id}/output.txt")
    assert status == 200 and b"line 3" in text, text
    path = tmp_path / f"{run_id}-{server.port}.ndjson"
    path.write_bytes(ndjson)
    done = subprocess.run(
        [*CLI, "runs", "verify", str(path)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    need_nats()
    parts = open_cluster(tmp_path_factory.mktemp("cluster"), gateways=0, workers=1)
    try:
        yield parts
    finally:
        parts.stop()
    for server in parts.gateways:
        assert "Traceback" not in server.log()


def test_every_gateway_records_the_clusters_runs_and_catches_up(
    cluster: Cluster, tmp_path: Path
) -> None:
    a, b = gateway(cluster, "a"), gateway(cluster, "b")
    needle = f"needle-{secrets.token_hex(4)}"
    first = run(a, f"{needle}-one")
    # Found on the other gateway, which only read it from the frames stream.
    matches = searched(b, f"{needle}-one")
    assert {m["runId"] for m in matches} == {first[0]["runId"]}
    assert sorted(m["seq"] for m in matches if m["type"] == "stdout")[:3] == [2, 3, 4]
    verified(tmp_path, b, first[0]["runId"], first)
    # The hook of the worker's run is in the other gateway's metrics.
    assert [f["name"] for f in first if f["type"] == "hook"] == ["hello"], first
    status, metrics = http_get(b, "/metrics")
    counted = b'mcpx_hooks_hook_duration_seconds_count{point="script",phase="before"} 1\n'
    assert status == 200 and counted in metrics, metrics
    # A gateway that was down takes up the stream where it stopped.
    b.stop()
    cluster.gateways.remove(b)
    second = run(a, f"{needle}-two")
    b = gateway(cluster, "b")
    assert {m["runId"] for m in searched(b, f"{needle}-two")} == {second[0]["runId"]}
    verified(tmp_path, b, second[0]["runId"], second)
    # Each keeps its own copy.
    for name in ("a", "b"):
        assert (cluster.cwd / name / "history.db").stat().st_size > 0
    for server in (a, b):
        server.stop()
        cluster.gateways.remove(server)


def test_a_gateway_started_again_serves_what_the_cluster_lost(
    cluster: Cluster, tmp_path: Path
) -> None:
    a = gateway(cluster, "c")
    needle = f"needle-{secrets.token_hex(4)}"
    frames = run(a, needle)
    run_id = frames[0]["runId"]
    assert len([m for m in searched(a, needle) if m["type"] == "stdout"]) == 3
    listed = [s for s in json.loads(http_get(a, "/v1/runs")[1]) if s["runId"] == run_id]
    # The cluster loses everything it held (its streams' store), the gateway is restarted.
    a.stop()
    cluster.gateways.remove(a)
    cluster.nats.stop()
    shutil.rmtree(cluster.nats.store)
    cluster.nats.start()
    a = gateway(cluster, "c")
    assert [s for s in json.loads(http_get(a, "/v1/runs")[1]) if s["runId"] == run_id] == listed
    assert replayed(a, run_id) == frames
    assert replayed(a, run_id, 3) == frames[3:]
    assert {m["runId"] for m in searched(a, needle)} == {run_id}
    verified(tmp_path, a, run_id, frames)
    # Lost again while the gateway runs (having read a run of the new stream): it reads the
    # stream made anew from its start, not from where it was in the one before.
    run(a, f"{needle}-between")
    searched(a, f"{needle}-between")
    cluster.nats.stop()
    shutil.rmtree(cluster.nats.store)
    cluster.nats.start()
    later = run(a, f"{needle}-later", again=True)
    assert {m["runId"] for m in searched(a, f"{needle}-later")} == {later[0]["runId"]}


def test_a_run_a_killed_gateway_was_streaming_to_its_client_is_in_its_history_once_back(
    cluster: Cluster,
) -> None:
    """A gateway killed while its client's run had sent only its first message: that message
    had reached the client but not the history (the recorder heard only of the run's later
    messages), while the gateway's place in the stream, written with another run's lines,
    was already past it; started again, it took up the run at its next message, found none
    of it in its history, and never recorded it."""
    a = gateway(cluster, "d")
    needle = f"needle-{secrets.token_hex(4)}"
    gate = cluster.cwd / f"{needle}.fifo"
    os.mkfifo(gate)
    request = {"argv": ["sh", "-c", f"read go < {gate.name}; echo {needle}-held line 1"]}

    async def held() -> str:
        async with open_ws(a, "/v1/exec") as ws:
            await ws.send(json.dumps(request))
            start = await read_until(ws, Stream(), lambda f: f.get("type") == "start")
            run_id = str(start["runId"])
            # Another run's lines written: the gateway's place in the stream with them,
            # past the held run's first message.
            await asyncio.to_thread(run, a, f"{needle}-other")
            assert await asyncio.to_thread(searched, a, f"{needle}-other")
            a.stop(signal.SIGKILL)
            cluster.gateways.remove(a)
        return run_id

    run_id = arun(held())
    with gate.open("w") as released:
        released.write("go\n")
    frames = arun(frames_until_end(cluster.nats.client_url(), run_id))
    assert frames[-1]["type"] == "end" and frames[-1]["exitCode"] == 0, frames
    again = gateway(cluster, "d")
    # A run after it: once the gateway has recorded it, it has read the held run's end.
    run(again, f"{needle}-after")
    searched(again, f"{needle}-after")
    status, body = http_get(again, f"/v1/search?q={needle}-held&limit=10")
    assert status == 200, body
    assert {m["runId"] for m in json.loads(body)} == {run_id}, body
    again.stop()
    cluster.gateways.remove(again)
