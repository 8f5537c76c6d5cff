"""Grants beat mode bits: a granted directory seen through an idmapped mount (`view.py`).

Standard library only. Where the spawner is root, a hook runs as a per-child uid that owns no
file: a project under a 0700 directory, or files of mode 0600, would stay out of its reach
although the operator granted them. The view therefore attaches each granted path (the plan's
`mapped`) as a copy of its mount tree (`open_tree(OPEN_TREE_CLONE)`) made *idmapped*
(`mount_setattr(MOUNT_ATTR_IDMAP)`) through a user namespace whose maps hold one line each:
the grant's owner uid -> the hook's uid, its group -> the hook's gid. Through that mount, and
only there, the owner's files are the hook's; files of any other owner are unmapped (they
show as the overflow id, 65534) and the hook has the access "others" have; what the hook
creates there is owned, on disk, by the grant's owner. The copy is read-only unless the grant
is writable, always nosuid and nodev. Nothing else changes: the rest of the tree, and the
same files reached by any other path, keep their owners and mode bits.

A user namespace is only a carrier for the maps: no process runs in it once it is made. It is
made by a short-lived forked child that unshares it and waits while the parent writes the maps
and opens `/proc/PID/ns/user`. An armed thread (a jail thread, or the spawner's own armed
for a child, `inline.py`) first returns to the spawner's own PID
namespace (`home`; its next child would otherwise join the namespace meant for the hook,
and an armed thread cannot start threads) and enters that one again after. Namespaces are
kept, by owner and hook ids, up to `KEPT`: the per-child uids are reused slot by slot, so a
busy spawner needs a handful. A warm fork (`warm.py`) uses those it inherits and hands those
it makes back to the spawner, for the forks after it.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import struct
import threading
from collections.abc import Iterator

from . import libc
from .libc import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_RECURSIVE,
    EVERYWHERE,
    MOUNT_ATTR_IDMAP,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    ConfineError,
    check,
    syscall,
)

_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
#: User namespaces kept for reuse (one fd each), the least recently used closed first.
KEPT = 64

Key = tuple[int, int, int, int]
_kept: collections.OrderedDict[Key, int] = collections.OrderedDict()
#: The namespaces of `_kept` made in this process since it was forked (a warm fork hands
#: those back to the spawner, `forget`).
_made: set[Key] = set()
_lock = threading.Lock()


def kept_fds() -> list[int]:
    """The kept namespaces' fds: a jailed warm fork keeps those it inherits open, for its
    request to use (`warm.py`)."""
    return list(_kept.values())


def forget() -> list[tuple[Key, int]]:
    """Closes every kept namespace but those made here since the fork, which it returns, for
    the caller to pass on (a warm fork, to the spawner: the next fork then inherits them)
    and close: a warm fork becomes the hook without an exec, so no fd of its own may stay
    open (close-on-exec does not close them)."""
    made = []
    with _lock:
        while _kept:
            key, fd = _kept.popitem()
            if key in _made:
                made.append((key, fd))
            else:
                os.close(fd)
        _made.clear()
    return made


def adopt(made: list[tuple[Key, int]]) -> None:
    """Keeps namespaces a warm fork made (`forget`), as if made here."""
    with _lock:
        for key, fd in made:
            old = _kept.pop(key, None)
            if old is not None:
                os.close(old)
            _kept[key] = fd
        _evict()


def _evict() -> None:
    while len(_kept) > KEPT:
        key, fd = _kept.popitem(last=False)
        _made.discard(key)
        os.close(fd)


def _forget_in_child() -> None:
    # What a fork inherits was made by its parent; a fork that closes the fds it inherits (a
    # plain warm fork) forgets them too (`forget`), before it could reuse their numbers.
    _made.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def userns(owner: tuple[int, int], hook: tuple[int, int], home: int | None) -> int:
    """An fd of a user namespace mapping `owner` (uid, gid) to `hook` (uid, gid), kept here:
    the caller must not close it. `home`: an fd of the spawner's own PID namespace, given
    when this thread is armed for a child (a jail thread, or the spawner's own armed by
    `pidns.py`): the helper child is made there,
    and the thread armed again after (None: its next child may be made as it is, a fork).
    Raises `ConfineError`."""
    key = (*owner, *hook)
    with _lock:
        fd = _kept.get(key)
        if fd is not None:
            _kept.move_to_end(key)
            return fd
        if home is None:
            fd = _make(owner, hook)
        else:
            # The namespace armed for the hook holds its reaper only (`reapers.py`): this
            # thread leaves it for the helper's fork and enters it again after (one with no
            # process yet cannot be entered: a fresh one is armed in its place).
            armed = _armed_namespace()
            try:
                libc.setns(home, libc.CLONE_NEWPID, "the spawner's PID namespace")
                try:
                    fd = _make(owner, hook)
                finally:
                    if armed is None:
                        libc.unshare(libc.CLONE_NEWPID, "a PID namespace")
                    else:
                        libc.setns(armed, libc.CLONE_NEWPID, "the hook's PID namespace")
            finally:
                if armed is not None:
                    os.close(armed)
        _kept[key] = fd
        _made.add(key)
        _evict()
        return fd


def _armed_namespace() -> int | None:
    try:
        return os.open("/proc/thread-self/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # (ENOENT: no process in it yet)
        return None


def _make(owner: tuple[int, int], hook: tuple[int, int]) -> int:
    """Forks a child that unshares a user namespace, writes its maps, returns an fd of it."""
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    done_r, done_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: unshare, say so, wait, exit
        try:
            os.close(ready_r)
            os.close(done_w)
            if libc.libc.unshare(libc.CLONE_NEWUSER) == 0:
                # Its host pid: /proc is the host's (a PID namespace would renumber it).
                os.write(ready_w, os.readlink("/proc/self").encode())
            else:
                os.write(ready_w, b"!" + os.strerror(ctypes.get_errno()).encode())
            os.read(done_r, 1)  # end of file: the parent is done, or gone
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        said = os.read(ready_r, 256).decode()
        if not said or said.startswith("!"):
            raise ConfineError(0, f"user namespace for an idmapped mount: {said[1:]}")
        # os-level writes: a cover may hide the standard library from this thread by now
        # (nothing may be imported here).
        with _writable("/proc"):
            _write(f"/proc/{said}/uid_map", f"{owner[0]} {hook[0]} 1\n")
            _write(f"/proc/{said}/gid_map", f"{owner[1]} {hook[1]} 1\n")
        return os.open(f"/proc/{said}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if isinstance(exc, ConfineError):
            raise
        raise ConfineError(exc.errno or 0, f"idmapped mount: {exc}") from exc
    finally:
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def _writable(path: str) -> Iterator[None]:
    """The mount at `path` writable for a moment, in this thread's mount namespace: an armed
    jail's tree is read-only, /proc included, and the maps are written through /proc. The
    namespace is the jail's own; nothing runs in it yet."""
    if not os.statvfs(path).f_flag & os.ST_RDONLY:
        yield
        return
    _setattr(path, on=0, off=MOUNT_ATTR_RDONLY)
    try:
        yield
    finally:
        _setattr(path, on=MOUNT_ATTR_RDONLY, off=0)


def _setattr(path: str, *, on: int, off: int) -> None:
    attr = struct.pack("=QQQQ", on, off, 0, 0)
    nr = EVERYWHERE["mount_setattr"]
    check(syscall(nr, AT_FDCWD, os.fsencode(path), 0, attr, len(attr)), f"{path} mount")


def clone(source: int, *, writable: bool, userns_fd: int | None) -> int:
    """A detached copy of the mount tree at the fd `source` (its submounts too): read-only
    unless `writable`, nosuid, and idmapped (and nodev: a device node of the owner's must not
    become the hook's) through `userns_fd` when given. Returns its fd, to `attach` then
    close. Raises `ConfineError` (the filesystem of the grant, or of a mount beneath it, may
    not support idmapped mounts: EINVAL)."""
    flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE
    tree = check(syscall(EVERYWHERE["open_tree"], source, b"", flags), "open_tree")
    try:
        on = MOUNT_ATTR_NOSUID | (0 if writable else MOUNT_ATTR_RDONLY)
        off = MOUNT_ATTR_RDONLY if writable else 0
        if userns_fd is not None:
            on |= MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV
        attr = struct.pack("=QQQQ", on, off, 0, userns_fd if userns_fd is not None else 0)
        check(
            syscall(
                EVERYWHERE["mount_setattr"],
                tree,
                b"",
                AT_EMPTY_PATH | AT_RECURSIVE,
                attr,
                len(attr),
            ),
            "mount_setattr" + (" (idmap)" if userns_fd is not None else ""),
        )
    except BaseException:
        os.close(tree)
        raise
    return tree


def attach(tree: int, path: str) -> None:
    """Mounts the detached tree `tree` (`clone`) on `path` of this thread's namespace."""
    check(
        syscall(
            EVERYWHERE["move_mount"],
            tree,
            b"",
            AT_FDCWD,
            os.fsencode(path),
            _MOVE_MOUNT_F_EMPTY_PATH,
        ),
        f"move_mount to {path}",
    )
