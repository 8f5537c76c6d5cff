"""Every command's `--help` ends with an example that argparse accepts; `exec --help` gives
its exit codes from the table."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from mcpx_hooks.supervisor.cli.common import EXEC_EXIT_CODES, SCRIPTS_OWN
from mcpx_hooks.supervisor.cli.parser import COMMANDS, EXAMPLES, parser
from mcpx_hooks.supervisor.cli.reference import commands

NAMES = [name for name, _ in commands()]


def test_the_walk_sees_every_command_and_its_sub_commands() -> None:
    assert [n for n in NAMES if " " not in n] == [name for name, *_ in COMMANDS]
    assert {"hook test", "hooks list", "runs list", "runs show"} <= set(NAMES)


def test_no_sub_command_takes_a_flag_of_its_command_s_own() -> None:
    # argparse lets a sub-command's default overwrite what its command parsed: `hook --json
    # test X` printed text, its --json taken and dropped without a word.
    flags = {
        name: {a.dest for a in p._actions if a.option_strings} - {"help"} for name, p in commands()
    }
    shadowed = {
        name: sorted(flags[name] & flags[name.rsplit(" ", 1)[0]])
        for name in flags
        if " " in name and flags[name] & flags[name.rsplit(" ", 1)[0]]
    }
    assert shadowed == {}


def test_every_command_and_sub_command_has_an_example() -> None:
    assert sorted(set(NAMES) - set(EXAMPLES)) == []
    assert sorted(set(EXAMPLES) - set(NAMES)) == [], "an example of no command"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_parses_as_that_command(name: str) -> None:
    words = shlex.split(EXAMPLES[name])
    assert words[0] == "mcpx-hooks"
    assert words[1 : 1 + len(name.split())] == name.split()
    try:
        args = parser().parse_args(words[1:])
    except SystemExit as exc:  # argparse refused it
        pytest.fail(f"{EXAMPLES[name]!r} does not parse: exit {exc.code}")
    assert args.command == name.split(maxsplit=1)[0]


def _help(*words: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", *words, "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.mark.parametrize("name", ["exec", "hook test", "runs show", "init", "doctor"])
def test_help_ends_with_the_example(name: str) -> None:
    text = _help(*name.split())
    assert f"example:\n  {EXAMPLES[name]}\n" in text


def test_exec_help_gives_every_exit_code_from_the_table() -> None:
    text = _help("exec")
    section = text.split("exit codes:\n", 1)[1]
    starts = [line.split("  ")[1] for line in section.splitlines() if line[2:3] != " "]
    assert starts == [SCRIPTS_OWN if c is None else str(c) for c, _ in EXEC_EXIT_CODES]


def test_every_command_exit_code_table_names_a_command() -> None:
    from mcpx_hooks.supervisor.cli.common import COMMAND_EXIT_CODES

    assert sorted(set(COMMAND_EXIT_CODES) - set(NAMES)) == []


def _cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (["exce", "--", "true"], "exec"),
        (["hook", "list"], "hooks list"),  # the one-hook command where the list is in force
        (["server", "list"], "servers"),
        (["runs", "lsit"], "runs list"),
        (["prompts", "shwo", "x"], "prompts show"),
        (["run", "--", "pytest"], "exec"),  # as pre-commit and lefthook call it
        (["zzz"], None),
    ],
)
def test_a_command_mistyped_names_the_one_meant(typed: list[str], meant: str | None) -> None:
    out = _cli(typed)
    assert out.returncode == 2
    (last,) = out.stderr.splitlines()[-1:]
    assert "invalid choice" in last
    if meant is None:
        assert "did you mean" not in last
    else:
        assert last.endswith(f"; did you mean `mcpx-hooks {meant}`?"), last


@pytest.mark.parametrize("typed", [["doctor", "--json"], ["runs", "verify", "--json", "x"]])
def test_a_flag_a_command_lacks_is_said_by_that_command(typed: list[str]) -> None:
    out = _cli(typed)
    name = " ".join(t for t in typed if not t.startswith("-") and t != "x")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith(f"usage: mcpx-hooks {name} [-h]"), out.stderr
    assert out.stderr.endswith(f"mcpx-hooks {name}: error: unrecognized arguments: --json\n")
