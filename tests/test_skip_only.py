"""`exec --skip`, `--only` and `MCPX_HOOKS_SKIP`: hooks left out of one run, one warning
frame listing them, a locked hook never left out (exit 2 naming the file that locked it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from operator_day import HEADER, advising, hook_frames, mcpx, warnings


@pytest.fixture
def project(readable_tmp: Path) -> Path:
    tmp_path = readable_tmp
    config = HEADER + advising("lint", "L") + advising("types", "T") + advising("docs", "D")
    (tmp_path / "hooks.toml").write_text(config)
    return tmp_path


def run(project: Path, *flags: str, **env: str):  # type: ignore[no-untyped-def]
    return mcpx(
        "exec", "--json", "--config", "hooks.toml", *flags, "--", "true",
        cwd=project, home=project / "home", **env,
    )  # fmt: skip


def test_no_selection_runs_every_hook_and_warns_nothing(project: Path) -> None:
    out = run(project)
    assert out.returncode == 0, out.stderr
    assert [f["name"] for f in hook_frames(out)] == ["lint", "types", "docs"]
    assert not [w for w in warnings(out) if "left out" in w]


def test_skip_leaves_hooks_out_with_one_warning_frame(project: Path) -> None:
    out = run(project, "--skip", "lint", "--skip", "docs")
    assert out.returncode == 0, out.stderr
    assert [f["name"] for f in hook_frames(out)] == ["types"]
    left = [w for w in warnings(out) if "left out" in w]
    assert left == ["hooks left out of this run: lint (--skip), docs (--skip)"]


def test_only_runs_the_named_hooks(project: Path) -> None:
    out = run(project, "--only", "types")
    assert out.returncode == 0, out.stderr
    assert [f["name"] for f in hook_frames(out)] == ["types"]
    (left,) = [w for w in warnings(out) if "left out" in w]
    assert "lint (not named by --only)" in left and "docs (not named by --only)" in left


def test_the_variable_skips_like_pre_commit_s_skip(project: Path) -> None:
    out = run(project, MCPX_HOOKS_SKIP=" lint, ,nosuchhook,types")
    assert out.returncode == 0, out.stderr
    assert [f["name"] for f in hook_frames(out)] == ["docs"]
    (left,) = [w for w in warnings(out) if "left out" in w]
    assert left == "hooks left out of this run: lint (MCPX_HOOKS_SKIP), types (MCPX_HOOKS_SKIP)"


def test_a_name_in_the_variable_no_hook_has_is_passed_over_and_said(project: Path) -> None:
    """As a flag's typo is refused in these words, the variable's is said in them (once),
    and the run goes on: the variable is often set for a whole CI job, across projects."""
    out = run(project, MCPX_HOOKS_SKIP="lnit")
    assert out.returncode == 0, out.stderr
    assert [f["name"] for f in hook_frames(out)] == ["lint", "types", "docs"]
    said = [w for w in warnings(out) if "MCPX_HOOKS_SKIP" in w]
    assert said == [
        'MCPX_HOOKS_SKIP: no hook in force is named "lnit" (MCPX_HOOKS_SKIP takes hook names;'
        " passed over; those in force: docs, lint, types)"
    ]
    explained = run(project, "--explain", MCPX_HOOKS_SKIP="lnit")
    assert explained.returncode == 0, explained.stderr
    assert 'no hook in force is named "lnit"' in explained.stderr
    # a piece of a hook name that holds a comma is a name a hook has
    (project / "hooks.toml").write_text(HEADER + advising("lint, fast", "L"))
    quiet = run(project, MCPX_HOOKS_SKIP="fast")
    assert not [w for w in warnings(quiet) if "no hook in force" in w]


def test_the_variable_names_a_hook_whose_name_holds_a_comma(readable_tmp: Path) -> None:
    config = HEADER + advising("lint, fast", "L") + advising("lint", "M") + advising("fast", "F")
    (readable_tmp / "hooks.toml").write_text(config)
    out = run(readable_tmp, MCPX_HOOKS_SKIP="types,lint, fast")
    assert out.returncode == 0, out.stderr
    (left,) = [w for w in warnings(out) if "left out" in w]
    # (the pieces name "lint" and "fast" too, as they would without the comma's hook)
    assert left.startswith("hooks left out of this run: lint, fast (MCPX_HOOKS_SKIP), lint")
    kept = run(readable_tmp, MCPX_HOOKS_SKIP="fast,lint")  # not one after the other as named
    assert [f["name"] for f in hook_frames(kept)] == ["lint, fast"]


def test_a_flag_naming_no_hook_is_a_usage_error(project: Path) -> None:
    out = run(project, "--skip", "lnit")
    assert out.returncode == 2
    assert 'no hook in force is named "lnit"' in out.stderr
    assert "docs, lint, types" in out.stderr
    assert hook_frames(out) == []


def test_a_locked_hook_cannot_be_left_out(readable_tmp: Path) -> None:
    tmp_path = readable_tmp
    config = HEADER + advising("policy", "P", locked=True) + advising("lint", "L")
    (tmp_path / "hooks.toml").write_text(config)
    for flags, env in (
        (("--skip", "policy"), {}),
        ((), {"MCPX_HOOKS_SKIP": "policy"}),
        (("--only", "lint"), {}),
    ):
        out = run(tmp_path, *flags, **env)
        assert out.returncode == 2, (flags, env, out.stdout)
        assert f'hook "policy" is locked by {tmp_path / "hooks.toml"}:/hooks/0' in out.stderr
        assert "Traceback" not in out.stderr
        assert hook_frames(out) == []
    out = run(tmp_path, "--only", "lint")
    assert "name it with --only too" in out.stderr
    out = run(tmp_path, "--only", "lint", "--only", "policy")
    assert out.returncode == 0, out.stderr
    assert [f["name"] for f in hook_frames(out)] == ["policy", "lint"]


def test_explain_says_which_are_left_out(project: Path) -> None:
    out = mcpx(
        "exec", "--explain", "--config", "hooks.toml", "--skip", "lint", "--", "true",
        cwd=project, home=project / "home", MCPX_HOOKS_SKIP="docs",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "before lint: left out of this run: --skip" in out.stdout
    assert "before docs: left out of this run: MCPX_HOOKS_SKIP" in out.stdout
    assert "1. before types" in out.stdout


def test_remote_refuses_a_selection_rather_than_ignore_it(project: Path) -> None:
    out = run(project, "--remote", "ws://127.0.0.1:9", "--skip", "lint")
    assert out.returncode == 2
    assert "--skip, --only, MCPX_HOOKS_SKIP and --files-from" in out.stderr
