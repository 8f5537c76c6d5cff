"""A gateway reads each run's frames once: its one reader of every run's frames (the history's,
`indexing.py`) fills the journal of a run whose id it just made and of a run it is reading,
so a client's exec socket and a follower on another gateway make no consumer of their own on
the frames stream; a run the reader cannot fill (not live yet, or a run that has ended) is
followed by a consumer of its own, as before. Real nats-server, real gateways and a worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
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


class InProcess:
    """A nats-server; a gateway's connection to it and a worker's; the gateway's reader of
    every run's frames (which reads nothing while `gate` is unset) and its mirrors, fed by
    that reader."""

    def __init__(self, server: Nats, gateway: Any, worker: Any, nursery: trio.Nursery) -> None:
        self.server, self.gateway, self.worker = server, gateway, worker
        self.reader = StreamIndexer(None, Telemetry(), 1 << 20)
        self.gate = trio.Event()
        self.gate.set()
        take = self.reader.take

        async def gated(batch: list[Any]) -> None:
            await self.gate.wait()
            await take(batch)

        self.reader.take = gated
        self.mirrors = Mirrors(gateway, nursery, 8, 1 << 20, 1 << 30)
        self.mirrors.feed = self.reader

    async def consumers(self) -> int:
        return await trio.to_thread.run_sync(lambda: consumers_of(self.server))

    async def reading(self) -> int:
        """Once the reader is live and its consumer made: the stream's consumers."""
        with trio.fail_after(10):
            while True:
                count = await self.consumers()
                if self.reader.live and count:
                    return count
                await trio.sleep(0.05)


@contextlib.asynccontextmanager
async def in_process(tmp_path: Path) -> AsyncIterator[InProcess]:
    server = Nats(tmp_path / "jetstream")
    await trio.to_thread.run_sync(server.start)
    try:
        config = load_config([], cwd=tmp_path, environ={}, discover=False)
        async with (
            open_link(server.url, "gateway", server.access()) as gateway,
            open_link(server.url, "worker", server.access()) as worker,
            trio.open_nursery() as nursery,
        ):
            await gateway.ensure_streams(stream_specs(config))
            parts = InProcess(server, gateway, worker, nursery)
            await nursery.start(serve_indexing, gateway, parts.reader)
            await parts.reading()
            yield parts
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(server.stop)


def consumers_of(server: Nats) -> int:
    return asyncio.run(frames_consumers(server.client_url()))


@pytest.mark.parametrize("live", [True, False])
async def test_a_fresh_run_is_fed_by_the_reader_only_while_it_is_live(
    tmp_path: Path, live: bool
) -> None:
    async with in_process(tmp_path) as parts:
        before = await parts.consumers()
        parts.reader.live = live  # (not live: as while it reads a backlog)
        run_id = new_run_id()
        journal = await parts.mirrors.open(run_id, fresh=True)
        await _published(parts.worker, run_id, range(3))
        with trio.fail_after(10):
            while len(journal) < 3:
                await journal.wait_past(len(journal))
        # Counted once the frames came: a consumer of the run's own is made after `open`
        # returns (its follow starts then), and lives until the run's `end`, not sent here.
        during = await parts.consumers()
        assert [f["text"] for f in journal.decoded(0)] == ["0", "1", "2"]
        assert during == (before if live else before + 1)
        assert (parts.reader.running(run_id) is journal) == live  # one journal, recorded too


async def test_a_run_the_reader_holds_is_opened_once_it_holds_what_the_stream_held(
    tmp_path: Path,
) -> None:
    """A follower of a running run gets the reader's own journal of it, not before that
    journal holds every frame the run's subject held when the follower asked: here the
    reader is held back while 199 more frames wait for it."""
    async with in_process(tmp_path) as parts, trio.open_nursery() as nursery:
        run_id = new_run_id()
        await _published(parts.worker, run_id, range(1))
        with trio.fail_after(10):
            while True:  # until the reader has read its first frame
                if parts.reader.running(run_id) is not None:
                    break
                await trio.sleep(0.01)
        parts.gate = trio.Event()  # the reader reads nothing more for now
        await _published(parts.worker, run_id, range(1, 200))
        opened: list[Any] = []

        async def open_it() -> None:
            opened.append(await parts.mirrors.open(run_id))

        nursery.start_soon(open_it)
        held = parts.reader.running(run_id)
        assert held is not None
        with trio.fail_after(10):
            while True:  # until it knows where the subject stood
                if held.until is not None:
                    break
                await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()
        assert opened == [] and len(held) == 1
        parts.gate.set()
        with trio.fail_after(10):
            while True:
                if opened:
                    break
                await trio.sleep(0.01)
        assert opened[0] is held and len(held) == 200
