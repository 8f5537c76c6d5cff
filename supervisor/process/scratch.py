"""Private scratch directories for hooks and runs: created per process, removed afterwards.

They live on a RAM-backed tmpfs (`/dev/shm`) when there is one we can write to: creating and
removing a directory there costs microseconds, against about a millisecond on this machine's
disk. Elsewhere, the supervisor's temporary directory.

A process that is killed (SIGKILL, the OOM killer) removes nothing: what its runs left in
their scratch would hold that RAM until the machine restarts. So each process puts its
scratch directories in one directory of its own under the root, `owner-<pid>-<random>`, on
which it holds a lock (`flock`) for as long as it lives: the kernel lets the lock go when
the process ends, however it ends. The first scratch directory a process makes sweeps the
root: each owner directory whose lock it can take belongs to a process that is gone, and is
removed with everything in it. One a process holds is never touched, whatever its pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import Final

#: Where scratch directories go when it is usable; override with MCPX_HOOKS_SCRATCH_ROOT.
RAM_ROOT: Final = "/dev/shm"
ROOT_ENV: Final = "MCPX_HOOKS_SCRATCH_ROOT"
#: How a process's own directory under the root is named (then its pid, then random).
OWNER_PREFIX: Final = "owner-"
#: The fd of this process's owner directory, locked: kept open until the process ends.
_held: list[int] = []


@functools.cache
def scratch_root() -> str:
    """`mcpx-hooks-<uid>` under the RAM root: made 0700 once and kept (it stays empty between
    runs). One that exists but is not ours and private is not used: a fresh one is made."""
    base = os.environ.get(ROOT_ENV) or RAM_ROOT
    if not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):
        base = tempfile.gettempdir()
    root = os.path.join(base, f"mcpx-hooks-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    info = os.lstat(root)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0:
        return root
    return tempfile.mkdtemp(prefix=f"mcpx-hooks-{os.getuid()}-", dir=base)


@functools.cache
def owner_dir() -> str:
    """This process's directory under the root, locked while it lives; the root swept of
    those of processes that are gone first. Made under a name the sweep passes over, then
    renamed once locked: no sweep ever sees it unlocked."""
    root = scratch_root()
    sweep(root)
    made = tempfile.mkdtemp(prefix=".new-", dir=root)
    fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held.append(fd)
    path = os.path.join(root, f"{OWNER_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    os.rename(made, path)
    return path


def sweep(root: str) -> None:
    """Removes each owner directory under `root` whose process is gone (its lock is free)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.name.startswith(OWNER_PREFIX):
                _remove_if_free(entry.path)


def _remove_if_free(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone already (another sweep), or not a directory
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # held: its process lives
    try:
        remove_tree(path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A new private (0700) directory, removed with everything in it on exit."""
    # What `tempfile.mkdtemp` does, in about half its time: the root is ours alone (0700), so
    # a name already there (64 random bits) is a fault, not a race to retry.
    path = os.path.join(owner_dir(), prefix + secrets.token_hex(8))
    os.mkdir(path, 0o700)
    try:
        yield path
    finally:
        # Most hooks leave it empty: one rmdir, against rmtree's open, scan and rmdir.
        try:
            os.rmdir(path)
        except OSError:  # not empty (or already gone): rmtree removes whatever is left
            remove_tree(path)


def remove_tree(path: str) -> None:
    """Removes directory `path` with everything in it. Where a hook left directories
    read-only or unsearchable (`chmod -R a-w`, a Go module cache), rmtree alone fails for
    anyone but root, and the tree would hold its RAM for good: they are opened up to their
    owner (0700, no symlink followed) and it is tried once more."""
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            _open_up(path)
            shutil.rmtree(path, ignore_errors=True)


def _open_up(path: str) -> None:
    """Makes directory `path` and every directory below it 0700, following no symlink."""
    todo = [path]
    while todo:
        directory = todo.pop()
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)
            with os.scandir(directory) as entries:
                todo.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
