"""docs/tool-servers.md's steps, run as the page writes them, in a scratch project: its first
server's declaration saved as the page says, the example server copied beside it with the
page's own command, and `servers list` showing the server and its tools as the page does."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from docpage import DOCS, Scratch, block, commands

PAGE = "tool-servers.md"


def test_the_first_server_runs_from_what_the_page_says_to_copy(tmp_path: Path) -> None:
    """Where `python3` on the PATH is a version manager's shim in the home (pyenv), which the
    server's `strict` profile does not show, as on many a developer's machine."""
    s = Scratch(tmp_path)
    shims = s.home / ".pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (shims / "python3").chmod(0o755)
    s.env["PATH"] = f"{shims}:{s.env['PATH']}"
    s.write("tools.toml", block(PAGE, "[servers.words]", "toml").body)
    for command in commands(block(PAGE, "examples/tools/wordtools.py", "sh").body):
        done = s.sh(command)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
    listed = block(PAGE, "words (wordtools 1.0): running since", "").body
    tools = re.findall(r"^  - .*$", listed, re.M)
    assert re.findall(r"^  - .*$", done.stdout, re.M) == tools, done.stdout


def test_a_refused_call_is_marked_destructive_once_its_server_has_listed_it(
    tmp_path: Path,
) -> None:
    """The page's script and `no-removing` hook: its first `words.remove`, refused before the
    server ever started, has no `destructiveHint`; the same call once `words.count` started
    the server has it, as the page says (and `exec` shows `, destructive` only then)."""
    s = Scratch(tmp_path)
    s.write(
        "tools.toml",
        block(PAGE, "[servers.words]", "toml").body
        + "\n"
        + block(PAGE, 'name = "no-removing"', "toml").body,
    )
    for command in commands(block(PAGE, "examples/tools/wordtools.py", "sh").body)[:1]:
        assert s.sh(command).returncode == 0
    script = block(PAGE, 'mcpx_call("words.remove"', "python").body
    script = script.replace("    return mcpx_call(", "    mcpx_call(")
    script += '    try:\n        mcpx_call("words.remove", {"path": "build/"})\n'
    script += "    except mcpx.CallError:\n        pass\n"
    s.write("job.py", script)
    done = s.sh("mcpx-hooks exec --config tools.toml --json --python job.py")
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    calls = [c for c in calls if c["type"] == "call"]
    assert [(c["tool"], c.get("destructiveHint")) for c in calls] == [
        ("remove", None),
        ("count", None),
        ("remove", True),
    ], done.stdout + done.stderr
    said = "as this process has it: a call a `before` hook refuses starts no server to learn it"
    assert said in " ".join((DOCS / PAGE).read_text().split())
