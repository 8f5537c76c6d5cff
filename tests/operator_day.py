"""Shared parts of the operator's-day tests: the CLI as a real subprocess in a scratch home,
and real git repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """This environment with a scratch home (no user config, no recorded trust), git set up
    for commits, and no `MCPX_HOOKS_SKIP` but the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_STATE_HOME=str(home / "state"),
        **GIT_ENV,
    )
    env.update(extra)
    return env


def mcpx(
    *args: str, cwd: Path, home: Path, stdin: str | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env=env_for(home, **extra),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def frames(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def hook_frames(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [f for f in frames(out) if f["type"] == "hook"]


def warnings(out: subprocess.CompletedProcess[str]) -> list[str]:
    return [f["message"] for f in frames(out) if f["type"] == "warning"]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**os.environ, **GIT_ENV},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout


def new_repo(path: Path, files: dict[str, str], branch: str = "main") -> Path:
    """A git repository at `path` with `files` committed on `branch`."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def advising(name: str, text: str, **keys: Any) -> str:
    """A `[[hooks]]` table: a `before` hook that advises `text`."""
    answer = json.dumps({"advise": text})
    lines = [
        "[[hooks]]",
        f"name = {json.dumps(name)}",
        'on = "script"',
        'phase = "before"',
        f"run = {json.dumps([sys.executable, '-c', f'print({answer!r})'])}",
    ]
    lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """A TOML value (inline tables for mappings; JSON's strings, lists and booleans are
    TOML's too)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


HEADER = '[defaults]\nsandbox = "none"\n\n'
