"""docs/coming-from.md's pre-commit and lefthook walkthroughs, run as a user would: the page's
YAML in a scratch git repository, `mcpx-hooks init --from` printing exactly what the page
shows and writing exactly the hooks it shows; then, for pre-commit, the converted hooks
running only when their files changed and `MCPX_HOOKS_SKIP` leaving one out with the
page's warning line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docpage import DOCS, block

PAGE = "coming-from.md"
CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def new_repo(repo: Path) -> None:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "config", "user.name", "dev")


def cli(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo.parent),
        "XDG_STATE_HOME": str(repo.parent / "state"),
        "XDG_CONFIG_HOME": str(repo.parent / "config"),
        **env,
    }
    return subprocess.run(
        [*CLI, *args], cwd=repo, check=False, capture_output=True, text=True, env=environ
    )


@pytest.mark.parametrize(
    ("source", "converted"),
    [
        (".pre-commit-config.yaml", "# from repos[0]"),
        ("lefthook.yml", "# from pre-commit.commands"),
    ],
)
def test_init_from_prints_and_writes_what_the_page_shows(
    tmp_path: Path, source: str, converted: str
) -> None:
    yaml = block(PAGE, f"# {source}", "yaml").body
    printed = block(PAGE, f"wrote .mcpx-hooks.toml: 3 hook(s) from {source}", "").body
    toml = block(PAGE, converted, "toml").body
    repo = tmp_path / "project"
    new_repo(repo)
    (repo / source).write_text(yaml)
    done = cli(repo, "init", "--from", source)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed
    written = (repo / ".mcpx-hooks.toml").read_text()
    hooks_part = written[written.index("# from ") :]  # below the list of what was not converted
    assert hooks_part.strip() == toml.strip()


def test_the_converted_pre_commit_hooks_run_when_their_files_changed_and_skip_works(
    tmp_path: Path,
) -> None:
    yaml = block(PAGE, "# .pre-commit-config.yaml", "yaml").body
    repo = tmp_path / "project"
    new_repo(repo)
    (repo / ".pre-commit-config.yaml").write_text(yaml)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("x = 1\n")
    (repo / "CHANGELOG.md").write_text("# changes\n")
    assert cli(repo, "init", "--from", ".pre-commit-config.yaml").returncode == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "mcpx-hooks: our pre-commit hooks")
    assert cli(repo, "trust", ".mcpx-hooks.toml").returncode == 0
    quiet = cli(repo, "exec", "--explain", "--", "true")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.startswith(f"a run of true in {repo}\nwould run no hooks\nwill not run:\n")
    (repo / "src" / "app.py").write_text("x = 2\n")
    edited = cli(repo, "exec", "--explain", "--", "true")
    order = re.findall(r"^  \d+\. before (\S+) ", edited.stdout, re.M)
    assert order == ["lint", "tests"], edited.stdout
    assert re.search(r"^  before changelog: when.files \[\"/CHANGELOG.md\"\]", edited.stdout, re.M)
    skipped = cli(repo, "exec", "--json", "--", "true", MCPX_HOOKS_SKIP="tests")
    frames = [json.loads(line) for line in skipped.stdout.splitlines()]
    warnings = [f["message"] for f in frames if f["type"] == "warning"]
    assert "hooks left out of this run: tests (MCPX_HOOKS_SKIP)" in warnings
    ran = [f["name"] for f in frames if f["type"] == "hook"]
    assert "tests" not in ran and "lint" in ran and "changelog" not in ran


def test_the_claude_code_gate_refuses_a_dot_env_where_python3_is_a_shim(tmp_path: Path) -> None:
    """The Claude Code example's gate, as the page writes it, on a machine where `python3` on
    the PATH is a version manager's shim in the home (pyenv), which the `strict` sandbox
    cannot see: the page's `.env` write is refused with the page's words, not failed for an
    interpreter the hook could not start."""
    page = (DOCS / PAGE).read_text()
    claude = page[page.index("## Coming from Claude Code") :]
    config = re.search(r"^```toml\n(.*?)^```$", claude, re.DOTALL | re.MULTILINE)
    guard = re.search(r"^```python\n(.*?)^```$", claude, re.DOTALL | re.MULTILINE)
    assert config is not None and guard is not None
    hook = config[1][config[1].index("[[hooks]]") :]  # (the server needs npx and network)
    project = tmp_path / "project"
    (project / "hooks").mkdir(parents=True)
    (project / "agent-hooks.toml").write_text(hook)
    (project / "hooks" / "guard_writes.py").write_text(guard[1])
    shims = tmp_path / "home" / ".pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (shims / "python3").chmod(0o755)
    write = {"input": {"server": "fs", "tool": "write_file", "args": {"path": ".env"}}}
    done = subprocess.run(
        [
            *CLI,
            "hook",
            "test",
            "guard-writes",
            "--config",
            "agent-hooks.toml",
            "--json",
            "--event",
            "-",
        ],
        cwd=project,
        input=json.dumps(write),
        check=False,
        capture_output=True,
        text=True,
        env={
            "PATH": f"{shims}:/usr/bin:/bin",
            "HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    )
    frame = json.loads(done.stdout.splitlines()[-1])
    said = "write_file may not touch .env: secrets and git's own files stay as they are"
    assert (frame["status"], frame["refused"]["reason"]) == ("ok", said), done.stdout + done.stderr
