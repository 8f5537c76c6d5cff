"""Docs generated from the tables stay equal to the tables."""

from pathlib import Path

import pytest

from mcpx_hooks.supervisor.config.docgen import GENERATED
from mcpx_hooks.supervisor.core.hookenv import NAMES, SCRIPT_VARIABLES

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
