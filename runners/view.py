"""The filesystem a sandboxed hook sees: step 1 of a jailed spawn (`jail.py`), in the mount
namespace of an armed thread or process whose tree is already private, read-only and nosuid.

Standard library only. Per request:
* the scratch directory becomes a size-limited tmpfs (what the supervisor put there is copied
  in, owned by the hook's user);
* where the hook's user could not reach a path it needs (an ancestor such as `/root` or
  `/tmp/pytest-of-root` is 0700), a small tmpfs *covers* that ancestor and only the needed
  paths are bound into it, so the rest of it (a home, a token file) is not even there. A cover
  that holds the scratch is the scratch's size limit.

Which ancestors are covered is worked out per request, from the modes the directories have
then (one `stat` per directory, `confine.traversable`); the paths bound are the fds the
request opened for Landlock (`jail.Grants`), so a cover shows exactly the inodes the rules
allow.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import struct

from . import confine
from .spawnreq import Sandbox, StartError

_libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
#: Inodes and bytes of a tmpfs that only holds the directories leading to bound paths.
_COVER_OPTIONS = "mode=0755,size=1m,nr_inodes=4096"
#: Files and directories a scratch tmpfs may hold, per MiB of its size (min 1024).
_INODES_PER_MB = 64
_COPY_CHUNK = 1 << 20


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], flags, enc[3] or None) != 0:
        err = ctypes.get_errno()
        raise StartError(f"sandbox: cannot mount {target}: {os.strerror(err)}")


def read_only_tree() -> None:
    """Makes every mount of this namespace read-only and nosuid."""
    attr = ctypes.create_string_buffer(
        struct.pack("=QQQQ", _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0), 32
    )
    nr = confine._COMMON["mount_setattr"]
    if confine._syscall(nr, _AT_FDCWD, b"/", _AT_RECURSIVE, attr, 32) != 0:
        err = ctypes.get_errno()
        raise confine.ConfineError(err, f"read-only mount tree: {os.strerror(err)}")


def build(sandbox: Sandbox, ids: tuple[int, int], read: dict[str, int]) -> int | None:
    """Builds the view; returns an fd on the new scratch when the plan returns it. `ids`: the
    hook's uid and gid; `read`: fds of the read paths that exist (bound into covers)."""
    uid, gid = ids
    try:
        host_scratch = os.open(sandbox.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StartError(f"sandbox: scratch {sandbox.scratch}: {exc.strerror}") from exc
    try:
        covers: dict[str, list[str]] = {}
        seen: dict[str, bool | None] = {}
        for path in (*sandbox.read, sandbox.scratch):
            blocked = _blocked_ancestor(path, uid, gid, seen)
            if blocked is not None:
                covers.setdefault(blocked, []).append(path)
        for top in _outermost(list(covers)):
            needed = [p for c, ps in covers.items() if confine.under(c, [top]) for p in ps]
            _cover(top, needed, sandbox, host_scratch, ids, read=read)
        if not any(sandbox.scratch in ps for ps in covers.values()):
            size = _scratch_options(sandbox, ids)
            mount("tmpfs", sandbox.scratch, "tmpfs", MS_NOSUID | MS_NODEV, size)
            copy_tree(host_scratch, sandbox.scratch, ids)
        if not sandbox.return_scratch:
            return None
        return os.open(sandbox.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StartError(f"sandbox: cannot prepare the filesystem view: {exc}") from exc
    finally:
        os.close(host_scratch)


def _blocked_ancestor(path: str, uid: int, gid: int, seen: dict[str, bool | None]) -> str | None:
    parent = os.path.dirname(os.path.normpath(path))
    return confine.traversable(parent, uid, gid, seen) if parent != path else None


def _outermost(paths: list[str]) -> list[str]:
    paths.sort(key=len)
    kept: list[str] = []
    for p in paths:
        if not confine.under(p, kept):
            kept.append(p)
    return kept


def _scratch_options(sandbox: Sandbox, ids: tuple[int, int]) -> str:
    inodes = max(1024, sandbox.scratch_bytes // (1 << 20) * _INODES_PER_MB)
    return f"mode=0700,uid={ids[0]},gid={ids[1]},size={sandbox.scratch_bytes},nr_inodes={inodes}"


def _cover(
    top: str,
    needed: list[str],
    sandbox: Sandbox,
    host_scratch: int,
    ids: tuple[int, int],
    *,
    read: dict[str, int],
) -> None:
    """Covers `top` with a tmpfs holding only `needed` (read paths bound from the original,
    through their fds in `read`; the scratch itself as a fresh directory: then this tmpfs is
    the scratch's size limit)."""
    sources = {p: read[p] for p in needed if p in read and p != sandbox.scratch}
    has_scratch = sandbox.scratch in needed
    owner = (os.getuid(), os.getgid())  # root's, or rootless the caller's (a mapped id)
    options = _scratch_options(sandbox, owner) if has_scratch else _COVER_OPTIONS
    mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, options.replace("0700", "0755"))
    made = {top}
    for path in _outermost(list(sources)):
        is_dir = stat.S_ISDIR(os.fstat(sources[path]).st_mode)
        _make_path(os.path.dirname(path), made)
        if is_dir:
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        mount(f"/proc/thread-self/fd/{sources[path]}", path, None, MS_BIND, "")
    if has_scratch:
        _make_path(os.path.dirname(sandbox.scratch), made)
        os.mkdir(sandbox.scratch, 0o700)
        os.chown(sandbox.scratch, *ids)
        copy_tree(host_scratch, sandbox.scratch, ids)


def _make_path(path: str, made: set[str]) -> None:
    """Makes the directories of `path` (0755) in a new cover; `made`: those there already."""
    parent = os.path.dirname(path)
    if path in made or parent == path:
        return
    _make_path(parent, made)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)
    made.add(path)


def copy_tree(src: int, dst_path: str, ids: tuple[int, int] | None) -> None:
    """Copies the regular files and directories under the directory fd `src` to `dst_path`
    (symlinks and the rest are skipped, never followed); `ids`: chown the copies."""
    dst = os.open(dst_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _copy_into(src, dst, ids)
    finally:
        os.close(dst)


def _copy_into(src: int, dst: int, ids: tuple[int, int] | None) -> None:
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    for entry in os.scandir(src):
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(FileExistsError):
                os.mkdir(entry.name, 0o700, dir_fd=dst)
            sub_src = os.open(entry.name, nofollow | os.O_DIRECTORY, dir_fd=src)
            sub_dst = os.open(entry.name, nofollow | os.O_DIRECTORY, dir_fd=dst)
            try:
                if ids is not None:
                    os.fchown(sub_dst, *ids)
                _copy_into(sub_src, sub_dst, ids)
            finally:
                os.close(sub_src)
                os.close(sub_dst)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(src, dst, entry.name, ids)


def _copy_file(src: int, dst: int, name: str, ids: tuple[int, int] | None) -> None:
    fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fout = os.open(name, flags, 0o600, dir_fd=dst)
        try:
            if ids is not None:
                os.fchown(fout, *ids)
            while chunk := os.read(fin, _COPY_CHUNK):
                os.write(fout, chunk)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
