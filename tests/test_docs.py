"""Docs generated from the tables stay equal to the tables."""

import tomllib
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.config.docgen import GENERATED
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
    # One page (wherever the docs put it) shows `exec`'s exit codes as the table declares
    # them, and the `cause` words the error frame carries.
    from mcpx_hooks.supervisor.cli.common import exit_code_table
    from mcpx_hooks.supervisor.core.frames import ErrorCause

    table = exit_code_table()
    pages = [p for p in DOCS.rglob("*.md") if table in p.read_text()]
    assert len(pages) == 1, "the exit-code table of `exec` belongs on one page of docs/"
    text = pages[0].read_text()
    assert all(f"`{cause}`" in text for cause in ErrorCause)
