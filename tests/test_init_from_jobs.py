"""`init --from lefthook.yml` with lefthook's `jobs` (its form since 1.10): each job that runs
a command or a script becomes a run hook as a command or script does, a group's jobs with the
group's `root` and `glob`, and what is not converted is listed with why."""

from __future__ import annotations

import tomllib
from pathlib import Path

from operator_day import mcpx

JOBS = """
pre-commit:
  parallel: true
  jobs:
    - name: lint
      glob: "*.{js,ts}"
      run: npx eslint {staged_files}
    - run: npx tsc --noEmit
      glob: "*.ts"
    - name: migrate
      root: backend/
      glob: "db/migrations/*"
      group:
        piped: true
        jobs:
          - run: bundle install
          - name: db
            run: rails db:migrate
    - script: verify.sh
      runner: bash
    - script: no-runner.sh
    - name: nothing
      tags: [x]
pre-push:
  jobs:
    - name: test
      run: go test ./...
post-merge:
  jobs:
    - run: yarn install
"""


def test_lefthook_jobs_become_run_hooks(tmp_path: Path) -> None:
    """Before, a lefthook.yml written with `jobs` converted nothing ("no hook could be
    converted; nothing written", exit 2) and said nothing of why; in a file with
    `commands` too, its jobs were passed over without a word."""
    (tmp_path / "lefthook.yml").write_text(JOBS)
    out = mcpx("init", "--from", "lefthook.yml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = tomllib.loads((tmp_path / ".mcpx-hooks.toml").read_text())
    hooks = {h["name"]: h for h in doc["hooks"]}
    assert list(hooks) == ["lint", "job-2", "job-3", "db", "verify.sh", "test"]
    assert hooks["lint"]["run"] == ["npx", "eslint"]
    assert hooks["lint"]["when"] == {"files": ["*.js", "*.ts"]}
    assert hooks["job-2"]["run"] == ["npx", "tsc", "--noEmit"]
    assert hooks["job-3"]["run"] == ["bundle", "install"]  # the group's root and glob
    assert hooks["job-3"]["cwd"] == "backend"
    assert hooks["job-3"]["when"] == {"files": ["backend/db/migrations/*"]}
    assert hooks["db"]["when"] == {"files": ["backend/db/migrations/*"]}
    assert hooks["verify.sh"]["run"] == ["bash", ".lefthook/pre-commit/verify.sh"]
    said = out.stdout
    assert "job-2: npx tsc --noEmit when *.ts changed" in said
    assert "pre-commit.jobs[4]: a script without a runner" in said
    assert "pre-commit.jobs[5] (nothing): a job with no run, script or group" in said
    assert "post-merge: a git hook with no moment in a script run" in said
    assert "pre-commit.parallel: its hooks may refuse the run" in said
    assert "lefthook ran it before a push" in said.partition("  test:")[2]


TWO_MYPYS = r"""
repos:
  - repo: local
    hooks:
      - id: mypy
        entry: mypy src
        language: system
        pass_filenames: false
      - id: mypy
        entry: mypy tests
        language: system
        pass_filenames: false
      - id: check docs
        entry: make docs
        language: system
        pass_filenames: false
"""


def test_a_hook_named_otherwise_than_its_id_says_so(tmp_path: Path) -> None:
    """pre-commit's `SKIP=mypy` leaves out every hook with the id mypy; the second was named
    mypy-2 here without a word, so `MCPX_HOOKS_SKIP=mypy` still ran it."""
    (tmp_path / ".pre-commit-config.yaml").write_text(TWO_MYPYS)
    out = mcpx("init", "--from", ".pre-commit-config.yaml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 0, out.stdout + out.stderr
    said = out.stdout
    first, second = said.partition("  mypy:")[2].partition("  mypy-2:")[::2]
    assert "named" not in first
    assert 'its id "mypy" is taken: named "mypy-2" here' in second
    assert "MCPX_HOOKS_SKIP=mypy,mypy-2" in second
    assert 'its id "check docs" is named "check-docs" here' in said
    assert 'named "mypy-2" here' in (tmp_path / ".mcpx-hooks.toml").read_text()


def test_a_lefthook_entry_that_is_always_skipped_is_not_converted(tmp_path: Path) -> None:
    """`skip: true` is a command lefthook never runs; it became a gate that refused every
    run here, its notes saying only "skip not converted"."""
    (tmp_path / "lefthook.yml").write_text(
        "pre-commit:\n  commands:\n    old:\n      run: make old-check\n      skip: true\n"
        "    now:\n      run: make check\n      skip: [merge, rebase]\n"
        "  jobs:\n    - name: gone\n      run: make gone\n      skip: true\n"
    )
    out = mcpx("init", "--from", "lefthook.yml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = tomllib.loads((tmp_path / ".mcpx-hooks.toml").read_text())
    assert [h["name"] for h in doc["hooks"]] == ["now"]
    assert "pre-commit.commands.old: skip: true, lefthook never runs it" in out.stdout
    assert "pre-commit.jobs[0] (gone): skip: true, lefthook never runs it" in out.stdout
    assert "skip not converted" in out.stdout.partition("  now:")[2]
