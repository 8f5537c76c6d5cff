"""docs/tool-servers.md's steps, run as the page writes them, in a scratch project: its first
server's declaration saved as the page says, the example server copied beside it with the
page's own command, and `servers list` showing the server and its tools as the page does."""

from __future__ import annotations

import re
from pathlib import Path

from docpage import Scratch, block, commands

PAGE = "tool-servers.md"


def test_the_first_server_runs_from_what_the_page_says_to_copy(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    s.write("tools.toml", block(PAGE, "[servers.words]", "toml").body)
    for command in commands(block(PAGE, "examples/tools/wordtools.py", "sh").body):
        done = s.sh(command)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
    listed = block(PAGE, "words (wordtools 1.0): running since", "").body
    tools = re.findall(r"^  - .*$", listed, re.M)
    assert re.findall(r"^  - .*$", done.stdout, re.M) == tools, done.stdout
