"""The files a run counts as changed, for `when.files`, asked of git itself.

`git_changes(cwd, base)` runs `git` under Trio, each command bounded by `GIT_TIMEOUT_S`, in
a process group of its own: a command over its bound, or one whose run is cancelled, is
killed with whatever it started and reaped before `git_changes` returns (`exec --explain`
runs it in a Trio run of its own):

- the top of the checkout (`rev-parse --show-toplevel`); none (not a checkout, git missing,
  git refusing the directory) → no list, and the hooks with `when.files` run;
- the base: `[when] base` when set, else the merge base of HEAD with the first of
  `DEFAULT_BRANCHES` there (`origin/HEAD`, `origin/main`, `origin/master`, `main`,
  `master`), else HEAD itself (no commit yet: none); the first of those
  branches that is there but shares no commit with HEAD in this clone (a shallow clone, an
  unrelated history) → no list: from HEAD the branch's own commits would not count;
- the union of `diff --name-only BASE` (the working tree against the base: commits since it,
  staged and unstaged changes), `diff --cached --name-only BASE` (staged, in case the working
  tree undid them) and `ls-files --others --exclude-standard` (untracked, not ignored).

Paths are relative to the top of the checkout, as git prints them (`-z`: any name). Git runs
as the supervisor's user, outside the sandbox, with `core.fsmonitor` off, no external diff or
text conversion, and each filter driver the checkout's config defines emptied (a `clean`
filter ran when `diff` hashed a changed file of the working tree): it reads the checkout, it
runs nothing the checkout names.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Final

import trio

from ..core.changes import ChangedFiles
from ..core.errors import HooksError

#: The longest one git command may take, in seconds.
GIT_TIMEOUT_S: Final = 30.0
#: The default branch, first where the remote's points (`origin/HEAD`, which a clone sets),
#: then the remote's branches by the usual names (a CI checkout fetches them without setting
#: `origin/HEAD`: GitHub's `actions/checkout`), then the local ones.
DEFAULT_BRANCHES: Final = ("origin/HEAD", "origin/main", "origin/master", "main", "master")
_GIT_FLAGS: Final = ("-c", "core.fsmonitor=false", "-c", "core.quotepath=off")
_DIFF_FLAGS: Final = ("--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv")


class _NoList(HooksError):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


async def _git(
    cwd: str, *args: str, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        with trio.fail_after(GIT_TIMEOUT_S):
            return await trio.run_process(
                ["git", *_GIT_FLAGS, *flags, *args],
                cwd=cwd,
                env=env,
                stdin=b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                start_new_session=True,
                deliver_cancel=_kill_group,
            )
    except FileNotFoundError:
        raise _NoList("git is not installed here (no git on PATH)") from None
    except trio.TooSlowError:
        raise _NoList(f"git {args[0]} took over {GIT_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise _NoList(f"git could not run: {exc.strerror or exc}") from None


async def _kill_group(process: trio.Process) -> None:
    """Git and whatever it started, at once (it only reads the checkout: nothing to save)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _said(done: subprocess.CompletedProcess[bytes]) -> str:
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    return lines[0] if lines else f"git exited with status {done.returncode}"


def _not_a_checkout(cwd: str, done: subprocess.CompletedProcess[bytes]) -> str:
    """Why `cwd` gives no list: not in a checkout, or in one git refuses (another user's:
    git's "dubious ownership", with the line it gives to allow it)."""
    said = _said(done)
    if "not a git repository" in said:
        return f"{cwd} is not in a git checkout ({said})"
    lines = done.stderr.decode(errors="replace").splitlines()
    allow = next((f"; {line.strip()}" for line in lines if "safe.directory" in line), "")
    return f"git refuses the checkout {cwd} is in ({said}{allow})"


async def _commit(top: str, ref: str) -> str | None:
    done = await _git(
        top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"
    )
    return done.stdout.decode().strip() if done.returncode == 0 else None


async def _base(top: str, base: str | None) -> tuple[str | None, str]:
    """The commit to compare against, and how it was chosen, in words."""
    if base is not None:
        commit = await _commit(top, base)
        if commit is None:
            raise _NoList(f'[when] base "{base}" is not a commit in {top}')
        return commit, f'against [when] base "{base}" ({commit[:12]})'
    head = await _commit(top, "HEAD")
    if head is None:
        return None, "in a checkout with no commit yet"
    for branch in DEFAULT_BRANCHES:
        if await _commit(top, branch) is None:
            continue
        done = await _git(top, "merge-base", "HEAD", branch)
        if done.returncode != 0:
            raise _NoList(await _no_merge_base(top, branch))
        commit = done.stdout.decode().strip()
        return commit, f"against the merge base with {branch} ({commit[:12]})"
    shallow = "; a shallow clone: fetch the default branch" if await _shallow(top) else ""
    names = ", ".join(DEFAULT_BRANCHES[:-1]) + f" or {DEFAULT_BRANCHES[-1]}"
    return head, f"against HEAD ({head[:12]}; no {names}{shallow})"


async def _shallow(top: str) -> bool:
    done = await _git(top, "rev-parse", "--is-shallow-repository")
    return done.stdout.decode().strip() == "true"


async def _no_merge_base(top: str, branch: str) -> str:
    """Why there is no list when the default branch is there but its merge base with HEAD
    is not: counting from HEAD instead would leave out the branch's own commits."""
    where = f"HEAD and {branch} have no commit in common in this clone"
    if await _shallow(top):
        return (
            f"{where} (a shallow clone: its history stops before their merge base); fetch "
            "it (git fetch --unshallow, or --deepen), set [when] base, or give the list "
            "with --files-from"
        )
    return f"{where} (unrelated histories); set [when] base, or give the list with --files-from"


async def _no_filters(top: str) -> tuple[str, ...]:
    """`-c filter.NAME.KEY=` for each filter command the checkout's config (includes too)
    defines: an empty one is no filter, so git hashes the file as it is."""
    done = await _git(top, "config", "--null", "--name-only", "--get-regexp", r"^filter\.")
    names = done.stdout.decode(errors="surrogateescape").split("\0")
    keys = [n for n in names if n.lower().endswith((".clean", ".smudge", ".process"))]
    return tuple(flag for key in keys for flag in ("-c", f"{key}="))


def _names(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    if done.returncode != 0:
        raise _NoList(_said(done))
    return [n for n in done.stdout.decode(errors="surrogateescape").split("\0") if n]


async def git_changes(cwd: str, base: str | None = None) -> ChangedFiles:
    """The files changed in the checkout `cwd` is in (module docstring); no list, with why,
    when there is none to take."""
    try:
        found = await _git(cwd, "rev-parse", "--show-toplevel")
        if found.returncode != 0:
            return ChangedFiles(None, _not_a_checkout(cwd, found))
        top = found.stdout.decode(errors="surrogateescape").rstrip("\n")
        commit, how = await _base(top, base)
        quiet = await _no_filters(top)
        paths: list[str] = []
        if commit is not None:
            paths += _names(await _git(top, "diff", *_DIFF_FLAGS, commit, "--", flags=quiet))
            cached = await _git(top, "diff", "--cached", *_DIFF_FLAGS, commit, "--", flags=quiet)
            paths += _names(cached)
        else:
            paths += _names(await _git(top, "diff", "--cached", *_DIFF_FLAGS, "--", flags=quiet))
        others = await _git(top, "ls-files", "--others", "--exclude-standard", "-z", flags=quiet)
        paths += _names(others)
    except _NoList as exc:
        return ChangedFiles(None, exc.why)
    return ChangedFiles(
        tuple(sorted(dict.fromkeys(paths))), f"{how}, with staged, unstaged and untracked files"
    )
