"""What no profile but `none` reaches, whatever the grants say, and what stays read-only
inside a writable grant.

Landlock only ever allows, so a path beneath a grant cannot be taken out of it there: the
child's mount view is where it is denied (`runners/deny.py`). The plan (`sandbox.plan`)
names, real (symlinks resolved, so a link to a denied path leads to the cover) and existing:
- `deny`: the supervisor's own files (`/etc/mcpx-hooks`, the user's `mcpx-hooks` config,
  state and cache directories: the token, the trust store, the prompt cache, the history)
  and the credential stores of the home (`DEFAULT_DENY`, and `[sandbox] deny`) that lie
  beneath a grant: each is covered, a directory by an empty read-only tmpfs, a file by a
  device node no one may open. A grant that lies in one of them is dropped altogether;
- `read_only`: in each writable grant, the files a person or the supervisor runs later
  (`.git/hooks`, `.git/config`, `.git` when it is a file or lacks either, the project's
  `.mcpx-hooks.toml` / `.mcpx-hooks.json`, and the config files in force wherever they
  are): each is bound read-only over itself. A link to nothing (or a loop) is no file to
  bind; one that `.git/hooks` or `.git/config` is, naming a path a script could make in a
  writable grant, refuses the sandbox (`SandboxUnavailable`), saying how to mend it.

Pure apart from reading paths (`os.path.lexists`, `realpath`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Final

from ..core.errors import SandboxUnavailable

#: The credential stores of a home that no sandbox reaches (`[sandbox] deny` adds to them).
DEFAULT_DENY: Final = (
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.pypirc",
    "~/.git-credentials",
)
#: The system-wide config directory of the supervisor.
ETC_DIR: Final = "/etc/mcpx-hooks"
#: In a writable grant, what stays read-only (relative to the grant): a script must not plant
#: code that a person or the supervisor runs later.
READ_ONLY_NAMES: Final = (".git/hooks", ".git/config", ".mcpx-hooks.toml", ".mcpx-hooks.json")
#: What in a repository's `.git` git runs, or reads for what to run.
_GIT_RUNS: Final = ("hooks", "config")


#: The running supervisor's own files besides its directories, wherever they lie: the config
#: files in force (kept read-only in every view: a script must not plant a hook the server
#: loads again) and a service's token file (denied). Set by `open_runtime` and `serve` for
#: what runs under them (`own_files`, `deny_own_files`).
_OWN: ContextVar[tuple[tuple[str, ...], tuple[str, ...]]] = ContextVar(
    "mcpx_hooks_own_files", default=((), ())
)


@contextlib.contextmanager
def own_files(read_only: Iterable[str]) -> Iterator[None]:
    """Within it, `read_only` (the config files in force) stay read-only in every view."""
    kept, hidden = _OWN.get()
    token = _OWN.set(((*kept, *read_only), hidden))
    try:
        yield
    finally:
        _OWN.reset(token)


def deny_own_files(paths: Iterable[str]) -> None:
    """From now on in this context (and the tasks it starts), `paths` (a service's token
    file) are denied to every sandbox, as the supervisor's own files are."""
    kept, hidden = _OWN.get()
    _OWN.set((kept, (*hidden, *(os.path.abspath(p) for p in paths))))


def _homes(environ: Mapping[str, str]) -> list[str]:
    found = (environ.get("HOME", ""), _password_home(os.getuid()))
    return [h for h in dict.fromkeys(found) if _a_home(h)]


def _xdg(environ: Mapping[str, str], name: str, fallback: str, home: str) -> str:
    given = environ.get(name, "")
    return given if os.path.isabs(given) else os.path.join(home, fallback)


def own_paths(environ: Mapping[str, str] | None = None) -> list[str]:
    """The supervisor's own directories, as named (not resolved): `/etc/mcpx-hooks`, and for
    each home, the `mcpx-hooks` config, state and cache directories."""
    env = os.environ if environ is None else environ
    return _own_paths(env, _homes(env))


def _own_paths(env: Mapping[str, str], homes: Iterable[str]) -> list[str]:
    found = [ETC_DIR]
    for home in homes:
        for name, fallback in (
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_STATE_HOME", ".local/state"),
            ("XDG_CACHE_HOME", ".cache"),
        ):
            found.append(os.path.join(_xdg(env, name, fallback, home), "mcpx-hooks"))
    return list(dict.fromkeys(found))


#: The environment variables the names of `never_granted` depend on.
_NAMING_ENV: Final = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


def never_granted(extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> list[str]:
    """Every path no profile but `none` reads or writes, as named: the supervisor's own,
    the credential stores of each home (`DEFAULT_DENY`) and `extra` (`[sandbox] deny`,
    absolute already). Named once per set of inputs (about 20 us each time otherwise, on
    every sandboxed child's way); whether each exists is the caller's to ask each time."""
    env = os.environ if environ is None else environ
    given = tuple(env.get(name, "") for name in _NAMING_ENV)
    return list(_named(given, _password_home(os.getuid()), _OWN.get()[1], tuple(extra)))


@functools.lru_cache(maxsize=64)
def _named(
    given: tuple[str, ...], pw_home: str, hidden: tuple[str, ...], extra: tuple[str, ...]
) -> tuple[str, ...]:
    env = {name: value for name, value in zip(_NAMING_ENV, given, strict=True) if value}
    homes = [h for h in dict.fromkeys((env.get("HOME", ""), pw_home)) if _a_home(h)]
    stores = [os.path.join(home, p[2:]) for home in homes for p in DEFAULT_DENY]
    return tuple(dict.fromkeys((*_own_paths(env, homes), *hidden, *stores, *extra)))


@functools.lru_cache(maxsize=8)
def _password_home(uid: int) -> str:
    """The password file's home of `uid` ("" when it has none): looked up once."""
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return ""


def _a_home(path: str) -> bool:
    return os.path.isabs(path) and path != "/"


def deny_and_protect(
    read: list[str],
    write: list[str],
    extra: Iterable[str],
    realpath: Callable[[str], str] = os.path.realpath,
) -> tuple[list[str], list[str], tuple[str, ...], tuple[str, ...]]:
    """`read` and `write` (real) without what lies in a denied path, the denied paths to
    cover in the view (real, existing, beneath a grant), and the paths to keep read-only in
    the writable grants (real, existing)."""
    real = realpath
    denied = list(dict.fromkeys(real(p) for p in never_granted(extra) if os.path.lexists(p)))
    read = [p for p in read if not _under(p, denied)]
    write = [p for p in write if not _under(p, denied)]
    grants = [*read, *write]
    cover = tuple(d for d in denied if any(d != g and _under(d, [g]) for g in grants))
    protect: list[str] = []
    candidates = [os.path.join(g, name) for g in write for name in _read_only_names(g)]
    for path in (*candidates, *_OWN.get()[0]):
        if not os.path.lexists(path):
            continue
        found = real(path)
        if not os.path.exists(found):  # (a link to nothing, or a loop: nothing to bind)
            continue
        if _under(found, write) and not _under(found, denied):
            protect.append(found)
    for grant in write:
        _no_git_link_to_fill(grant, write, real)
    return read, write, cover, tuple(dict.fromkeys(protect))


def _no_git_link_to_fill(grant: str, write: list[str], real: Callable[[str], str]) -> None:
    """Raises `SandboxUnavailable` when `grant`'s `.git/hooks` or `.git/config` is a link
    to nothing that lies in a writable grant, outside `.git` (kept read-only whole then,
    `_read_only_names`): there is nothing to bind read-only, and a script could make what
    it names, hooks or a config that git runs later."""
    git = os.path.join(grant, ".git")
    for name in _GIT_RUNS:
        link = os.path.join(git, name)
        if not os.path.islink(link) or os.path.exists(link):
            continue
        target = real(link)
        if _under(target, write) and not _under(target, [git]):
            raise SandboxUnavailable(
                f"sandbox: {link} is a link to {target}, which does not exist, in a directory"
                f" this run may write: a script could make it, and git would run what it"
                f" holds; make it (mkdir, or an empty file for a config) or remove the link"
            )


def _read_only_names(grant: str) -> tuple[str, ...]:
    """What stays read-only in the writable grant `grant`: `READ_ONLY_NAMES`, but `.git`
    itself when it is a file (a worktree's pointer to its repository) or when it lacks its
    hooks or its config, or either is a link to nothing or a loop (a script must not make
    them, or put them in the link's place)."""
    git = os.path.join(grant, ".git")
    if os.path.lexists(git) and (
        not os.path.isdir(git) or not all(os.path.exists(os.path.join(git, n)) for n in _GIT_RUNS)
    ):
        return (".git", ".mcpx-hooks.toml", ".mcpx-hooks.json")
    return READ_ONLY_NAMES


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def hidden_homes(grants: Iterable[str]) -> tuple[str, ...]:
    """The supervisor's homes (real) that hold a grant (`grants`: real) and are none of them
    nor lie in one: the view covers each, showing in it only what is granted, so that a name
    beside a grant is not there (ENOENT) rather than there and unreadable (EACCES, which a
    tool walking up for its config, pytest or ruff reading `~/pyproject.toml`, fails on)."""
    given = tuple(grants)
    found = [_real_home(h) for h in _homes(os.environ)]
    return tuple(
        h
        for h in dict.fromkeys(found)
        if h != "/" and not _under(h, given) and any(g.startswith(h + "/") for g in given)
    )


@functools.lru_cache(maxsize=8)
def _real_home(home: str) -> str:
    """`home` with its links resolved: asked once (a home that becomes a link elsewhere
    later is covered where it was, which hides no less than before and grants nothing)."""
    return os.path.realpath(home)
