"""What the view takes back from the grants: the last step of `view.build`, once every
grant, cover and bind is in place (so each mount here lands on what the hook will see).

Standard library only. Landlock only ever allows; so a path beneath a grant that no sandbox
may reach (the supervisor's own files, the credential stores: the supervisor's
`process/denied.py` names them) is covered here:
* a directory by an empty tmpfs, read-only, nosuid, nodev, noexec: listed, it is empty;
  nothing can be made in it;
* a file by a bind of `/dev/null` on a nodev mount: a device node that no one may open
  (EACCES), for reading or writing;
and each of the plan's `readOnly` paths (`.git/hooks`, `.git/config`, the project's config
files in a writable grant) is bound over itself read-only, the `.git` holding them bound
over itself (writable) first. A mount point cannot be removed or renamed (EBUSY), and a link
to it crosses a mount (EXDEV): the path stays as it is. A path the view does not show
(beneath a cover, gone since the plan) is left alone.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from collections.abc import Collection

from .libc import (
    AT_FDCWD,
    AT_RECURSIVE,
    EVERYWHERE,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    libc,
    syscall,
)
from .spawnreq import Sandbox
from .start import StartError

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
#: An empty directory: no room to make anything, and it is read-only besides.
_EMPTY_OPTIONS = "mode=0555,size=4k,nr_inodes=2"


def take_back(sandbox: Sandbox, covered: Collection[str] = ()) -> None:
    """Covers the plan's `deny` paths (but those `covered` already, with the grants they
    hold mounted in their covers) and binds its `readOnly` paths read-only, as this mount
    namespace shows them; raises `StartError`."""
    for path in sandbox.deny:
        if path in covered:
            continue
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  _EMPTY_OPTIONS)  # fmt: skip
        else:
            mount("/dev/null", path, None, MS_BIND, "")
            _set(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    for path in _pinned(sandbox.read_only):  # (writable: a mount point, not to be moved)
        mount(path, path, None, MS_BIND, "")
    for path in sandbox.read_only:
        if not os.path.exists(path):  # (gone, or a link to nothing since the plan)
            continue
        mount(path, path, None, MS_BIND, "")
        _set(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)


def _pinned(read_only: list[str]) -> list[str]:
    """The repositories' `.git` directories that hold a read-only path: each bound over
    itself first, so that it cannot be renamed away (EBUSY) and a new `.git` made in its
    place, with hooks and a config of the script's own for the next `git` run there."""
    found = {
        os.path.dirname(p) for p in read_only if os.path.basename(os.path.dirname(p)) == ".git"
    }
    return sorted(p for p in found if os.path.isdir(p) and not os.path.islink(p))


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    enc = [None if v is None else os.fsencode(v) for v in (source, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], flags, enc[3] or None) != 0:
        err = ctypes.get_errno()
        raise StartError(f"sandbox: cannot cover {target}: {os.strerror(err)}")


def _set(path: str, attrs: int) -> None:
    """Sets `attrs` on the mounts at `path` (and below), leaving the others as they are
    (a remount would have to repeat, in a user namespace, every flag that is locked)."""
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", attrs, 0, 0, 0), 32)
    if syscall(EVERYWHERE["mount_setattr"], AT_FDCWD, os.fsencode(path), AT_RECURSIVE, attr, 32):
        err = ctypes.get_errno()
        raise StartError(f"sandbox: cannot make {path} read-only: {os.strerror(err)}")
