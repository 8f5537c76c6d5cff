"""A run cancelled while it waits for a worker, with real parts: nats-server, a gateway, no
worker until the run is cancelled, then one. Its client's `cancel`, the client leaving with
`cancelOnDisconnect`, and SIGTERM of `exec --remote` each end it (`start`, `error{cause:
"cancelled"}`, `end`, its chain whole); the worker that takes its request afterwards runs
nothing of it."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from clusterparts import (
    Cluster,
    frames_until_end,
    need_nats,
    open_cluster,
    queued,
    raw_lines,
    start_gateway,
)
from service_client import CLI, ENV, Stream, arun, open_ws, read_all, run_remote

from mcpx_hooks.supervisor.cluster.names import Stream as Streams
from mcpx_hooks.supervisor.cluster.queued import CANCELLED_QUEUED
from mcpx_hooks.supervisor.core.chain import check
from mcpx_hooks.supervisor.core.order import check_order

#: How long the worker may take to take the request and let it go.
SETTLED_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    need_nats()
    parts = open_cluster(tmp_path, gateways=1, workers=0)
    try:
        yield parts
    finally:
        parts.stop()


def request(marker: Path, **more: Any) -> dict[str, Any]:
    return {"argv": ["sh", "-c", f"echo ran > {marker}"], "cwd": str(marker.parent), **more}


def ended_cancelled(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    """What JetStream holds of the run: its gateway's ending, whole, chained."""
    url = cluster.nats.client_url()
    frames = arun(frames_until_end(url, run_id))
    check_order(frames)
    assert [f["type"] for f in frames] == ["start", "error", "end"], frames
    assert frames[1]["message"] == CANCELLED_QUEUED and frames[1]["cause"] == "cancelled"
    assert check(arun(raw_lines(url, run_id))) is None
    return frames


async def requests_waiting(url: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(Streams.REQUESTS)
        return int(info.state.messages)
    finally:
        await nc.close()


def never_run(cluster: Cluster, marker: Path) -> None:
    """A worker started now takes the request (the requests stream empties: it was let
    go, bounded) and runs nothing of it."""
    url = cluster.nats.client_url()
    assert arun(requests_waiting(url)) == 1
    worker = cluster.add_worker()
    deadline = time.monotonic() + SETTLED_S
    while arun(requests_waiting(url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert arun(requests_waiting(url)) == 0
    assert not marker.exists()
    assert "Traceback" not in worker.log.read_text()


def test_a_cancel_while_queued_ends_the_run_and_no_worker_runs_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"

    async def cancelled() -> Stream:
        acked, nc = await queued(cluster.nats.client_url())
        try:
            async with open_ws(cluster.gateways[0], "/v1/exec") as ws:
                await ws.send(json.dumps(request(marker)))
                await acked.wait()
                await ws.send(json.dumps({"type": "cancel"}))
                return await read_all(ws)
        finally:
            await nc.close()

    seen = arun(cancelled())
    assert seen.code == 1000, seen
    assert ended_cancelled(cluster, seen.frames[0]["runId"]) == seen.frames
    never_run(cluster, marker)


def test_a_client_gone_while_queued_with_cancel_on_disconnect_ends_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"

    async def gone() -> str:
        acked, nc = await queued(cluster.nats.client_url())
        try:
            async with open_ws(cluster.gateways[0], "/v1/exec") as ws:
                await ws.send(json.dumps(request(marker, cancelOnDisconnect=True)))
                await acked.wait()
            # The run's id, as the runs stream will not say it: the subject's only run.
            sub = await nc.jetstream().subscribe("mcpx.frames.*", ordered_consumer=True)
            msg = await sub.next_msg(timeout=30)
            return str(msg.subject).rsplit(".", 1)[-1]
        finally:
            await nc.close()

    ended_cancelled(cluster, arun(gone()))
    never_run(cluster, marker)


def test_exec_remote_sigterm_while_queued_ends_the_run(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    gateway = cluster.gateways[0]

    async def terminated() -> subprocess.CompletedProcess[str]:
        acked, nc = await queued(cluster.nats.client_url())
        try:
            command = [*CLI, "exec", "--remote", gateway.url, "--json"]
            command += ["--", "sh", "-c", f"echo ran > {marker}"]
            proc = await asyncio.to_thread(
                subprocess.Popen,
                command,
                cwd=tmp_path,
                env=ENV,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                await acked.wait()
                proc.send_signal(signal.SIGTERM)
                out, err = await asyncio.to_thread(proc.communicate, timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    await asyncio.to_thread(proc.wait)
            return subprocess.CompletedProcess(command, proc.returncode, out, err)
        finally:
            await nc.close()

    done = arun(terminated())
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert [f["type"] for f in frames] == ["start", "error", "end"], done
    assert frames[1]["cause"] == "cancelled"
    assert done.returncode == 130, done  # interrupted, as a local run cancelled so
    assert "Traceback" not in done.stderr
    ended_cancelled(cluster, frames[0]["runId"])
    never_run(cluster, marker)


def test_a_run_waiting_for_a_worker_counts_against_max_runs(
    cluster: Cluster, tmp_path: Path
) -> None:
    # To its client a run waiting for a worker is in progress: a gateway started with
    # `--max-runs 1` refuses a second one, as a single `serve` does, until it ends.
    gateway = start_gateway(cluster.cwd, cluster.nats, "--max-runs", "1")
    marker = tmp_path / "ran"

    async def over() -> tuple[Stream, Stream, Stream]:
        acked, nc = await queued(cluster.nats.client_url())
        try:
            async with open_ws(gateway, "/v1/exec") as ws:
                await ws.send(json.dumps(request(marker)))
                await acked.wait()
                refused = await run_remote(gateway, {"argv": ["true"]})
                await ws.send(json.dumps({"type": "cancel"}))
                waited = await read_all(ws)
            acked.clear()
            async with open_ws(gateway, "/v1/exec") as ws:  # its end gave the slot back
                await ws.send(json.dumps(request(marker)))
                await acked.wait()
                await ws.send(json.dumps({"type": "cancel"}))
                return waited, refused, await read_all(ws)
        finally:
            await nc.close()

    try:
        waited, refused, next_one = arun(over())
    finally:
        assert gateway.stop() == 0
    assert refused.code == 1013, refused
    said = "too many runs in progress (the cap is 1); try again later"
    assert refused.errors[0]["message"] == said
    for seen in (waited, next_one):
        assert seen.code == 1000 and seen.frames[1]["cause"] == "cancelled", seen
    assert "Traceback" not in gateway.log()
