"""The filesystem a sandboxed hook sees: step 1 of a jailed spawn (`jail.py`), in the mount
namespace of an armed thread or process whose tree is already private, read-only and nosuid.

Standard library only. Per request:
* the scratch directory becomes a size-limited tmpfs (what the supervisor put there is copied
  in, owned by the hook's user);
* each *grant* is attached as a copy of its mount tree (`idmap.py`): each writable path (the
  workspace, `[sandbox] write`: the one place the read-only tree is writable), and each
  `mapped` path, whose owner the hook's user then stands for (its mode bits do not stop the
  hook; nothing outside it changes). Always nosuid, and a mapped one nodev;
* where the hook's user could not reach a path it needs (an ancestor such as `/root` or
  `/tmp/pytest-of-root` is 0700), and on each of the plan's `hide` (the homes), a small tmpfs
  *covers* that ancestor and only the needed paths are bound (or, grants, attached) into
  it, so the rest of it (a home, a token file) is not even there (ENOENT, not EACCES). A
  cover that holds the scratch is the scratch's size limit.

Which ancestors are covered is worked out per request, from the modes the directories have
then (one `stat` per directory, `confine.traversable`; below a mapped grant, as the hook sees
them through it); the paths bound and attached are the fds the request opened for Landlock
(`grants.Grants`), so a cover and a grant show exactly the inodes the rules allow. Mounts are
made shortest path first, so each lands in what the ones above it show.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
from collections.abc import Iterable

from . import confine, deny, idmap
from .libc import (
    AT_FDCWD,
    AT_RECURSIVE,
    EVERYWHERE,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    ConfineError,
    libc,
    syscall,
)
from .spawnreq import Sandbox
from .start import StartError

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
#: Inodes and bytes of a tmpfs that only holds the directories leading to bound paths.
_COVER_OPTIONS = "mode=0755,size=1m,nr_inodes=4096"
#: Files and directories a scratch tmpfs may hold, per MiB of its size (min 1024).
_INODES_PER_MB = 64
_COPY_CHUNK = 1 << 20


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    enc = [None if v is None else os.fsencode(v) for v in (source, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], flags, enc[3] or None) != 0:
        err = ctypes.get_errno()
        raise StartError(f"sandbox: cannot mount {target}: {os.strerror(err)}")


def read_only_tree() -> None:
    """Makes every mount of this namespace read-only and nosuid."""
    attr = ctypes.create_string_buffer(
        struct.pack("=QQQQ", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0), 32
    )
    nr = EVERYWHERE["mount_setattr"]
    if syscall(nr, AT_FDCWD, b"/", AT_RECURSIVE, attr, 32) != 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"read-only mount tree: {os.strerror(err)}")


class _Grant:
    """A path attached as a copy of its mount tree (`idmap.clone`): writable, or mapped (its
    `owner` the hook's, through `userns`), or both."""

    def __init__(self, writable: bool, owner: tuple[int, int] | None) -> None:
        self.writable = writable
        self.owner = owner
        self.userns: int | None = None

    def covers(self, other: _Grant) -> bool:
        """Whether this grant, above `other`, already gives everything `other` would."""
        return (self.writable or not other.writable) and other.owner in (None, self.owner)


def build(
    sandbox: Sandbox,
    ids: tuple[int, int],
    opened: dict[str, int],
    *,
    mapped: bool,
    home: int | None = None,
) -> tuple[int | None, dict[str, str]]:
    """Builds the view; returns an fd on the new scratch when the plan returns it, and why
    a grant could not be mapped, by path. `ids`: the hook's uid and gid; `opened`: fds of
    the read and write paths that exist (the binds' and grants' sources); `mapped`: the
    hook has a uid of its own, so the plan's `mapped` grants get their owner mapped onto it
    (`idmap.py`); `home`: an fd of the spawner's PID namespace (`idmap.userns`), None in a
    fork that becomes the hook (which closes the namespaces once it is built, `warm.py`)."""
    try:
        host_scratch = os.open(sandbox.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StartError(f"sandbox: scratch {sandbox.scratch}: {exc.strerror}") from exc
    notes: dict[str, str] = {}
    own = (os.getuid(), os.getgid())  # (this thread's: asked once, not per path)
    try:
        grants = _grants(sandbox, ids, opened, mapped=mapped)
        covers = _covers(sandbox, ids, opened, grants, own)
        held = _denied_holding(sandbox, opened)
        for path, inside in held.items():  # covered in turn, the grants mounted in the cover
            covers.setdefault(path, []).extend(inside)
        binds = _binds(sandbox, opened, grants, covers)
        for grant in grants.values():  # (before any mount: see `_carriers`)
            _carriers(grant, ids, home)
        ops = sorted({*grants, *covers, *binds, sandbox.scratch}, key=len)
        made: set[str] = set()
        for path in ops:
            above = _nearest(path, ops)
            if above in covers:  # a place to mount it, in the cover (a cover too: a directory)
                _make_path(os.path.dirname(path), made)
                _placeholder(path, None if path in covers else opened.get(path))
            if path in covers:
                scratch_here = _nearest(sandbox.scratch, ops) == path
                options = (
                    _scratch_options(sandbox, own)
                    if scratch_here  # root's, or rootless the caller's (a mapped id)
                    else _COVER_OPTIONS
                )
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, options.replace("0700", "0755"))
                made.add(path)
            elif path in grants:
                _attach(path, grants[path], opened[path], ids=ids, home=home, notes=notes)
            elif path in binds:
                mount(f"/proc/thread-self/fd/{opened[path]}", path, None, MS_BIND, "")
            elif above in covers:  # the scratch, in a cover: the cover is its size limit
                os.chmod(path, 0o700)
                os.chown(path, *ids)
                copy_tree(host_scratch, path, ids)
            else:
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, _scratch_options(sandbox, ids))
                copy_tree(host_scratch, path, ids)
        deny.take_back(sandbox, held)  # last: over what the grants, covers and binds show
        if not sandbox.return_scratch:
            return None, notes
        return os.open(sandbox.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), notes
    except OSError as exc:
        raise StartError(f"sandbox: cannot prepare the filesystem view: {exc}") from exc
    finally:
        os.close(host_scratch)


def _grants(
    sandbox: Sandbox, ids: tuple[int, int], opened: dict[str, int], *, mapped: bool
) -> dict[str, _Grant]:
    """The paths attached as copies, by path, shortest first: each writable path, and each
    mapped one whose owner is not the hook already; none that a grant above gives already,
    unless a denied directory lies between them (the supervisor's own cache in its state
    directory, in a writable project: the cover on the denied directory would hide it)."""
    owned = set(sandbox.mapped) if mapped else set()
    found: dict[str, _Grant] = {}
    for path in sorted({*sandbox.write, *owned}, key=len):
        if path not in opened:
            continue
        owner = None
        if path in owned:
            info = os.fstat(opened[path])
            owner = None if (info.st_uid, info.st_gid) == ids else (info.st_uid, info.st_gid)
        grant = _Grant(path in sandbox.write, owner)
        if not grant.writable and owner is None:
            continue  # read-only, and its owner is the hook: nothing to attach
        above = _nearest(path, list(found))
        if above is None or not found[above].covers(grant) or _denied_between(above, path, sandbox):
            found[path] = grant
    return found


def _denied_between(above: str, path: str, sandbox: Sandbox) -> bool:
    """Whether a denied directory lies beneath `above` and holds `path` (or is it)."""
    return any(
        d.startswith(above.rstrip("/") + "/")
        and (path == d or path.startswith(d.rstrip("/") + "/"))
        for d in sandbox.deny
    )


def _covers(
    sandbox: Sandbox,
    ids: tuple[int, int],
    opened: dict[str, int],
    grants: dict[str, _Grant],
    own: tuple[int, int],
) -> dict[str, list[str]]:
    """The directories a cover goes on, each with the paths it holds: for each needed path,
    the directories the hook could not search on its way there, from the nearest grant
    above it (seen through that grant: its owner is the hook's), else from `/`. Past a
    cover, the walk goes on from the nearest needed path between it and the path: bound or
    attached in the cover, it shows the host's directories again (a read path bound there,
    and a 0700 directory in it above a write grant)."""
    uid, gid = ids
    covers: dict[str, list[str]] = {}
    seen: dict[tuple[int, int] | None, dict[str, bool | None]] = {}
    needed = [p for p in (*sandbox.read, *sandbox.write) if p in opened]
    for path in (*needed, sandbox.scratch):
        parent = os.path.dirname(os.path.normpath(path))
        if parent == path:
            continue
        start = _nearest(path, list(grants)) or ""
        while True:
            owner = grants[start].owner if start in grants else None
            blocked = confine.traversable(
                parent, uid, gid, seen.setdefault(owner, {}), start=start, owner=owner, own=own
            )
            if blocked is None:
                break
            covers.setdefault(blocked, []).append(path)
            beneath = blocked.rstrip("/") + "/"
            start = _nearest(path, [p for p in (*needed, *grants) if p.startswith(beneath)]) or ""
            if not start:
                break
    for home in sandbox.hide:  # whatever its mode: a name beside a grant is not there (ENOENT)
        if inside := [p for p in (*needed, sandbox.scratch) if p.startswith(home + "/")]:
            covers.setdefault(home, []).extend(inside)
    return covers


def _denied_holding(sandbox: Sandbox, opened: dict[str, int]) -> dict[str, list[str]]:
    """The denied directories that hold a grant (one the supervisor gives itself beneath
    its own denied state directory: a tool server's package cache, where the state
    directory lies in a granted project), each with the grants it holds. Such a directory
    is covered with the others, the grants mounted in its cover, rather than last, over
    them."""
    held: dict[str, list[str]] = {}
    for denied in sandbox.deny:
        beneath = denied.rstrip("/") + "/"
        inside = [p for p in (*sandbox.read, *sandbox.write) if p.startswith(beneath)]
        if inside := [p for p in inside if p in opened]:
            held[denied] = inside
    return held


def _binds(
    sandbox: Sandbox,
    opened: dict[str, int],
    grants: dict[str, _Grant],
    covers: dict[str, list[str]],
) -> list[str]:
    """The read paths bound into a cover (nothing nearer above them), outermost only: what
    lies below a bound path is there through it."""
    inside = [
        p
        for p in sandbox.read
        if p in opened and p not in grants and _nearest(p, [*grants, *covers]) in covers
    ]
    return [p for p in _outermost(inside) if p != sandbox.scratch]


def _nearest(path: str, among: Iterable[str]) -> str | None:
    """The deepest of `among` strictly above `path`, or None. (`confine.under` written out:
    a view asks this about 20 times, and the call per pair was a third of its Python.)"""
    above = [p for p in among if p != path and path.startswith(p.rstrip("/") + "/")]
    return max(above, key=len, default=None)


def _placeholder(path: str, source: int | None) -> None:
    """What a bind or a grant is mounted on in a cover: a directory, or a file for a file."""
    if source is None or stat.S_ISDIR(os.fstat(source).st_mode):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)
    else:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def _attach(
    path: str,
    grant: _Grant,
    source: int,
    *,
    ids: tuple[int, int],
    home: int | None,
    notes: dict[str, str],
) -> None:
    """Mounts a copy of `source`'s tree on `path`: writable or read-only, and mapped where
    the grant has an owner; a filesystem that cannot be idmapped (EINVAL) gets a plain copy,
    and the note says so."""
    userns = None
    if grant.owner is not None:
        try:
            userns = idmap.userns(grant.owner, ids, home)
            tree = idmap.clone(source, writable=grant.writable, userns_fd=userns)
        except ConfineError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
                raise
            notes[path] = f"its filesystem cannot give the hook its owner's access ({exc})"
            userns = None
    if userns is None:
        tree = idmap.clone(source, writable=grant.writable, userns_fd=None)
    try:
        idmap.attach(tree, path)
    finally:
        os.close(tree)


def _carriers(grant: _Grant, ids: tuple[int, int], home: int | None) -> None:
    """Makes (and keeps) the user namespace a mapped grant is attached through, while this
    thread's root is still its mount namespace's: once a writable `/` is attached over it,
    the kernel refuses a new user namespace (EPERM, as in a chroot). One that cannot be made
    is left for `_attach` to say why."""
    if grant.owner is not None:
        with contextlib.suppress(ConfineError):
            idmap.userns(grant.owner, ids, home)


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
    """Copies the regular files and directories under the directory fd `src` to `dst_path`;
    a symlink is copied as a symlink (never followed) and any other entry (a FIFO, a socket,
    a device) as an empty FIFO of its name, so that what lists the copy names each one;
    `ids`: chown the copies."""
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
        else:  # its kind kept, its content never followed nor read (a listing names it)
            with contextlib.suppress(FileExistsError):
                if stat.S_ISLNK(info.st_mode):
                    os.symlink(os.readlink(entry.name, dir_fd=src), entry.name, dir_fd=dst)
                else:
                    os.mkfifo(entry.name, 0o600, dir_fd=dst)
                if ids is not None:
                    os.chown(entry.name, *ids, dir_fd=dst, follow_symlinks=False)


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
