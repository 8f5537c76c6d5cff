"""A request queued while no worker runs is lost when nats-server restarts (the requests
stream is kept in memory): its client is told so with `error` + `end`, not left waiting, and
a worker started afterwards runs nothing of it. A `cancel` sent while the request waits is
kept by the gateway, and cancels the run once a worker has begun it. Real parts: nats-server,
a gateway and a worker (subprocesses), clients of another library."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from clusterparts import Cluster, open_cluster, queued, raw_frames, start_worker
from service_client import CLI, ENV, Stream, arun, open_ws, read_all, run_remote

from mcpx_hooks.supervisor.cli.common import EXIT_FAILED
from mcpx_hooks.supervisor.cluster.queued import REQUEST_LOST
from mcpx_hooks.supervisor.core.order import check_order

SECRET = "s3cr3t-8f2a-never-shown"
#: A request naming a secret, whose value stands in its argv too.
REQUEST = {
    "argv": ["sh", "-c", "echo never > ran", SECRET],
    "secrets": ["TOKEN"],
    "callerEnv": {"TOKEN": SECRET},
}


def restart(cluster: Cluster) -> None:
    cluster.nats.stop()
    cluster.nats.start()


def test_a_request_lost_with_a_restarted_nats_ends_its_run(tmp_path: Path) -> None:
    cluster: Cluster = open_cluster(tmp_path, gateways=1, workers=0)
    gateway = cluster.gateways[0]
    try:

        async def scenario() -> Stream:
            acked, nc = await queued(cluster.nats.client_url())
            try:
                async with open_ws(gateway, "/v1/exec") as ws:
                    await ws.send(json.dumps(REQUEST))
                    await acked.wait()
                    await nc.close()
                    await asyncio.to_thread(restart, cluster)
                    return await read_all(ws)
            finally:
                await nc.close()

        seen = arun(scenario(), timeout=30)
        assert seen.code == 1000
        check_order(seen.frames)
        assert [f["type"] for f in seen.frames] == ["start", "error", "end"]
        assert seen.frames[0]["argv"][:3] == ["sh", "-c", "echo never > ran"]
        assert SECRET not in json.dumps(seen.objects)
        error = seen.frames[1]
        assert error["message"] == REQUEST_LOST
        assert error["cause"] == "failed"
        run_id = error["runId"]

        # A worker started now runs nothing of it: the next request is its first run.
        cluster.workers.append(start_worker(tmp_path, cluster.nats))
        after = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo after"]}))
        assert after.code == 1000 and after.frames[-2]["type"] == "result"
        raw = [f for _, f in arun(raw_frames(cluster.nats.client_url(), run_id))]
        assert raw == seen.frames and SECRET not in json.dumps(raw)
        assert not (tmp_path / "ran").exists()
        assert "Traceback" not in Path(str(gateway.stderr)).read_text()
    finally:
        cluster.stop()


def test_exec_remote_exits_failed_when_its_request_is_lost(tmp_path: Path) -> None:
    cluster: Cluster = open_cluster(tmp_path, gateways=1, workers=0)
    gateway = cluster.gateways[0]
    try:

        async def scenario() -> subprocess.CompletedProcess[str]:
            acked, nc = await queued(cluster.nats.client_url())
            proc = await asyncio.create_subprocess_exec(
                *CLI,
                "exec",
                "--remote",
                gateway.url,
                "--",
                "true",
                env=ENV,
                cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                await acked.wait()
                await nc.close()
                await asyncio.to_thread(restart, cluster)
                out, err = await proc.communicate()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                await nc.close()
            assert proc.returncode is not None
            return subprocess.CompletedProcess([], proc.returncode, out.decode(), err.decode())

        done = arun(scenario(), timeout=30)
        assert done.returncode == EXIT_FAILED, done.stderr
        gateway_log = Path(str(gateway.stderr)).read_text()
        assert REQUEST_LOST in done.stdout + done.stderr, (done.stderr, gateway_log)
        assert "Traceback" not in done.stderr
    finally:
        cluster.stop()


def test_a_cancel_sent_while_the_request_waits_for_a_worker_cancels_the_run(
    tmp_path: Path,
) -> None:
    cluster: Cluster = open_cluster(tmp_path, gateways=1, workers=0)
    gateway = cluster.gateways[0]
    try:

        async def scenario() -> Stream:
            acked, nc = await queued(cluster.nats.client_url())
            try:
                async with open_ws(gateway, "/v1/exec") as ws:
                    await ws.send(json.dumps({"argv": ["sh", "-c", "sleep 60"]}))
                    await acked.wait()
                    await ws.send(json.dumps({"type": "cancel"}))
                    # The gateway keeps it for once a worker has begun the run.
                    worker = await asyncio.to_thread(start_worker, tmp_path, cluster.nats)
                    cluster.workers.append(worker)
                    return await read_all(ws)
            finally:
                await nc.close()

        seen = arun(scenario(), timeout=30)
        assert seen.code == 1000
        check_order(seen.frames)
        assert [f["type"] for f in seen.frames] == ["start", "error", "end"]
        assert seen.frames[1]["cause"] == "cancelled"
    finally:
        cluster.stop()
