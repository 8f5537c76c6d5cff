"""A request that a worker took and never started is run by another once its lease lapses.
The worker that takes it here is a real NATS client on the workers' consumer that goes away
without a word (as a worker killed between taking a request and starting it); the one that
runs it is a real `worker`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from clusterparts import Cluster, open_cluster, start_worker
from service_client import Stream, arun, open_ws, read_all

from mcpx_hooks.supervisor.cluster.names import WORKERS_CONSUMER
from mcpx_hooks.supervisor.cluster.names import Stream as Streams
from mcpx_hooks.supervisor.core.order import check_order


def test_a_request_taken_but_never_started_is_run_by_another_worker(tmp_path: Path) -> None:
    import nats
    from nats.js import api

    cluster: Cluster = open_cluster(tmp_path, gateways=1, workers=0)
    try:

        async def scenario() -> tuple[Stream, int]:
            nc = await nats.connect(cluster.nats.client_url("worker"))
            js = nc.jetstream()
            config = api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=1.0)
            sub = await js.pull_subscribe(
                "mcpx.requests", durable=WORKERS_CONSUMER, stream=Streams.REQUESTS, config=config
            )
            async with open_ws(cluster.gateways[0], "/v1/exec") as ws:
                await ws.send(json.dumps({"argv": ["sh", "-c", "echo ran"]}))
                taken = (await sub.fetch(1, timeout=10))[0]
                delivered = taken.metadata.num_delivered
                await nc.close()  # gone, its request neither started nor acknowledged
                worker = await asyncio.to_thread(start_worker, tmp_path, cluster.nats)
                cluster.workers.append(worker)
                return await read_all(ws), delivered

        seen, delivered = arun(scenario())
        assert delivered == 1
        assert seen.code == 1000
        check_order(seen.frames)
        assert [f["text"] for f in seen.frames if f["type"] == "stdout"] == ["ran"]
        assert [f["type"] for f in seen.frames].count("start") == 1
    finally:
        cluster.stop()


def test_a_run_whose_client_left_before_any_worker_took_it_still_runs(tmp_path: Path) -> None:
    """A client that disconnects does not stop its run, even one still queued: a worker that
    starts later runs it, and a follower gets it whole."""
    from service_client import read_until

    cluster: Cluster = open_cluster(tmp_path, gateways=1, workers=0)
    gateway = cluster.gateways[0]
    try:

        async def scenario() -> Stream:
            async with open_ws(gateway, "/v1/exec") as ws:
                await ws.send(json.dumps({"argv": ["sh", "-c", "echo unwatched"]}))
            worker = await asyncio.to_thread(start_worker, tmp_path, cluster.nats)
            cluster.workers.append(worker)
            async with open_ws(gateway, "/v1/events?kinds=run.finished&since=0") as events:
                finished = await read_until(events, Stream(), lambda e: "runId" in e)
            async with open_ws(gateway, f"/v1/runs/{finished['runId']}?from=0") as follower:
                return await read_all(follower)

        seen = arun(scenario())
        assert seen.code == 1000
        check_order(seen.frames)
        assert [f["text"] for f in seen.frames if f["type"] == "stdout"] == ["unwatched"]
    finally:
        cluster.stop()
