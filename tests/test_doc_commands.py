"""Every `mcpx-hooks` command a user would copy from docs/ (the shell blocks: `sh`, `bash`,
`shell`, `console`) is one the command line takes: its command, its flags and their values
parse as the page writes them. A flag renamed or a command dropped fails here, naming the page
and the line. (The walkthroughs that run their pages' commands for real, output included, are
test_doc_walkthrough.py, test_coming_from_docs.py, test_coming_from_claude.py and
test_docs_fixes.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from docpage import DOCS, blocks

from mcpx_hooks.supervisor.cli.parser import parser

SHELLS = ("sh", "bash", "shell", "console")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_lines(page: str) -> list[str]:
    """The command lines of the page's shell blocks (continuations joined, heredoc bodies
    left out; in a block that shows prompts, `$ `, only the prompted lines)."""
    return [
        line
        for found in blocks(page)
        if found.lang in SHELLS
        for line in commands_of(found.body.splitlines())
    ]


def commands_of(block: list[str]) -> list[str]:
    prompted = any(line.startswith("$ ") for line in block)
    commands: list[str] = []
    heredoc: str | None = None
    pending = ""
    for raw in block:
        if heredoc is not None:
            heredoc = None if raw.strip() == heredoc else heredoc
            continue
        text = raw
        if prompted and not pending:
            if not raw.startswith("$ "):
                continue  # what the command printed
            text = raw[2:]
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        command, pending = pending + text, ""
        if not _closed(command):  # a quoted word goes on on the next line
            pending = command + "\n"
            continue
        if (here := re.search(r"<<-?\s*'?(\w+)'?", command)) is not None:
            heredoc = here.group(1)
        commands.append(command)
    return commands


def _closed(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def invocations(line: str) -> list[list[str]]:
    """The argument lists given to `mcpx-hooks` on one command line."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    found, segment = [], []
    for word in [*words, ";"]:
        if word and set(word) <= set(";&|<>"):
            while segment and ASSIGNMENT.match(segment[0]):
                segment.pop(0)  # VAR=value before the command
            if segment and Path(segment[0]).name == "mcpx-hooks":
                found.append(segment[1:])
            segment = []
        else:
            segment.append(word)
    return found


def page_commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for line in shell_lines(str(page.relative_to(DOCS))):
            for args in invocations(line):
                if any(a.startswith("[") for a in args):
                    continue  # a synopsis (`[--json]`), not a command to copy
                found.append((str(page.relative_to(DOCS)), line, args))
    return found


def test_the_docs_have_commands_to_check() -> None:
    pages = {page for page, _, _ in page_commands()}
    assert len(page_commands()) >= 60 and len(pages) >= 10


@pytest.mark.parametrize(("page", "line", "args"), page_commands(), ids=lambda v: str(v)[:40])
def test_a_command_in_the_docs_parses(
    page: str, line: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        parser().parse_args(args)
    except SystemExit as exc:
        if exc.code in (0, None):
            return  # --version, --help: taken, and done
        said = capsys.readouterr().err.strip().splitlines()
        raise AssertionError(f"{page}: {line!r}: {said[-1] if said else exc}") from None
