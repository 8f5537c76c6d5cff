"""Docs generated from the tables stay equal to the tables."""

import tomllib
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.cli.reference import GENERATED
from mcpx_hooks.supervisor.core.hookenv import NAMES, SCRIPT_VARIABLES
from mcpx_hooks.supervisor.core.hooks import HOOK_SETTINGS

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_docs_are_current(name: str) -> None:
    assert (DOCS / name).read_text() == GENERATED[name](), "run `make docs`"


def test_every_hook_variable_is_documented_once() -> None:
    text = (DOCS / "environment.md").read_text()
    rows = [line.split("`")[1] for line in text.splitlines() if line.startswith("| `MCPX_")]
    script = {v.name for v in SCRIPT_VARIABLES}
    assert sorted(rows) == sorted(NAMES | script)
    assert len(rows) == len(NAMES) + len(script)


def test_the_hook_defaults_are_documented_from_the_table() -> None:
    text = (DOCS / "tables.md").read_text()
    section = text.split("## Hook defaults\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ")[:2] for line in section.splitlines() if line.startswith("| `")]
    assert rows == [[f"| `{s.key}`", f"`{s.written}`"] for s in HOOK_SETTINGS]


def test_the_config_page_shows_the_hook_defaults() -> None:
    # docs/config.md is written by hand; its `[defaults]` example is the built-in values.
    page = (DOCS / "config.md").read_text()
    example = page.split("```toml\n", 1)[1].split("```", 1)[0]
    assert tomllib.loads(example)["defaults"] == {s.key: s.written for s in HOOK_SETTINGS}


def test_the_exec_exit_codes_are_documented_from_the_table() -> None:
    # The generated command reference and the CI page (written by hand) show `exec`'s exit
    # codes as the table declares them, and the `cause` words the error frame carries; no
    # other page keeps a copy that could drift.
    from mcpx_hooks.supervisor.cli.common import exit_code_table
    from mcpx_hooks.supervisor.core.frames import ErrorCause

    table = exit_code_table()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if table in p.read_text())
    assert pages == ["ci.md", "reference/commands.md"]
    text = (DOCS / "ci.md").read_text()
    assert all(f"`{cause}`" in text for cause in ErrorCause)


def test_every_config_key_of_the_schema_is_in_the_reference() -> None:
    from mcpx_hooks.supervisor.config.configschema import build_config_schema

    schema = build_config_schema()
    text = (DOCS / "reference" / "config.md").read_text()
    for table, node in schema["properties"].items():
        keys = node.get(
            "properties", schema["$defs"]["hook"]["properties"] if table == "hooks" else {}
        )
        for key in keys:
            assert f"| `{key}` |" in text, (table, key)


def test_the_keys_of_named_entries_are_in_the_reference() -> None:
    # `[servers.<name>]` and `[models.<name>]`: each entry's keys, under their own heading.
    from mcpx_hooks.supervisor.config.configschema import build_config_schema

    text = (DOCS / "reference" / "config.md").read_text()
    for table, node in build_config_schema()["properties"].items():
        named = node.get("additionalProperties")
        if not isinstance(named, dict) or "properties" not in named:
            continue
        section = text.split(f"### `[{table}.<name>]`\n", 1)[1].split("\n## ", 1)[0]
        for key in named["properties"]:
            assert f"| `{key}` |" in section, (table, key)


def test_every_flag_is_in_the_command_reference() -> None:
    import argparse

    from mcpx_hooks.supervisor.cli.reference import commands

    text = (DOCS / "reference" / "commands.md").read_text()
    for name, parser in commands():
        assert f"## `mcpx-hooks {name}`" in text
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                assert all(f"`{flag}" in text for flag in action.option_strings), action


def test_every_variable_the_supervisor_reads_is_in_the_reference() -> None:
    # Each `MCPX_HOOKS_*` name is declared once, as a constant of the module that reads it;
    # the reference lists them all.
    import re

    from mcpx_hooks.supervisor.cli.reference import SUPERVISOR_VARIABLES

    root = DOCS.parent
    declared = {
        name
        for path in [*(root / "supervisor").rglob("*.py"), *(root / "runners").rglob("*.py")]
        for name in re.findall(
            r'^\w+(?::\s*Final)?\s*=\s*"(MCPX_HOOKS_\w+)"', path.read_text(), re.M
        )
    }
    assert len(declared) >= 8
    assert sorted(declared) == sorted(name for name, _ in SUPERVISOR_VARIABLES)
    text = (DOCS / "reference" / "commands.md").read_text()
    assert all(f"| `{name}` |" in text for name in declared)


def test_the_exec_request_is_documented_from_its_table() -> None:
    # docs/service.md is written by hand; its table of the `/v1/exec` request's fields is
    # the one the request is checked and parsed by (`service/execrequest.py`), and no other
    # page keeps a copy that could drift.
    from mcpx_hooks.supervisor.run.scriptrun import DEFAULT_SCRIPT_TIMEOUT_MS
    from mcpx_hooks.supervisor.service.execrequest import EXEC_FIELDS, field_table

    table = field_table()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if table in p.read_text())
    assert pages == ["service.md"]
    rows = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    assert rows == list(EXEC_FIELDS)
    assert f"(default {DEFAULT_SCRIPT_TIMEOUT_MS // 1000} s)" in EXEC_FIELDS["timeoutMs"].maps_to


def test_every_close_code_is_in_the_service_page_s_table() -> None:
    # docs/service.md's table of close codes is written by hand: every code the server
    # closes a socket with after an error message (`Close`) is a row, with its word.
    from mcpx_hooks.supervisor.service.wire import CLOSE_WORDS, Close

    text = (DOCS / "service.md").read_text()
    table = text.split("| close code | word | when |\n", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(" | ")[:2] for line in table.splitlines()[1:]]
    worded = [row for row in rows if row[1] != "(none)"]  # (closes the protocol itself makes)
    assert worded == [[f"| {int(code)}", CLOSE_WORDS[code]] for code in Close]


def test_every_code_block_closes_on_a_line_of_its_own() -> None:
    # A closing fence with prose after it ("``` A state directory ...") left the block open to
    # the page's next fence: every block after it read inside out, and a test that reads a
    # page's blocks found none of its own.
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        inside = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if not line.lstrip().startswith("```"):
                continue
            rest = line.lstrip()[3:]
            if inside and rest.strip():
                found.append(f"{page.relative_to(DOCS)}:{number}: {line.strip()[:40]}")
            inside = not inside if not (inside and rest.strip()) else False
    assert found == []
