"""`when.files`: a `script` hook runs only when a file matching one of its globs changed, per
git (real repositories, a real `git`), or per `--files-from`; outside a checkout it runs;
`--explain` says why each did or did not."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio
from conftest import Marker
from operator_day import HEADER, advising, git, hook_frames, mcpx, new_repo

from mcpx_hooks.supervisor.core.changes import ChangedFiles, files_mismatch, given_files, matching
from mcpx_hooks.supervisor.run.gitchanges import GIT_TIMEOUT_S, git_changes

CONFIG = (
    HEADER
    + advising("py", "P", when={"files": ["*.py"]})
    + advising("src", "S", when={"files": ["src/**"]})
    + advising("always", "A")
)


@pytest.fixture
def repo(readable_tmp: Path) -> Path:
    root = new_repo(
        readable_tmp / "repo",
        {"README.md": "hi\n", "src/app/main.py": "x = 1\n", ".gitignore": "*.log\n"},
    )
    root.chmod(0o755)
    (readable_tmp / "hooks.toml").write_text(CONFIG)
    return root


def ran(repo: Path, *flags: str, stdin: str | None = None, cwd: Path | None = None) -> list[str]:
    out = mcpx(
        "exec", "--json", "--config", str(repo.parent / "hooks.toml"), *flags, "--", "true",
        cwd=cwd or repo, home=repo.parent / "home", stdin=stdin,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return [f["name"] for f in hook_frames(out)]


def test_unchanged_checkout_runs_only_the_hook_without_files(repo: Path) -> None:
    assert ran(repo) == ["always"]


def test_each_kind_of_change_counts(repo: Path) -> None:
    (repo / "README.md").write_text("changed\n")  # unstaged, matches neither
    (repo / "debug.log").write_text("ignored\n")  # ignored: not a change
    assert ran(repo) == ["always"]
    (repo / "src/app/main.py").write_text("x = 2\n")  # unstaged, matches both
    assert ran(repo) == ["py", "src", "always"]
    git(repo, "checkout", "-q", "--", "src/app/main.py")
    (repo / "tool.py").write_text("")  # untracked
    assert ran(repo) == ["py", "always"]
    git(repo, "add", "tool.py")  # staged
    assert ran(repo) == ["py", "always"]


def test_commits_since_the_default_branch_count_and_base_narrows(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "src/new.txt").write_text("")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "feature work")
    assert ran(repo) == ["src", "always"]  # against the merge base with main
    config = repo.parent / "hooks.toml"
    config.write_text('[when]\nbase = "HEAD"\n\n' + CONFIG)
    assert ran(repo) == ["always"]  # against HEAD: nothing changed


def test_a_subdirectory_sees_the_whole_checkout(repo: Path) -> None:
    (repo / "src/app/main.py").write_text("x = 3\n")
    assert ran(repo, cwd=repo / "src") == ["py", "src", "always"]


def test_outside_a_git_checkout_the_hook_runs_and_explain_says_why(readable_tmp: Path) -> None:
    plain = readable_tmp / "plain"
    plain.mkdir(mode=0o755)
    (readable_tmp / "hooks.toml").write_text(CONFIG)
    assert ran(plain) == ["py", "src", "always"]
    out = mcpx(
        "exec", "--explain", "--json", "--config", str(readable_tmp / "hooks.toml"), "--", "true",
        cwd=plain, home=readable_tmp / "home",
    )  # fmt: skip
    plan = {h["name"]: h for h in json.loads(out.stdout)["hooks"]}
    assert plan["py"]["runs"] is True
    assert "is not in a git checkout" in plan["py"]["note"]
    assert plan["py"]["note"].endswith("so it runs")


def test_files_from_stdin_gives_the_list_instead_of_git(repo: Path) -> None:
    assert ran(repo, "--files-from", "-", stdin="./src/readme.txt\n\n") == ["src", "always"]
    assert ran(repo, "--files-from", "-", stdin="") == ["always"]
    listed = repo.parent / "files.txt"
    listed.write_text("lib/x.py\n")
    assert ran(repo, "--files-from", str(listed)) == ["py", "always"]


def test_files_from_is_refused_where_it_cannot_be_read(repo: Path) -> None:
    home = repo.parent / "home"
    config = str(repo.parent / "hooks.toml")
    both = mcpx(
        "exec", "--config", config, "--files-from", "-", "--stdin", "-", "--", "true",
        cwd=repo, home=home, stdin="a.py\n",
    )  # fmt: skip
    assert both.returncode == 2
    assert "--files-from - and --stdin - cannot both read this stdin" in both.stderr
    missing = mcpx(
        "exec", "--config", config, "--files-from", "nope.txt", "--", "true", cwd=repo, home=home
    )
    assert missing.returncode == 2
    assert "--files-from nope.txt: No such file or directory" in missing.stderr


def test_explain_says_why_each_did_or_did_not_run(repo: Path) -> None:
    (repo / "src/app/main.py").write_text("x = 2\n")
    out = mcpx(
        "exec", "--explain", "--config", str(repo.parent / "hooks.toml"),
        "--files-from", "-", "--", "true",
        cwd=repo, home=repo.parent / "home", stdin="docs/a.md\n",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (
        'before py: when.files ["*.py"] matches none of the files: 1 file(s) changed'
        " (docs/a.md), listed by --files-from -"
    ) in out.stdout
    out = mcpx(
        "exec", "--explain", "--config", str(repo.parent / "hooks.toml"), "--", "true",
        cwd=repo, home=repo.parent / "home",
    )  # fmt: skip
    assert "when.files matched src/app/main.py, against the merge base with main" in out.stdout


def test_a_glob_that_backtracks_is_matched_at_once(repo: Path) -> None:
    """`**/**/…/x.py` (and `*a*a*…b`) tried every way to share a long path out between the
    stars: the command never answered. Each is now matched in one pass."""
    stars = "/".join(["**"] * 40) + "/x.py"
    letters = "*a" * 40 + "b"
    config = repo.parent / "hooks.toml"
    config.write_text(HEADER + advising("deep", "D", when={"files": [stars, letters]}))
    listed = "a/" * 200 + "y.py\n" + "a" * 3000 + "\n"
    out = mcpx(
        "exec", "--explain", "--config", str(config), "--files-from", "-", "--", "true",
        cwd=repo, home=repo.parent / "home", stdin=listed,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "before deep: when.files" in out.stdout
    assert "matches none of the files: 2 file(s) changed" in out.stdout
    assert ran(repo, "--files-from", "-", stdin="a/" * 200 + "x.py\n") == ["deep"]


def test_git_changes_names_its_base(repo: Path) -> None:
    changed = trio.run(git_changes, str(repo))
    assert changed.paths == ()
    assert changed.how.startswith("against the merge base with main (")
    bad = trio.run(git_changes, str(repo), "no-such-branch")
    assert bad.paths is None
    assert '[when] base "no-such-branch" is not a commit' in bad.how
    git(repo, "branch", "-m", "main", "trunk")  # no main, no master: HEAD
    assert "against HEAD" in trio.run(git_changes, str(repo)).how


def test_a_repo_with_no_commit_counts_staged_and_untracked(readable_tmp: Path) -> None:
    fresh = readable_tmp / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q", "-b", "main")
    (fresh / "a.py").write_text("")
    (fresh / "b.py").write_text("")
    git(fresh, "add", "a.py")
    changed = trio.run(git_changes, str(fresh))
    assert changed.paths == ("a.py", "b.py")
    assert "no commit yet" in changed.how


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "setup.py", True),
        ("*.py", "src/app/main.py", True),
        ("*.py", "src/app/main.pyc", False),
        ("src/**", "src/app/main.py", True),
        ("src/**", "src", False),
        ("src/**", "lib/src/x", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/app/a.py", False),
        ("**/test_*.py", "test_a.py", True),
        ("**/test_*.py", "x/y/test_a.py", True),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("/setup.py", "setup.py", True),
        ("/setup.py", "pkg/setup.py", False),
        ("doc?/*.md", "docs/a.md", True),
        ("[!.]*", ".hidden", False),
        ("*.PY", "a.py", False),
        ("[z-a].py", "a.py", False),  # a range the wrong way round holds nothing
        ("[!z-a]", "q", True),
        ("[a-[ab]", "[", False),
        ("[a-c-e]", "-", True),
    ],
)
def test_the_glob_rule(pattern: str, path: str, matches: bool) -> None:
    assert bool(matching([pattern], [path])) is matches


def test_git_runs_no_filter_the_checkout_names(readable_tmp: Path) -> None:
    """A checkout whose .git/config names a `clean` filter (and a long-running `process`
    one) for its files, one of them changed: diff hashed the changed file through the
    filter, so the supervisor ran the checkout's command, as its user, outside any sandbox,
    for exec --explain alone. The filters are emptied: the file counts as changed all the
    same, and nothing ran."""
    root = new_repo(readable_tmp / "r", {"a.txt": "a\n", ".gitattributes": "* filter=x\n"})
    ran = readable_tmp / "ran"
    for key in ("clean", "process"):
        git(root, "config", f"filter.x.{key}", f"touch {ran}-{key}; cat")
    git(root, "config", "filter.X.CLEAN", f"touch {ran}-upper; cat")  # (names hold no case)
    (root / "a.txt").write_text("b\n")
    os.utime(root / "a.txt", (0, 0))  # (its stat no longer says it changed: git reads it)
    changed = trio.run(git_changes, str(root))
    assert changed.paths == ("a.txt",)
    assert list(readable_tmp.glob("ran-*")) == []


def test_given_files_and_mismatch_words() -> None:
    assert given_files("./a.py\n\n  b/c.txt \n./a.py\n").paths == ("a.py", "b/c.txt")
    outside = ChangedFiles(None, "not a checkout")
    assert files_mismatch(["*.py"], outside) is None
    many = ChangedFiles(("a", "b", "c", "d", "e"), "listed")
    assert "5 file(s) changed (a, b, c and 2 more)" in str(files_mismatch(["*.py"], many))


def test_when_files_on_another_point_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[[hooks]]\non = "call"\nphase = "before"\nrun = ["true"]\nwhen = { files = ["*.py"] }\n'
    )
    out = mcpx("validate", "c.toml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 2
    assert "/hooks/0/when/files" in out.stdout + out.stderr


def fake_git(where: Path, marker: str, fifo: Path | None = None) -> None:
    """A `git` in `where`/bin that never ends, `marker` in its argv. With `fifo`: it first
    starts a child that sleeps too (its pid in `where`/grandchild), then says so on `fifo`."""
    sleeper = f"{sys.executable} -c 'import time; time.sleep(3600)' {marker}"
    child = f'{sleeper} &\necho $! > "{where}/grandchild"\necho started > "{fifo}"\n'
    script = where / "bin" / "git"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\n{child if fifo is not None else ''}exec {sleeper}\n")
    script.chmod(0o755)


async def test_a_cancelled_run_kills_git_and_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: Marker
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fake_git(tmp_path, marker, fifo)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(git_changes, str(tmp_path))
        await trio.to_thread.run_sync(fifo.read_text)  # git has started its child
        nursery.cancel_scope.cancel()
    await _gone(tmp_path / "grandchild")
    assert marker.alive() == []


async def test_git_past_its_bound_is_killed_and_the_hooks_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: Marker, autojump_clock: trio.abc.Clock
) -> None:
    fake_git(tmp_path, marker)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    changed = await git_changes(str(tmp_path))
    assert changed.paths is None
    assert changed.how == f"git rev-parse took over {GIT_TIMEOUT_S:g} s"
    assert marker.alive() == []  # reaped before git_changes returned


async def _gone(pid_file: Path) -> None:
    """Returns once the process whose pid is in `pid_file` has exited."""
    pidfd = os.pidfd_open(int(pid_file.read_text()))
    try:
        with trio.fail_after(10):  # (a bound for a failure, not a wait for things to settle)
            await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def test_a_shallow_ci_clone_without_the_merge_base_runs_the_hook(repo: Path) -> None:
    """A CI job's clone (`--depth 1` of a feature branch, the default branch fetched as
    deep): origin/HEAD is there, their merge base is not. The base fell back to HEAD, so
    the branch's own commits did not count, the py hook was passed over on a branch that
    changed a .py file, and --explain said there was "no origin/HEAD, main or master". Now
    there is no list (the hook runs) and the words say what to fetch or set."""
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "src/app/main.py").write_text("x = 2\n")
    git(repo, "commit", "-q", "-am", "feature work")
    git(repo, "checkout", "-q", "main")
    clone = repo.parent / "ci"
    git(repo.parent, "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{repo}", "ci")
    alone = trio.run(git_changes, str(clone)).how  # no default branch fetched: from HEAD
    assert "origin/master, main or master; a shallow clone: fetch the default branch" in alone
    git(clone, "fetch", "-q", "--depth", "1", "origin", "main:refs/remotes/origin/main")
    git(clone, "remote", "set-head", "origin", "main")
    assert ran(clone) == ["py", "src", "always"]
    changed = trio.run(git_changes, str(clone))
    assert changed.paths is None
    assert "HEAD and origin/HEAD have no commit in common in this clone" in changed.how
    assert "a shallow clone" in changed.how
    assert "git fetch --unshallow" in changed.how


def test_a_ci_checkout_with_the_remote_s_branches_but_no_origin_head_counts_the_branch(
    repo: Path,
) -> None:
    """A CI job's checkout as GitHub's `actions/checkout` makes one with its whole history
    (`fetch-depth: 0`): the remote's branches fetched as refs/remotes/origin/*, the branch
    checked out, and neither `origin/HEAD` nor a local `main`. The base fell back to HEAD,
    so on a branch that changed a .py file the py hooks were passed over: a check skipped
    on every pull request. origin/main is now asked before the local branches."""
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "src/app/main.py").write_text("x = 2\n")
    git(repo, "commit", "-q", "-am", "feature work")
    git(repo, "checkout", "-q", "main")
    clone = repo.parent / "ci"
    clone.mkdir()
    git(clone, "init", "-q")
    git(clone, "remote", "add", "origin", f"file://{repo}")
    git(clone, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
    git(clone, "checkout", "-q", "-B", "feature", "refs/remotes/origin/feature")
    assert ran(clone) == ["py", "src", "always"]
    assert "against the merge base with origin/main" in trio.run(git_changes, str(clone)).how


def test_a_branch_with_no_history_in_common_runs_the_hook(repo: Path) -> None:
    git(repo, "checkout", "-q", "--orphan", "pages")
    git(repo, "commit", "-q", "-m", "its own history")
    changed = trio.run(git_changes, str(repo))
    assert changed.paths is None
    assert changed.how.startswith("HEAD and main have no commit in common")
    assert "set [when] base" in changed.how
    assert ran(repo) == ["py", "src", "always"]


def test_a_checkout_git_refuses_is_not_called_no_checkout(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout another user owns (git's "dubious ownership", as `nobody` running in a
    root's clone): explain said "is not in a git checkout", which sent one looking for a
    missing .git. Now it says git refuses it, and git's own way to allow it."""
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # (git's own switch for this)
    changed = trio.run(git_changes, str(repo))
    assert changed.paths is None
    assert changed.how.startswith(f"git refuses the checkout {repo} is in (fatal: detected dubious")
    assert f"git config --global --add safe.directory {repo}" in changed.how
