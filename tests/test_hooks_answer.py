"""`/v1/hooks`' answer is encoded once per config and its bytes shared by every socket: a
config of thousands of hooks makes megabytes of JSON, which a socket each would multiply."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core import jsontext
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.service import hooksanswer
from mcpx_hooks.supervisor.service.server import Listening, Service, ServiceOptions
from mcpx_hooks.supervisor.service.targets import parse_target

UNCONFINED = '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n'


def hooks_toml(names: list[str]) -> str:
    return UNCONFINED + "".join(
        f'[[hooks]]\nname = "{name}"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        for name in names
    )


def read_hooks(url: str) -> tuple[dict[str, Any], int]:
    """`/v1/hooks`' one message and the close code."""
    with connect(url + "/v1/hooks", proxy=None, open_timeout=10) as ws:
        message = ws.recv(timeout=30)
        assert isinstance(message, str)
        try:
            ws.recv(timeout=30)
        except ConnectionClosed as exc:
            return json.loads(message), exc.rcvd.code if exc.rcvd else 1006
    raise AssertionError("a second message")


async def test_the_hooks_answer_is_encoded_once_per_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    encoded: list[int] = []
    dumps = jsontext.dumps

    def counting(value: Any) -> bytes:
        if isinstance(value, dict) and "hooks" in value:
            encoded.append(len(value["hooks"]))
        return dumps(value)

    monkeypatch.setattr(jsontext, "dumps", counting)
    (tmp_path / "a.toml").write_text(hooks_toml([f"h{i}" for i in range(40)]))
    (tmp_path / "b.toml").write_text(hooks_toml(["other"]))
    config = load_config(["a.toml"], cwd=tmp_path, environ={}, discover=False)
    options = ServiceOptions(port=0, cwd=str(tmp_path), environ={})
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        answers = [await trio.to_thread.run_sync(read_hooks, listening.url) for _ in range(6)]
        assert all(code == 1000 for _, code in answers)
        assert all(message == answers[0][0] for message, _ in answers)
        assert [h["name"] for h in answers[0][0]["hooks"]] == [f"h{i}" for i in range(40)]
        assert encoded == [40]  # six sockets, one encoding
        target = parse_target("/v1/hooks")
        assert await service.answer_at_upgrade(target) is await service.answer_at_upgrade(target)

        # A new config (as a reload makes) is encoded anew, once.
        runtime.config = load_config(["b.toml"], cwd=tmp_path, environ={}, discover=False)
        answers = [await trio.to_thread.run_sync(read_hooks, listening.url) for _ in range(3)]
        assert [[h["name"] for h in m["hooks"]] for m, _ in answers] == [["other"]] * 3
        assert encoded == [40, 1]
        nursery.cancel_scope.cancel()


async def test_other_clients_are_answered_while_the_hooks_answer_is_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    # The first `/v1/hooks` of a config encoded its answer on the event loop: 5,000 hooks
    # took ~40 ms, every other client waiting. An encoding held up here (in its thread)
    # until another client's `/healthz` is answered shows that one is answered meanwhile.
    entered, answered = threading.Event(), threading.Event()
    encode = hooksanswer.to_json

    def held(value: Any) -> Any:
        entered.set()
        answered.wait(5)
        return encode(value)

    monkeypatch.setattr(hooksanswer, "to_json", held)
    (tmp_path / "a.toml").write_text(hooks_toml(["a", "b"]))
    config = load_config(["a.toml"], cwd=tmp_path, environ={}, discover=False)
    options = ServiceOptions(port=0, cwd=str(tmp_path), environ={})
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, options)
        listening: Listening = await nursery.start(service.serve)
        got: list[tuple[dict[str, Any], int]] = []

        async def hooks() -> None:
            got.append(await trio.to_thread.run_sync(read_hooks, listening.url))

        def health() -> bytes:
            url = listening.url.replace("ws://", "http://") + "/healthz"
            with urllib.request.urlopen(url, timeout=3) as answer:
                return bytes(answer.read())

        async with trio.open_nursery() as clients:
            clients.start_soon(hooks)
            await trio.to_thread.run_sync(entered.wait, 10)
            assert b'"ok": true' in await trio.to_thread.run_sync(health)
            answered.set()
        assert [h["name"] for h in got[0][0]["hooks"]] == ["a", "b"] and got[0][1] == 1000
        nursery.cancel_scope.cancel()
