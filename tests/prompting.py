"""Helpers of the prompt hook tests: a config naming the loopback model, runs to their end,
one hook run on its own."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from loopmodel import LoopModel

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.hooks import Config, Hook
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.scripts import Script
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.runtime import open_runtime
from mcpx_hooks.supervisor.run.scriptrun import RunRequest


def serving() -> Iterator[LoopModel]:
    """A fixture: the loopback model of one test (`model = pytest.fixture(serving)`)."""
    with LoopModel() as server:
        yield server


def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fixture: the prompt cache (under the state directory) of this test alone."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def openai_model(url: str, **more: Any) -> dict[str, Any]:
    return {"provider": "openai", "url": url, "model": "loop-1", **more}


def prompt_hook(name: str, phase: str, prompt: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "on": "script", "phase": phase, "prompt": prompt, **more}


def config(
    tmp_path: Path, *hooks: dict[str, Any], models: dict[str, Any] | None = None, **top: Any
) -> Config:
    doc: dict[str, Any] = {
        "defaults": {"sandbox": "none"},
        "script": {"sandbox": "none"},
        "hooks": list(hooks),
        **top,
    }
    if models is not None:
        doc["models"] = models
    (tmp_path / "c.json").write_text(json.dumps(doc))
    return load_config(["c.json"], cwd=tmp_path, environ={}, discover=False)


async def run_to_end(cfg: Config, request: RunRequest) -> list[dict[str, Any]]:
    async with open_runtime(cfg) as runtime:
        run = runtime.new_run(request)
        await runtime.execute(run)
        frames = run.journal.frames
    check_order(frames)
    return frames


async def run_many(cfg: Config, requests: list[RunRequest]) -> list[list[dict[str, Any]]]:
    """The runs side by side in one supervisor."""
    async with open_runtime(cfg) as runtime:
        runs = [runtime.new_run(r) for r in requests]
        async with trio.open_nursery() as nursery:
            for run in runs:
                nursery.start_soon(runtime.execute, run)
        return [run.journal.frames for run in runs]


def _wrapped(more: dict[str, Any]) -> dict[str, Any]:
    """`input=value` as a request takes it, `(value,)`."""
    if "input" in more:
        more["input"] = (more["input"],)
    return more


def failing(tmp_path: Path, stderr: str = "boom", **more: Any) -> RunRequest:
    """A run whose script writes `stderr` and exits 3 (`input=`: the run's input)."""
    code = f"import sys; sys.stderr.write({stderr!r}); sys.exit(3)"
    return RunRequest(Script(argv=(sys.executable, "-c", code)), str(tmp_path), **_wrapped(more))


def succeeding(tmp_path: Path, value: Any = None, **more: Any) -> RunRequest:
    code = f"print({json.dumps(json.dumps(value))})"
    return RunRequest(Script(argv=(sys.executable, "-c", code)), str(tmp_path), **_wrapped(more))


def hooks_of(frames: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in frames if f["type"] == "hook"}


def of(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


async def one_hook(spawner: Spawner, hook: Hook, ctx: HookContext) -> HookReport:
    return await run_hook(spawner, hook, ctx)


def user_message(request: dict[str, Any]) -> str:
    return str(request["messages"][1]["content"])
