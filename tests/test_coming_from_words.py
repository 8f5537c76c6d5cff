"""A hook written in the words of the hook system a person comes from (Claude Code's
`PreToolUse` and `matcher`, a git hook's `pre-commit`, pre-commit's `entry` and `files`),
as docs/coming-from.md maps them: `mcpx-hooks validate`, run as a user runs it, says what each
is here, on a line of its own, rather than listing every word the place takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from docpage import block

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]

CONFIG = """\
[[hooks]]
name = "gate"
on = "PreToolUse"
phase = "before"
run = ["true"]

[[hooks]]
name = "after"
on = "PostToolUse"
run = ["true"]

[[hooks]]
name = "lint"
on = "script"
phase = "pre-commit"
run = ["true"]

[[hooks]]
name = "push"
on = "pre-push"
phase = "before"
run = ["true"]

[[hooks]]
name = "guard"
on = "call"
phase = "before"
matcher = "mcp__fs__write_file"
command = "python3 hooks/guard.py"

[[hooks]]
name = "ruff"
on = "script"
phase = "before"
entry = "ruff check"
files = "\\\\.py$"
"""

SAID = {
    "/hooks/0/on": (
        'the string "PreToolUse" is Claude Code\'s word: here a hook before each tool call'
        ' is on = "call", phase = "before"'
    ),
    "/hooks/1/on": (
        'the string "PostToolUse" is Claude Code\'s word: here a hook after each tool call'
        ' is on = "call", phase = "onSuccess" (or "onError", "suffix")'
    ),
    "/hooks/2/phase": (
        'the string "pre-commit" is a git hook\'s name: here a hook before the script is'
        ' on = "script", phase = "before"'
    ),
    "/hooks/3/on": (
        'the string "pre-push" is a git hook\'s name: here a hook before the script is'
        ' on = "script", phase = "before"'
    ),
    "/hooks/4/matcher": (
        'unknown key "matcher"; a Claude Code matcher is when = { tool = ["server.tool"] }'
        ' here (globs: "fs.*")'
    ),
    "/hooks/4/command": (
        'unknown key "command"; a hook\'s program is run here, an argv: run = ["prog",'
        ' "arg"] (a shell only as ["sh", "-c", "…"])'
    ),
    "/hooks/5/entry": (
        'unknown key "entry"; a hook\'s program is run here, an argv: run = ["prog",'
        ' "arg"] (a shell only as ["sh", "-c", "…"])'
    ),
    "/hooks/5/files": (
        'unknown key "files"; the files a hook runs for are when = { files = ["*.py"] } here, globs'
    ),
}


def test_validate_says_what_another_hook_system_s_words_are_here(tmp_path: Path) -> None:
    (tmp_path / "hooks.toml").write_text(CONFIG)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "MCPX_HOOKS_NO_DISCOVERY": "1",
    }
    done = subprocess.run(
        [*CLI, "validate", "hooks.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    said = {}
    for line in done.stdout.splitlines():
        where, _, message = line.removeprefix("hooks.toml:").partition(": ")
        said[where] = message
    assert {where: said.get(where) for where in SAID} == SAID


def test_the_page_shows_what_validate_prints() -> None:
    """docs/coming-from.md's lines of such problems are validate's own."""
    shown = block("coming-from.md", "is Claude Code's word: here a hook before", "").body
    for line in shown.splitlines():
        where, _, message = line.removeprefix("hooks.toml:").partition(": ")
        assert SAID[where] == message


def test_init_from_a_git_hook_script_says_how_to_declare_it(tmp_path: Path) -> None:
    """A Husky or git hook script given to `init --from` (named as git names its hooks) was
    said to be 'not a pre-commit config (expected a top-level repos list)'; it is said to be a
    script, with the hook that runs it."""
    (tmp_path / ".husky").mkdir()
    (tmp_path / ".husky" / "pre-commit").write_text("npm test\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    done = subprocess.run(
        [*CLI, "init", "--from", ".husky/pre-commit"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mcpx-hooks init: .husky/pre-commit: a git hook script (as git or Husky runs it), not a"
        ' pre-commit or lefthook config; declare it as a hook: run = ["sh",'
        ' ".husky/pre-commit"], on = "script", phase = "before", effect = "ask",'
        ' failure = "closed"\n'
    )
    assert not (tmp_path / ".mcpx-hooks.toml").exists()


def test_init_from_claude_code_s_settings_says_what_it_is_and_what_to_write(
    tmp_path: Path,
) -> None:
    """The coming-from page's Claude Code settings, given to init --from: it was read as a
    lefthook file and refused with 'no hook could be converted; nothing written', which named
    nothing to do. It is said to be Claude Code's, with the call hook that stands for it."""
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        '{"hooks": {"PreToolUse": [{"matcher": "mcp__fs__write_file", "hooks": [{"type":'
        ' "command", "command": "python3 hooks/guard_writes.py"}]}]}}\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    done = subprocess.run(
        [*CLI, "init", "--from", ".claude/settings.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mcpx-hooks init: .claude/settings.json: Claude Code's hook settings (PreToolUse), not a"
        " pre-commit or lefthook config: nothing to convert; a gate on an MCP tool is a call"
        ' hook here, behind mcpx-hooks mcp: on = "call", phase = "before", when = { tool ='
        ' ["server.tool"] } (docs/coming-from.md)\n'
    )
    assert not (tmp_path / ".mcpx-hooks.toml").exists()
