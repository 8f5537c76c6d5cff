"""`exec --explain` for the hooks of the tool points: which configured servers and pinned
tools their `when.server` / `when.tool` match, a `when.client` that a script's call never
meets, and `--tool SERVER.TOOL` saying for one call which fire and why the others do not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.tools import pin

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]

CONFIG = """
[servers.lint]
command = ["python3", "-c", "pass"]

[servers.docs]
command = ["python3", "-c", "pass"]

[[hooks]]
name = "guard-lint"
on = "call"
phase = "before"
run = ["true"]
when = { server = ["lint"], tool = ["*.check*"] }

[[hooks]]
name = "any-call"
on = "call"
phase = "onSuccess"
run = ["true"]

[[hooks]]
name = "from-claude"
on = "call"
phase = "before"
run = ["true"]
when = { client = ["claude*"] }

[[hooks]]
name = "git-start"
on = "server.start"
phase = "before"
run = ["true"]
when = { server = ["git*"] }

[[hooks]]
name = "search-only"
on = "call"
phase = "before"
run = ["true"]
when = { tool = ["search"] }
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "hooks.toml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
    env.update(MCPX_HOOKS_NO_DISCOVERY="1", XDG_STATE_HOME=str(tmp_path / "state"))
    config = load_config([tmp_path / "hooks.toml"], cwd=tmp_path, environ=env, discover=False)
    tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("check", "check_all", "fmt")]
    pin(config.servers["lint"], tools, env)  # docs stays unpinned
    return tmp_path, env


def explain(project: tuple[Path, dict[str, str]], *flags: str) -> list[str]:
    cwd, env = project
    out = subprocess.run(
        [*CLI, "exec", "--config", "hooks.toml", "--explain", *flags, "--", "true"],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_explain_names_the_servers_and_pinned_tools_a_call_hook_matches(
    project: tuple[Path, dict[str, str]],
) -> None:
    hooks = str(project[0] / "hooks.toml")
    assert explain(project) == [
        f"a run of true in {project[0]}",
        "would run, in order:",
        "  1. before guard-lint (run, advise): before of each tool call the script makes, if"
        f" any  [{hooks}:/hooks/0]",
        '     when.server ["lint"] matches lint; when.tool ["*.check*"] matches lint.check,'
        " lint.check_all of the pinned tools",
        "  2. before search-only (run, advise): before of each tool call the script makes, if"
        f" any  [{hooks}:/hooks/4]",
        '     when.tool ["search"] matches none of the pinned tools, the tools of docs are not'
        " pinned, so not known here (mcpx-hooks servers list shows them)",
        "  3. onSuccess any-call (run, advise): onSuccess of each tool call the script makes,"
        f" if any  [{hooks}:/hooks/1]",
        "will not run:",
        '  before from-claude: when.client ["claude*"]: a script\'s call has no MCP client'
        f" (it matches calls made through mcpx-hooks mcp)  [{hooks}:/hooks/2]",
        '  before git-start: when.server ["git*"] matches none of the configured servers'
        f" (lint, docs)  [{hooks}:/hooks/3]",
    ]


def test_explain_for_one_tool_says_why_each_other_hook_does_not_fire(
    project: tuple[Path, dict[str, str]],
) -> None:
    lines = explain(project, "--tool", "lint.fmt")
    assert lines[0] == f"a run of true in {project[0]}, for a call it would make to lint.fmt"
    assert [line.split("  [")[0] for line in lines[1:]] == [
        "would run, in order:",
        "  1. onSuccess any-call (run, advise): onSuccess of a call to lint.fmt, if the script"
        " makes one",
        "will not run:",
        '  before guard-lint: when.tool ["*.check*"] does not match the tool "lint.fmt"',
        '  before from-claude: when.client ["claude*"]: a script\'s call has no MCP client',
        '  before git-start: when.server ["git*"] does not match the server "lint"',
        '  before search-only: when.tool ["search"] does not match the tool "lint.fmt"',
    ]
    plan = json.loads("\n".join(explain(project, "--tool", "docs.search", "--json")))
    assert plan["tool"] == "docs.search"
    assert [h["name"] for h in plan["hooks"] if h["runs"]] == ["search-only", "any-call"]
    plan = json.loads("\n".join(explain(project, "--tool", "git.log", "--json")))
    [start] = [h for h in plan["hooks"] if h["name"] == "git-start"]
    assert start["why"] == 'no tool server "git" is configured, so a call to it starts none'


def test_tool_is_refused_without_explain_or_as_no_server_tool(
    project: tuple[Path, dict[str, str]],
) -> None:
    cwd, env = project
    for flags in (["--tool", "lint.check"], ["--explain", "--tool", "lint"]):
        out = subprocess.run(
            [*CLI, "exec", "--config", "hooks.toml", *flags, "--", "true"],
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2
        assert "--tool" in out.stderr and "Traceback" not in out.stderr
