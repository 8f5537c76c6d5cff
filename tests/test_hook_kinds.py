"""Hook kinds as a table: every row of `core/kinds.py`'s `HOOK_KINDS` names a module that
implements `HookKind`, and a new kind is one new module and one row, with no other change.

The new kind here is thrown away after the test: `advise = "TEXT"`, whose runner answers with
that text as advice. Its module and its row live in a directory of the test's own; the row is
added by a `sitecustomize` module on that directory's path, so the installed `mcpx-hooks`
itself runs it, unchanged: a real `exec` (a subprocess) shows its frame in the readable view
and in `--json`, and a real `serve` shows it on the console's page in Chromium. Without the
row the same config is refused: the row is what makes the kind.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_browser import WAIT_MS, Browser, browser, exec_run, expect
from service_client import start_server

from mcpx_hooks.supervisor.core.hooks import Action
from mcpx_hooks.supervisor.core.kinds import HOOK_KINDS, declared_actions, process_actions
from mcpx_hooks.supervisor.run.hookrun import HookKind, kind_of

#: The browser fixture comes from `console_browser`; named here so that pytest finds it.
__all__ = ["browser"]

CLI = Path(sys.executable).parent / "mcpx-hooks"
ADVICE = "Back up the database first."

#: The new kind's module: what runs a hook of it (`HookKind`), on the shared frame builder.
KIND_MODULE = """
from mcpx_hooks.supervisor.core.answers import bound_answer
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.run.hookframe import HookReport


async def run(spawner, hook, ctx, frame):
    answer = bound_answer({"advise": str(hook.target)}, frame.clamped.effect)
    return HookReport(frame.frame(HookStatus.OK, 0, **frame.effects(answer)), answer)
"""
#: Its row in the table, added before anything else runs.
KIND_ROW = """
from mcpx_hooks.supervisor.core.kinds import HOOK_KINDS, Kind, Target

HOOK_KINDS["advise"] = Kind("advise", Target("A fixed advice text.", min_length=1), "advisekind")
"""
CONFIG = f"""
[[hooks]]
name = "tip"
on = "script"
phase = "before"
effect = "advise"
advise = "{ADVICE}"
"""


@pytest.mark.parametrize("action", list(HOOK_KINDS))
def test_every_kind_in_the_table_is_a_module_that_runs_hooks(action: str) -> None:
    kind = kind_of(action)
    assert isinstance(kind, HookKind)
    assert inspect.iscoroutinefunction(kind.run)
    assert list(inspect.signature(kind.run).parameters) == ["spawner", "hook", "ctx", "frame"]
    assert HOOK_KINDS[action].word == action


def test_the_words_the_code_names_are_rows_of_the_table() -> None:
    # A kind needs no word in `Action` unless other code names it; every word there is a row.
    assert {str(a) for a in Action} <= set(HOOK_KINDS)
    assert {"run", "module", "prompt", "plugin"} <= set(declared_actions())
    assert "source" not in declared_actions()  # declared in [script] only
    assert {"run", "module"} == set(process_actions())


def kind_dir(base: Path) -> Path:
    """A directory with the new kind's module and the `sitecustomize` that adds its row."""
    where = base / "kind"
    where.mkdir()
    (where / "advisekind.py").write_text(KIND_MODULE)
    (where / "sitecustomize.py").write_text(KIND_ROW)
    return where


def mcpx(*args: str, cwd: Path, path: Path | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    env.pop("PYTHONPATH", None)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [str(CLI), *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_new_kind_is_one_module_and_one_row_and_runs_in_a_real_exec(tmp_path: Path) -> None:
    path = kind_dir(tmp_path)
    (tmp_path / "hooks.toml").write_text(CONFIG)
    shown = mcpx("exec", "--config", "hooks.toml", "--", "true", cwd=tmp_path, path=path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    head = next(line for line in lines if line.startswith("hook tip "))
    assert head.startswith("hook tip (script.before, advise, sandbox ") and ": ok in " in head
    assert f"  advice: {ADVICE}" in lines

    framed = mcpx("exec", "--config", "hooks.toml", "--json", "--", "true", cwd=tmp_path, path=path)
    assert framed.returncode == 0, framed.stderr
    frames = [json.loads(line) for line in framed.stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    assert (hook["name"], hook["action"], hook["status"]) == ("tip", "advise", "ok")
    assert hook["advice"] == [ADVICE]

    # Without its row the word is no action: the config is refused before anything runs.
    refused = mcpx("exec", "--config", "hooks.toml", "--", "true", cwd=tmp_path, path=None)
    assert refused.returncode == 2
    assert "advise" in refused.stderr


@pytest.fixture
def kind_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real `serve` with the new kind's row, its config declaring a hook of it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "serve.toml").write_text(CONFIG)
    env = {"MCPX_HOOKS_NO_DISCOVERY": "1", "PYTHONPATH": str(kind_dir(tmp_path))}
    server = start_server(project, "--config", "serve.toml", env=env)
    yield {"server": server, "cwd": project}
    assert server.stop() == 0
    assert "Traceback" not in server.log(), server.log()


def test_a_new_kind_renders_on_the_console(browser: Browser, kind_server: dict[str, Any]) -> None:
    server = kind_server["server"]
    run_id = exec_run(kind_server, {"argv": ["true"]}, wait=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        origin = f"http://127.0.0.1:{server.port}"
        page.goto(f"{origin}/?token={server.token}")
        page.goto(f"{origin}/#/runs/{run_id}")
        frame = page.locator(".frame.hook", has_text="tip")
        expect(frame.locator(".badge.ok")).to_be_visible(timeout=WAIT_MS)
        expect(frame.locator(".hook-line")).to_contain_text("· advise ·")
        expect(frame.locator(".advice li")).to_have_text(ADVICE)
    finally:
        context.close()
