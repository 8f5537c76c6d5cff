"""Prompt once, keep the script, end to end: a prompt hook asks the loopback model once, the
next run reuses the cached command without asking, `prompts promote` makes it a run hook,
and the run after that needs no model at all. Real processes, a real HTTP server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import loopmodel

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def mcpx(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60
    )


def hook_frame(out: str, name: str) -> dict[str, Any]:
    frames = [json.loads(line) for line in out.splitlines()]
    found: dict[str, Any] = next(
        f for f in frames if f.get("type") == "hook" and f.get("name") == name
    )
    return found


def test_prompt_once_then_keep_the_script(tmp_path: Path, marker: str) -> None:
    # The command the model writes carries the marker: no process of it may outlive the test.
    argv = ["sh", "-c", f"echo tools-checked # {marker}"]
    with loopmodel.LoopModel() as model:
        model.default = loopmodel.Reply(json.dumps({"run": {"argv": argv}}))
        project = tmp_path / "proj"
        project.mkdir()
        config = project / "hooks.toml"
        config.write_text(
            "# the project's hooks\n"
            f'[models.default]\nprovider = "openai"\nurl = "{model.url}"\nmodel = "loop-1"\n\n'
            '[defaults]\nsandbox = "none"\n\n'
            "[[hooks]]\n"
            'name = "deps"   # asked once\n'
            'on = "script"\nphase = "before"\n'
            'prompt = "Write one command that checks the tools exist."\n'
            'effect = "run"\ntimeoutMs = 20000\n'
        )
        env = {
            **os.environ,
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "MCPX_HOOKS_NO_DISCOVERY": "1",
        }
        command = ["exec", "--json", "--config", str(config), "--sandbox", "none", "--", "true"]
        first = mcpx(env, project, *command)
        assert first.returncode == 0, first.stderr
        frame = hook_frame(first.stdout, "deps")
        assert frame["status"] == "ok" and frame["cached"] is False, frame
        second = mcpx(env, project, *command)
        assert second.returncode == 0, second.stderr
        assert hook_frame(second.stdout, "deps")["cached"] is True
        assert len(model.requests) == 1  # the second run asked no model

        listed = mcpx(env, project, "prompts", "list", "--json")
        [entry] = json.loads(listed.stdout)
        assert entry["hook"] == "deps" and entry["answer"]["run"]["argv"] == argv
        assert entry["file"] == str(config) and entry["pointer"] == "/hooks/0"
        promoted = mcpx(env, project, "prompts", "promote", entry["key"][:8])
        assert promoted.returncode == 0, promoted.stderr
        text = config.read_text()
        assert f"run = {json.dumps(argv)}" in text and "prompt" not in text
        assert text.startswith("# the project's hooks\n") and 'name = "deps"   # asked once' in text

        third = mcpx(env, project, *command)
        assert third.returncode == 0, third.stderr
        frame = hook_frame(third.stdout, "deps")
        assert frame["action"] == "run" and frame["status"] == "ok", frame
        assert frame["advice"] == ["tools-checked"], frame
        assert len(model.requests) == 1  # a run hook now: no model was asked


def test_the_demo_uses_the_model_it_is_pointed_at(tmp_path: Path) -> None:
    with loopmodel.LoopModel() as model:
        model.default = loopmodel.Reply(json.dumps({"advise": "the job said hello"}))
        env = {
            **os.environ,
            "MCPX_HOOKS_NO_DISCOVERY": "1",
            "MCPX_HOOKS_DEMO_MODEL_URL": model.url,
            "MCPX_HOOKS_DEMO_MODEL": "loop-1",
        }
        done = mcpx(env, tmp_path, "demo")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the job said hello" in done.stdout
        assert "no model configured" not in done.stdout
        assert model.requests and all(r["model"] == "loop-1" for r in model.requests)


def test_the_demo_blames_the_model_server_not_the_sandbox_when_it_fails(tmp_path: Path) -> None:
    # A model server answering 503 failed the demo with "`mcpx-hooks doctor` says what the
    # sandbox here lacks", which sent the user to the wrong place.
    with loopmodel.LoopModel() as model:
        model.default = loopmodel.Reply(status=503)
        env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "MCPX_HOOKS_DEMO_MODEL_URL": model.url}
        done = mcpx(env, tmp_path, "demo")
    assert done.returncode == 1, done.stdout
    said = done.stderr.splitlines()
    assert said[-2] == "  hook summarise: failed: model default at " + model.url + (
        " answered HTTP 503 Service Unavailable"
    )
    assert said[-1] == (
        "the prompt hook summarise asks the model server that MCPX_HOOKS_DEMO_MODEL_URL names:"
        " check that it runs there and answers chat completions"
    )
