"""A gateway reads each run's frames once: its one reader of every run's frames (the history's,
`indexing.py`) fills the journal of a run whose id it just made and of a run it is reading,
so a client's exec socket and a follower on another gateway make no consumer of their own on
the frames stream; a run the reader cannot fill (not live yet, or a run that has ended) is
followed by a consumer of its own, as before. Real nats-server, real gateways and a worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import trio
import trio.testing
from clusterparts import Cluster, Nats, need_nats, open_cluster
from service_client import Stream, arun, open_ws, read_all, read_until

from mcpx_hooks.supervisor.cluster.indexing import StreamIndexer, serve_indexing
from mcpx_hooks.supervisor.cluster.link import open_cluster as open_link
from mcpx_hooks.supervisor.cluster.mirror import Mirrors
from mcpx_hooks.supervisor.cluster.names import Header, frames_subject, stream_specs
from mcpx_hooks.supervisor.cluster.names import Stream as Streams
from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.run.hookcontext import new_run_id
from mcpx_hooks.supervisor.run.telemetry import Telemetry


async def frames_consumers(url: str) -> int:
    """How many consumers the frames stream has now (asyncio: nats-py's own loop)."""
    client = await nats.connect(url)
    try:
        info = await client.jetstream().stream_info(Streams.FRAMES)
        return int(info.state.consumer_count)
    finally:
        await client.close()


async def _consumers_down_to(cluster: Cluster, count: int) -> None:
    """Waits (10 s at most) until the frames stream has `count` consumers: one a run made
    before a gateway's reader was live lingers a moment after its follow."""
    async with asyncio.timeout(10):
        while True:
            if await frames_consumers(cluster.nats.client_url()) == count:
                return
            await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_nats()
    parts = open_cluster(tmp_path_factory.mktemp("feed"), gateways=2, workers=1)
    try:
        yield parts
    finally:
        parts.stop()


async def exec_and_follow(cluster: Cluster) -> tuple[Stream, Stream, list[int]]:
    """A run through gateway A that prints a line and then waits 2 s, followed on gateway B
    once it has printed; the frames stream's consumers counted while each socket reads."""
    a, b = cluster.gateways
    counts: list[int] = []
    request = {"argv": ["sh", "-c", "echo begun; sleep 2; echo done"]}
    async with open_ws(a, "/v1/exec") as ran_ws:
        await ran_ws.send(json.dumps(request))
        ran = Stream()
        await read_until(ran_ws, ran, lambda f: f.get("text") == "begun")
        counts.append(await frames_consumers(cluster.nats.client_url()))
        async with open_ws(b, f"/v1/runs/{ran.objects[0]['runId']}?from=0") as seen_ws:
            seen = Stream()
            await read_until(seen_ws, seen, lambda f: f.get("text") == "begun")
            counts.append(await frames_consumers(cluster.nats.client_url()))
            await read_all(seen_ws, seen)
        await read_all(ran_ws, ran)
    return ran, seen, counts


def test_an_exec_socket_and_a_follower_on_another_gateway_make_no_consumer(
    cluster: Cluster,
) -> None:
    for gateway in cluster.gateways:  # each gateway's reader live, every part warm
        warm = arun(_exec(gateway, ["true"]))
        assert warm.code == 1000, warm
    readers = len(cluster.gateways)  # each gateway's one reader of every run's frames
    arun(_consumers_down_to(cluster, readers))
    ran, seen, counts = arun(exec_and_follow(cluster))
    assert counts == [readers, readers]
    assert ran.code == seen.code == 1000
    check_order(ran.objects)
    assert seen.objects == ran.objects
    texts = [f["text"] for f in ran.objects if f["type"] == "stdout"]
    assert texts == ["begun", "done"]


async def _exec(server: Any, argv: list[str]) -> Stream:
    async with open_ws(server, "/v1/exec") as ws:
        await ws.send(json.dumps({"argv": argv}))
        return await read_all(ws)


# The same parts in this process: the reader and a gateway's mirrors over one connection.


async def _published(cluster: Any, run_id: str, seqs: range) -> None:
    for seq in seqs:
        line = {"type": "stdout", "runId": run_id, "seq": seq, "at": "x", "text": str(seq)}
        headers = {Header.SEQ: str(seq), Header.MSG_ID: f"{run_id}.{seq}"}
        await cluster.publish(frames_subject(run_id), json.dumps(line).encode(), headers)


@pytest.mark.parametrize("live", [True, False])
async def test_a_fresh_run_is_fed_by_the_reader_only_while_it_is_live(
    tmp_path: Path, live: bool
) -> None:
    nats_server = Nats(tmp_path / "jetstream")
    await trio.to_thread.run_sync(nats_server.start)
    try:
        config = load_config([], cwd=tmp_path, environ={}, discover=False)
        async with (
            open_link(nats_server.url, "gateway", nats_server.access()) as link,
            trio.open_nursery() as nursery,
        ):
            await link.ensure_streams(stream_specs(config))
            reader = StreamIndexer(None, Telemetry(), 1 << 20)
            await nursery.start(serve_indexing, link, reader)
            mirrors = Mirrors(link, nursery, 8, 1 << 20, 1 << 30)
            mirrors.feed = reader
            before = await _reading(reader, nats_server)
            reader.live = live  # (not live: as while it reads a backlog)
            run_id = new_run_id()
            journal = await mirrors.open(run_id, fresh=True)
            during = await trio.to_thread.run_sync(lambda: consumers_of(nats_server))
            await _published(link, run_id, range(3))
            with trio.fail_after(10):
                while len(journal) < 3:
                    await journal.wait_past(len(journal))
            assert [f["text"] for f in journal.decoded(0)] == ["0", "1", "2"]
            assert during == (before if live else before + 1)
            assert (reader.running(run_id) is journal) == live  # one journal, recorded too
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(nats_server.stop)


def consumers_of(server: Nats) -> int:
    return asyncio.run(frames_consumers(server.client_url()))


async def _reading(reader: StreamIndexer, server: Nats) -> int:
    """Once the reader is live and its consumer made: how many consumers the stream has."""
    with trio.fail_after(10):
        while True:
            count = await trio.to_thread.run_sync(lambda: consumers_of(server))
            if reader.live and count:
                return count
            await trio.sleep(0.05)


async def test_a_run_the_reader_holds_is_opened_once_it_holds_what_the_stream_held(
    tmp_path: Path,
) -> None:
    """A follower of a running run gets the reader's own journal of it, not before that
    journal holds every frame the run's subject held when the follower asked: here the
    reader is held back while 199 more frames wait for it."""
    nats_server = Nats(tmp_path / "jetstream")
    await trio.to_thread.run_sync(nats_server.start)
    try:
        config = load_config([], cwd=tmp_path, environ={}, discover=False)
        async with (
            open_link(nats_server.url, "gateway", nats_server.access()) as link,
            open_link(nats_server.url, "worker", nats_server.access()) as worker,
            trio.open_nursery() as nursery,
        ):
            await link.ensure_streams(stream_specs(config))
            reader = StreamIndexer(None, Telemetry(), 1 << 20)
            gate = [trio.Event()]
            gate[0].set()
            take = reader.take

            async def gated(batch: list[Any]) -> None:
                await gate[0].wait()
                await take(batch)

            reader.take = gated
            await nursery.start(serve_indexing, link, reader)
            await _reading(reader, nats_server)
            run_id = new_run_id()
            await _published(worker, run_id, range(1))
            with trio.fail_after(10):
                while True:  # until the reader has read its first frame
                    if reader.running(run_id) is not None:
                        break
                    await trio.sleep(0.01)
            gate[0] = trio.Event()  # the reader reads nothing more for now
            await _published(worker, run_id, range(1, 200))
            mirrors = Mirrors(link, nursery, 8, 1 << 20, 1 << 30)
            mirrors.feed = reader
            opened: list[Any] = []

            async def open_it() -> None:
                opened.append(await mirrors.open(run_id))

            nursery.start_soon(open_it)
            held = reader.running(run_id)
            assert held is not None
            with trio.fail_after(10):
                while True:  # until it knows where the subject stood
                    if held.until is not None:
                        break
                    await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            assert opened == [] and len(held) == 1
            gate[0].set()
            with trio.fail_after(10):
                while True:
                    if opened:
                        break
                    await trio.sleep(0.01)
            assert opened[0] is held and len(held) == 200
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(nats_server.stop)
