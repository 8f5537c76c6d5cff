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
removed with everything in it. One a process holds is never touched, whatever its pid. A
process that ends (not killed) removes its own, once its runs left it empty.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import os
import secrets
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
    _owned.append(path)
    atexit.register(leave_scratch)
    return path


#: This process's owner directory, once made (`owner_dir`), until it leaves (`leave_scratch`).
_owned: list[str] = []


def leave_scratch() -> None:
    """At this process's end (one that ends, not one killed; `os._exit` skips `atexit`: the
    command line calls it before): its directory goes, when its runs left it empty (else
    the next sweep removes it), then its lock."""
    while _owned:
        with contextlib.suppress(OSError):
            os.rmdir(_owned.pop())
    while _held:
        with contextlib.suppress(OSError):
            os.close(_held.pop())


def sweep(root: str) -> None:
    """Removes each owner directory under `root` whose process is gone (its lock is free)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.name.startswith(OWNER_PREFIX):
                _remove_if_free(entry.path)


def _free(path: str, flags: int, *, mine: bool = False) -> int | None:
    """An fd of `path` with its lock now held by this process; None when `path` is gone
    (another sweep), not what `flags` open, locked (its process lives), or (`mine`) owned
    by another user (theirs to sweep)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if mine and os.fstat(fd).st_uid != os.getuid():
            raise PermissionError(path)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_if_free(path: str) -> None:
    if (fd := _free(path, os.O_RDONLY | os.O_DIRECTORY)) is not None:
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


#: Directories made on disk by `held_dir`, each with the descriptor of its lock file.
_held_dirs: dict[str, int] = {}
_LOCK_SUFFIX: Final = ".lock"


def held_dir(prefix: str) -> str:
    """A new empty directory (0700) in the temporary directory, `<prefix><random>`, on disk:
    for what must not be on the RAM root. Its process removes it (`release_held`); one whose
    process was killed first is removed, with what is in it, by the next call for the same
    prefix. A lock file beside it, `.<name>.lock`, is held (`flock`) while its process lives
    (not the directory itself: what runs in it may lock that); it is made under a name the
    sweep passes over and renamed once locked, so no sweep ever sees it free."""
    base = tempfile.gettempdir()
    sweep_held(base, prefix)
    name = prefix + secrets.token_hex(6)
    new = os.path.join(base, f".new-{name}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(new, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = os.path.join(base, name)
        os.mkdir(path, 0o700)
        os.rename(new, os.path.join(base, f".{name}{_LOCK_SUFFIX}"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(new)
        os.close(fd)
        raise
    _held_dirs[path] = fd
    return path


def release_held(path: str) -> None:
    """Removes `path` with everything in it (`remove_tree`), and its lock file when it is a
    `held_dir` of this process: the directory first, so that no sweep sees it unlocked."""
    fd = _held_dirs.pop(path, None)
    remove_tree(path)
    if fd is not None:
        base, name = os.path.split(path)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(base, f".{name}{_LOCK_SUFFIX}"))
        os.close(fd)


def sweep_held(base: str, prefix: str) -> None:
    """Removes each `held_dir` of this user under `base` whose process is gone (its lock
    file's lock is free), and that lock file."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            name = entry.name[1 : -len(_LOCK_SUFFIX)]
            if entry.name.startswith(f".{prefix}") and entry.name.endswith(_LOCK_SUFFIX):
                _remove_if_dead(entry.path, os.path.join(base, name))


def _remove_if_dead(lock: str, path: str) -> None:
    if (fd := _free(lock, os.O_RDONLY, mine=True)) is not None:
        try:
            remove_tree(path)
            with contextlib.suppress(OSError):
                os.unlink(lock)
        finally:
            os.close(fd)


def remove_tree(path: str) -> None:
    """Removes directory `path` with everything in it, by file descriptor: each directory is
    opened without following a symlink and what is in it is removed relative to that
    descriptor, so a name swapped for a symlink meanwhile (by a process of the hook's user
    still about) is removed as the symlink it is, and nothing outside the tree is ever
    changed or removed, even when the supervisor is root. A directory a hook left unreadable
    or read-only (`chmod -R a-w`, `chmod 000`, a Go module cache) is opened up to its owner
    (0700) through a descriptor of that directory itself, not its name. A symlink at `path`
    itself is left as it is. Errors are not raised: what cannot be removed stays."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        top = _open_dir(parent_fd, name)
        if top is None:
            return
        try:
            # Again while a pass changed something and left the top not empty: what was
            # moved up into it, or renamed into a directory already passed by.
            for _ in range(_MAX_PASSES):
                if _clear(top) == 0 or _remove(parent_fd, name, directory=True, mine=False):
                    break
        finally:
            os.close(top)
        _remove(parent_fd, name, directory=True, mine=False)
    finally:
        os.close(parent_fd)


#: Directories held open at once while removing a tree: one deeper is moved up into the
#: tree's top (a rename between two descriptors held) and removed from there on the next
#: pass, so a hook's million nested directories cost neither a million descriptors nor a
#: recursion that would fail; passes at most (a tree deeper than both is left).
_MAX_DEPTH: Final = 64
_MAX_PASSES: Final = 4096
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _clear(top: int) -> int:
    """Removes what is in directory `top`, depth first, holding at most `_MAX_DEPTH`
    descriptors; how many entries it removed or moved up into `top` (for the next pass)."""
    done = 0
    stack: list[tuple[int, str, list[os.DirEntry[str]]]] = [(top, "", _entries(top))]
    while stack:
        fd, name, entries = stack[-1]
        if not entries:
            stack.pop()
            if stack:
                os.close(fd)
                done += _remove(stack[-1][0], name, directory=True)
            continue
        entry = entries.pop()
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if not is_dir:
            done += _remove(fd, entry.name, directory=False)
        elif len(stack) >= _MAX_DEPTH:
            with contextlib.suppress(OSError):
                deep = f".deep-{secrets.token_hex(8)}"
                os.rename(entry.name, deep, src_dir_fd=fd, dst_dir_fd=top)
                done += 1
        elif (child := _open_dir(fd, entry.name)) is not None:
            stack.append((child, entry.name, _entries(child)))
        else:  # a symlink or a file by now, or gone: removed as what it is
            done += _remove(fd, entry.name, directory=False)
    return done


def _entries(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as entries:
            return list(entries)
    except OSError:
        return []


def _open_dir(dir_fd: int, name: str) -> int | None:
    """A descriptor of the directory `name` in `dir_fd` (None: it is not a directory, a
    symlink included, or cannot be opened). One its owner may not read (mode 000) is opened
    up (0700) first, through an `O_PATH` descriptor: the directory itself, whatever its name
    means by then (named through /proc/self/fd: where /proc is not mounted, such a directory
    stays rather than be opened up by a name that could have been swapped)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        pass
    except OSError:
        return None
    try:
        held = os.open(name, os.O_PATH | _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        itself = f"/proc/self/fd/{held}"  # (names the inode held, not a path to look up)
        os.chmod(itself, 0o700)
        return os.open(itself, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError:
        return None
    finally:
        os.close(held)


def _remove(dir_fd: int, name: str, *, directory: bool, mine: bool = True) -> bool:
    """Removes `name` in `dir_fd` (a directory: empty by now); where `dir_fd` is read-only
    (a hook's `chmod a-w`) and `mine` (in the tree, not the directory holding it), it is
    opened up to its owner and tried once more. Whether it was removed."""
    for attempt in range(2):
        try:
            if directory:
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except PermissionError:
            if attempt == 0 and mine:
                with contextlib.suppress(OSError):
                    os.fchmod(dir_fd, 0o700)
                    continue
        except OSError:
            pass
        else:
            return True
        return False
    return False
