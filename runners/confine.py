"""The sandbox helper: what the spawner applies to a hook before it runs (strict and net).

Standard library only (ctypes over libc); never imports the supervisor. Everything here acts on
the *calling thread*: the spawner confines a disposable thread and `posix_spawn`s the hook from
it, so the hook inherits the thread's confinement and the spawner itself stays as it was.
Per-thread are: namespaces entered with `unshare`/`setns` (not a user namespace), the working
directory (after `unshare(CLONE_FS)`), credentials changed by the raw system calls (glibc's
`setresuid` would change every thread), `no_new_privs`, a Landlock domain and a seccomp filter
(both installed without their "all threads" flag).

Mechanisms (what the spawner finds of them at its start is `mechanisms.py`), each in a module
of its own over libc (`libc.py`); this one holds the credentials and the path checks:
* `landlock` (`landlock.py`): the filesystem allowlist (read-only system, Python, declaring
  dir, cwd and `[sandbox] read`; read-write scratch, the write paths and a few devices), no
  TCP bind/connect (ABI 4+, strict), no abstract Unix sockets or signals outside the hook's
  own domain (ABI 6+).
* `seccomp` (`seccomp.py`): a small deny list (ptrace, mounts, namespaces, kernel keyrings,
  bpf, raising resource limits, set-user-ID and set-group-ID modes, io_uring, ...) and, under
  strict, `socket()` for anything but netlink (with `network`, but netlink, IPv4 and IPv6).
* `uid`: a per-hook unprivileged uid and gid (the supervisor is root), no supplementary groups,
  so `RLIMIT_NPROC` holds and the host's DAC applies.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .libc import PR_SET_NO_NEW_PRIVS, check, libc, nr, syscall
from .start import StartError

if TYPE_CHECKING:
    from .spawnreq import Request


def no_new_privs() -> None:
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def become(uid: int, gid: int) -> None:
    """This thread only: no supplementary groups, real/effective/saved gid and uid set; the
    thread loses every capability with its uid 0."""
    check(syscall(nr("setgroups"), 0, None), "setgroups")
    check(syscall(nr("setresgid"), gid, gid, gid), "setresgid")
    check(syscall(nr("setresuid"), uid, uid, uid), "setresuid")


def traversable(
    path: str,
    uid: int,
    gid: int,
    seen: dict[str, bool | None] | None = None,
    *,
    start: str = "",
    owner: tuple[int, int] | None = None,
    own: tuple[int, int] | None = None,
) -> str | None:
    """The first ancestor of `path` (or `path` itself) that `uid`/`gid` cannot search, or None.

    Approximates the kernel's check from the mode bits (ACLs are not read): owner, group (the
    hook's own gid only: it has no supplementary groups), others. `seen`: what was found for
    each directory already looked at, shared between calls for the same ids (and `owner`):
    one `stat` per directory rather than per path through it. `start`: a directory above
    `path` the walk starts below (it is not looked at). `owner`: below `start` the files
    are seen through an idmapped mount (`idmap.py`) that makes this uid and gid the hook's:
    a directory they own is searched with its owner's (group's) bits. `own`: this thread's
    uid and gid, when the caller has them (a view asks for each path: `view._covers`).
    """
    # The hook's ids are this process's real ones (rootless): the kernel's own answer at once
    # (`access` checks the real ids, capabilities aside, as the hook will be checked).
    mine = owner is None and uid != 0 and (uid, gid) == (own or (os.getuid(), os.getgid()))
    if mine and os.access(path, os.X_OK):
        return None
    seen = {} if seen is None else seen
    current = start.rstrip("/")
    for part in os.path.normpath(path)[len(current) :].split("/"):
        if not part:
            continue
        current = f"{current}/{part}"
        if current not in seen:
            seen[current] = _searchable(current, uid, gid, owner)
        found = seen[current]
        if found is None:  # not there, or not a directory
            return None
        if not found:
            return current
    return None


def _searchable(path: str, uid: int, gid: int, owner: tuple[int, int] | None = None) -> bool | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    if info.st_uid == (uid if owner is None else owner[0]):
        bit = 0o100
    elif info.st_gid == (gid if owner is None else owner[1]):
        bit = 0o010
    else:
        bit = 0o001
    return bool(info.st_mode & bit)


def under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def give_pipes(req: Request, uid: int) -> None:
    """The child's pipes (its stdin, stdout, stderr, frames channel) become its uid's.

    A hook reopens them by `/dev/stderr`, `/dev/stdout`, `/dev/fd/N` (`/proc/self/fd/N`), as
    `echo x >/dev/stderr` does, and reopening a pipe checks its mode: one made by root (the
    spawner's, the supervisor's) is root's, 0600, and a per-child uid was refused. Nothing else
    becomes reachable: Landlock still grants no path under `/proc` (it lets a magic link to a
    pipe through, whoever made the pipe), and reaching another process's `/proc/PID/fd` takes
    ptrace access to it, which another uid and Landlock's domains refuse. Only anonymous pipes
    (pipefs) change owner: a device (`/dev/null`), a named FIFO or a file keeps its own."""
    pipefs = _pipefs_dev()
    # Placed (`place_fds`, a warm fork), the fds are at their numbers; else at their sources.
    fds = [source for source, _ in req.pairs] if req.fds else [t for _, t in req.pairs]
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError as exc:
            if exc.errno == errno.EBADF:  # read and closed already (a warm fork's environment)
                continue
            raise StartError(f"sandbox: cannot give the child its pipes: {exc.strerror}") from exc
        try:
            if stat.S_ISFIFO(st.st_mode) and st.st_dev == pipefs:
                os.fchown(fd, uid, uid)
        except OSError as exc:
            raise StartError(f"sandbox: cannot give the child its pipes: {exc.strerror}") from exc


@functools.cache
def _pipefs_dev() -> int:
    """The device of anonymous pipes (one pipefs for the whole system)."""
    r, w = os.pipe()
    try:
        return os.fstat(r).st_dev
    finally:
        os.close(r)
        os.close(w)


def check_reachable(path: str, what: str, notes: dict[str, str]) -> None:
    if not os.access(path, os.R_OK | os.X_OK):
        raise unreachable(path, what, notes, os.getuid())


def unreachable(path: str, what: str, notes: dict[str, str], uid: int) -> StartError:
    why = next((f" ({p}: {n})" for p, n in notes.items() if under(path, [p])), "")
    return StartError(
        f"sandbox: the hook's user (uid {uid}) cannot read its {what} {path}{why}: "
        "its mode bits keep it out, and it is not a grant whose owner the hook stands for "
        '(docs/sandbox.md, "Grants beat mode bits"): make it readable by others (o+rx)'
    )
