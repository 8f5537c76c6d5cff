"""The service in process (`nursery.start(Service.serve)`), where a fault can be injected:
a handler or a run that breaks ends itself alone, and the service shuts down with nothing
left behind. The client is `websockets` (sync, in a thread), never trio-websocket."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.frames import StartFrame, blank
from mcpx_hooks.supervisor.core.hooks import Config
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.run import runtime as runtime_module
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import Run
from mcpx_hooks.supervisor.service import server
from mcpx_hooks.supervisor.service.broadcast import Broadcaster
from mcpx_hooks.supervisor.service.server import Listening, Service, ServiceOptions

#: Hooks and runs unconfined, and the service's requests allowed to get that.
UNCONFINED = (
    '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n[service]\nsandboxes = ["none"]\n'
)


def read(url: str, request: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Every object the server sends, and the close code (1006: no close frame)."""
    objects: list[dict[str, Any]] = []
    with connect(url, proxy=None, open_timeout=10) as ws:
        if request is not None:
            ws.send(json.dumps(request))
        try:
            while True:
                message = ws.recv(timeout=30)
                assert isinstance(message, str)
                objects.extend(json.loads(line) for line in message.split("\n"))
        except ConnectionClosed as exc:
            return objects, exc.rcvd.code if exc.rcvd else 1006


def unsandboxed_service(tmp_path: Path) -> tuple[Config, ServiceOptions]:
    """A config with sandbox "none" in `tmp_path`, and options for a service on any port."""
    (tmp_path / "c.toml").write_text(UNCONFINED)
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    return config, ServiceOptions(port=0, cwd=str(tmp_path), environ={})


async def test_a_failing_handler_or_run_ends_alone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    no_leaks: None,
) -> None:
    config, options = unsandboxed_service(tmp_path)

    async def broken_events(self: Service, conn: Any, target: Any, wake: Any) -> None:
        raise RuntimeError("a bug in one handler")

    async def broken_execute(run: Run, **_: Any) -> None:
        run.journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
        raise RuntimeError("a bug in one run")

    monkeypatch.setattr(Service, "_events", broken_events)
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        url = listening.url
        with caplog.at_level(logging.ERROR, logger="mcpx_hooks.server"):
            _, code = await trio.to_thread.run_sync(read, url + "/v1/events")
        assert code == 1006  # aborted, and the service goes on:
        frames, code = await trio.to_thread.run_sync(read, url + "/v1/exec", {"argv": ["true"]})
        assert code == 1000
        check_order(frames)
        assert frames[-2]["type"] == "result"
        monkeypatch.setattr(runtime_module, "execute", broken_execute)  # what a run executes
        frames, code = await trio.to_thread.run_sync(read, url + "/v1/exec", {"argv": ["true"]})
        assert code == 1000
        check_order(frames)
        assert [f["type"] for f in frames] == ["start", "error", "end"]
        assert "internal error" in frames[1]["message"]
        assert service.runs_in_progress == 0
        service.stop()
    assert "a bug in one handler" in caplog.text
    assert "Traceback" not in caplog.text  # one line for a person; the traceback is DEBUG
    assert service.connections == 0


async def test_stop_waits_for_runs_then_cancels_them(tmp_path: Path, no_leaks: None) -> None:
    (tmp_path / "c.toml").write_text(UNCONFINED)
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    limits = server.Limits(grace_s=0.2, drain_s=1)
    options = ServiceOptions(port=0, cwd=str(tmp_path), environ={}, limits=limits)
    code = "import time\nprint('ready', flush=True)\ntime.sleep(60)"
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        done = trio.Event()

        async def serve(task_status: trio.TaskStatus[Listening]) -> None:
            await service.serve(task_status=task_status)
            done.set()

        listening: Listening = await nursery.start(serve)
        result: list[Any] = []

        def client() -> None:
            with connect(listening.url + "/v1/exec", proxy=None) as ws:
                ws.send(json.dumps({"python": code}))
                frames = []
                try:
                    while True:
                        message = ws.recv(timeout=30)
                        assert isinstance(message, str)
                        frames.extend(json.loads(line) for line in message.split("\n"))
                        if frames[-1].get("text") == "ready":
                            trio.from_thread.run_sync(service.stop)
                except ConnectionClosed as exc:
                    result.append((frames, exc.rcvd.code if exc.rcvd else None))

        await trio.to_thread.run_sync(client)
        with trio.fail_after(10):
            await done.wait()
    ((frames, close),) = result
    assert close == 1000
    check_order(frames)
    assert frames[-2]["message"] == "cancelled: the server is shutting down"


async def test_a_failing_broadcaster_leaves_its_streams_to_follow_alone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    no_leaks: None,
) -> None:
    config, options = unsandboxed_service(tmp_path)
    rounds = 0

    async def round_then_break(self: Broadcaster) -> None:
        nonlocal rounds
        rounds += 1
        if rounds > 1:
            raise RuntimeError("a bug in the broadcaster")
        await real_round(self)

    real_round = Broadcaster._round
    monkeypatch.setattr(Broadcaster, "_round", round_then_break)
    code = "import time\nfor i in range(50):\n    print(i, flush=True)\n    time.sleep(0.002)"
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        with caplog.at_level(logging.ERROR, logger="mcpx_hooks.server"):
            frames, code_ = await trio.to_thread.run_sync(
                read, listening.url + "/v1/exec", {"python": code}
            )
        service.stop()
    assert code_ == 1000
    check_order(frames)
    assert [f["text"] for f in frames if f["type"] == "stdout"] == [str(i) for i in range(50)]
    assert rounds > 1
    assert "the broadcaster of run" in caplog.text


async def test_a_stock_client_s_text_that_is_not_utf8_is_closed_1007_in_our_words(
    tmp_path: Path, no_leaks: None
) -> None:
    config, options = unsandboxed_service(tmp_path)

    def send_raw_bytes_as_text(url: str) -> tuple[int, str] | None:
        with connect(url, proxy=None, open_timeout=10) as ws:
            ws.send(b"\xff\xfe not UTF-8", text=True)  # (the library sends them as they are)
            try:
                ws.recv(timeout=30)
            except ConnectionClosed as exc:
                return None if exc.rcvd is None else (exc.rcvd.code, exc.rcvd.reason)
        return None

    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        closes = [
            await trio.to_thread.run_sync(send_raw_bytes_as_text, listening.url + path)
            for path in ("/v1/exec", "/v1/events")
        ]
        service.stop()
    said = "invalid data: a text message or close reason that is not UTF-8"
    assert closes == [(1007, said)] * 2
