"""`exec --remote` through a gateway, from the workers' own project directory: the project
file the workers apply is not sent again as per-call hooks, and a worker never applies a
hook twice (no "expected a unique hook name"); a hook the workers do not have still goes
with the run, once. Real parts: nats-server, a gateway, a worker, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterparts import Cluster, Nats, need_nats, start_gateway, start_worker
from service_client import CLI

PROJECT = """
[[hooks]]
name = "where"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; echo named"]

[[hooks]]
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; echo unnamed"]
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    need_nats()
    tmp_path.chmod(0o755)
    (tmp_path / ".mcpx-hooks.toml").write_text(PROJECT)
    nats = Nats(tmp_path / "jetstream")
    nats.start()
    parts = Cluster(tmp_path, nats)
    try:
        parts.gateways.append(start_gateway(tmp_path, nats))
        # The worker applies the project file (given to it, so trusted by it).
        parts.workers.append(start_worker(tmp_path, nats, "--config", ".mcpx-hooks.toml"))
        yield parts
    finally:
        parts.stop()
    assert "Traceback" not in parts.workers[0].log.read_text()


def test_exec_remote_from_the_workers_project_applies_each_hook_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MCPX_HOOKS_NO_DISCOVERY"}
    env.update(MCPX_HOOKS_TRUST="all", HOME=str(tmp_path / "home"))
    extra = json.dumps(
        {"name": "mine", "on": "script", "phase": "before",
         "run": ["sh", "-c", "cat >/dev/null; echo mine"]}
    )  # fmt: skip
    done = subprocess.run(
        [*CLI, "exec", "--remote", cluster.gateways[0].url, "--json", "--hook", extra,
         "--", "echo", "ran"],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "unique hook name" not in done.stdout + done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    advice = [a for f in frames if f["type"] == "hook" for a in f.get("advice", [])]
    assert sorted(advice) == ["mine", "named", "unnamed"], frames


def test_a_hook_the_server_has_is_neither_sent_nor_applied_again(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.config.loading import load_config
    from mcpx_hooks.supervisor.core.hooks import hook_json
    from mcpx_hooks.supervisor.core.percall import already_in_force, listed, per_call_hook

    (tmp_path / "c.toml").write_text(PROJECT)
    env = {"MCPX_HOOKS_NO_DISCOVERY": "1"}
    hooks = load_config(["c.toml"], cwd=tmp_path, environ=env).hooks
    served = [hook_json(h) for h in hooks]
    for hook in hooks:  # the caller's side (what /v1/hooks lists) and the server's (its own)
        declared = per_call_hook(hook)
        assert listed(declared, served) and already_in_force(declared, hooks)
        moved = {**declared, "cwd": str(tmp_path / "elsewhere")}
        assert not listed(moved, served) and not already_in_force(moved, hooks)
    renamed = {**per_call_hook(hooks[0]), "name": "other"}
    assert not listed(renamed, served) and not already_in_force(renamed, hooks)
    louder = {**per_call_hook(hooks[0]), "effect": "ask"}
    assert not already_in_force(louder, hooks)  # a name shared, not the hook: refused as twice
