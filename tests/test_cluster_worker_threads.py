"""A cluster worker reads, checks and admits a request off its event loop: there, up to a
NATS message of JSON held the renewal of every lease the worker holds and its other runs.
A gateway reads, seals and signs one off its loop too."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from mcpx_hooks.supervisor.cluster import gateway as gateway_module
from mcpx_hooks.supervisor.cluster import worker as worker_module
from mcpx_hooks.supervisor.cluster.gateway import Gateway
from mcpx_hooks.supervisor.cluster.jet import Taken
from mcpx_hooks.supervisor.cluster.sealing import ClusterKey, pack_request
from mcpx_hooks.supervisor.cluster.worker import Worker, WorkerOptions
from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import Run
from mcpx_hooks.supervisor.service.options import ServiceOptions
from mcpx_hooks.supervisor.service.wire import Close, WireError

UNCONFINED = (
    '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n[service]\nsandboxes = ["none"]\n'
)
KEY = b"k" * 32


class _Cluster:
    """What `_serve_request` asks of the cluster: the run's subject is empty; settled."""

    def __init__(self) -> None:
        self.settled = 0

    async def last(self, stream: str, subject: str) -> None:
        return None

    async def settle(self, msg: Any) -> None:
        self.settled += 1


async def test_a_worker_unpacks_and_parses_a_request_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_loop: dict[str, bool] = {}

    def spy(name: str) -> Any:
        real = getattr(worker_module, name)

        def spied(*args: Any) -> Any:
            on_loop[name] = threading.current_thread() is threading.main_thread()
            return real(*args)

        return spied

    for name in ("unpack_request", "parse_exec"):
        monkeypatch.setattr(worker_module, name, spy(name))
    ran: list[list[str]] = []

    async def run(self: Worker, run: Run, config: Any) -> None:
        ran.append(list(run.request.script.argv))

    monkeypatch.setattr(Worker, "_run", run)
    (tmp_path / "c.toml").write_text(UNCONFINED)
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    data, headers = pack_request(ClusterKey(KEY), "r1", {"argv": ["echo", "x" * 100]})
    cluster = _Cluster()
    options = WorkerOptions(url="nats://x", key=KEY, cwd=str(tmp_path))
    async with open_runtime(config) as runtime:
        worker = Worker(runtime, cluster, options)  # type: ignore[arg-type]
        await worker._serve_request(Taken(object(), data, 1, headers))
    assert ran == [["echo", "x" * 100]] and cluster.settled == 1
    assert on_loop == {"unpack_request": False, "parse_exec": False}


async def test_a_gateway_reads_seals_and_signs_a_request_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request of a megabyte takes the gateway milliseconds to read and as many to seal
    and sign: on its loop, every other client of the gateway waited for them. A small one
    is read and packed on the loop, where it costs less than a thread's hops."""
    on_loop: dict[str, bool] = {}

    def spy(module: Any, name: str) -> None:
        real = getattr(module, name)

        def spied(*args: Any) -> Any:
            on_loop[name] = threading.current_thread() is threading.main_thread()
            return real(*args)

        monkeypatch.setattr(module, name, spied)

    for name in ("parse_json_object", "parse_exec", "pack_request"):
        spy(gateway_module, name)

    sizes = [gateway_module.OFF_LOOP_BYTES, 4000]  # (a large request, then a small one)

    async def request_message(self: Gateway, conn: Any, target: Any, wake: Any) -> str:
        return '{"argv": ["echo", "%s"], "callerEnv": {"A": "b"}}' % ("x" * sizes.pop(0))

    monkeypatch.setattr(Gateway, "_request_message", request_message)
    (tmp_path / "c.toml").write_text(UNCONFINED)
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    options = ServiceOptions(port=0, cwd=str(tmp_path), environ={})
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        gateway = Gateway(
            runtime,
            options,
            cluster=None,  # type: ignore[arg-type]
            mirrors=None,  # type: ignore[arg-type]
            index=None,  # type: ignore[arg-type]
            nursery=nursery,
            key=ClusterKey(KEY),
            max_payload=1024,  # (refused as too large once packed: no cluster needed)
        )
        ending = await gateway._exec(None, None, None)  # type: ignore[arg-type]
        assert isinstance(ending, WireError) and ending.code == Close.TOO_BIG
        assert on_loop == {"parse_json_object": False, "parse_exec": False, "pack_request": False}
        # A small one costs less on the loop than a thread's two hops.
        ending = await gateway._exec(None, None, None)  # type: ignore[arg-type]
    assert isinstance(ending, WireError) and ending.code == Close.TOO_BIG
    assert on_loop == {"parse_json_object": True, "parse_exec": True, "pack_request": True}
