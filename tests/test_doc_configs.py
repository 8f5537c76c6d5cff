"""Every TOML config in docs/ validates, as a user who copies it would run `mcpx-hooks validate`
on it: each block alone, or, when it leans on what the page declared before it (a plugin hook
naming a server of an earlier block), with the page's earlier blocks in front of it. What may
differ on the user's machine is allowed: a directory the block names that is not here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
#: What a block may say that depends on the machine it is copied to, not on the block.
MACHINE = re.compile(r": expected a directory, found .*: no directory at ")


def blocks() -> list[tuple[str, int, str, str]]:
    """(page, index, the block, the page's blocks before it joined)."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        before = ""
        for index, match in enumerate(re.finditer(r"```toml\n(.*?)```", page.read_text(), re.S)):
            found.append((str(page.relative_to(DOCS)), index, match.group(1), before))
            before += match.group(1) + "\n"
    return found


def validate(path: Path, home: Path) -> list[str]:
    """The problems `validate` reports for `path` (none: it is valid)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    done = subprocess.run(
        [*CLI, "validate", str(path)], check=False, capture_output=True, text=True, env=env
    )
    if done.returncode == 0:
        return []
    said = (done.stdout + done.stderr).splitlines()
    problems = [line for line in said if line.startswith(str(path))]
    assert problems, done.stdout + done.stderr  # a failure always names file and pointer
    return problems


def test_the_docs_have_configs_to_check() -> None:
    assert len(blocks()) >= 20


@pytest.mark.parametrize(("page", "index", "block", "before"), blocks(), ids=lambda v: str(v)[:30])
def test_a_config_in_the_docs_validates(
    page: str, index: int, block: str, before: str, tmp_path: Path
) -> None:
    path = tmp_path / "copied.toml"
    path.write_text(block)
    problems = validate(path, tmp_path)
    if problems and before:
        path.write_text(before + block)  # it leans on the page's earlier blocks
        problems = validate(path, tmp_path)
    assert [p for p in problems if not MACHINE.search(p)] == [], f"{page}, toml block {index}"
