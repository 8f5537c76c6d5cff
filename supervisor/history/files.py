"""The artifacts' bytes beside the database: one file `artifacts/<sha256>` for the same
bytes of every run (`store.py` says which runs name which); and the database's own path
checked to be a file."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Set
from pathlib import Path
from typing import Final

#: What a path that is not a file is, as `a_file_or_none` says it.
_NOT_FILES: Final = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def a_file_or_none(path: Path) -> None:
    """Raises `OSError` saying what `path` is when something other than a file is there (a
    directory, `/dev/null`, a FIFO): SQLite said "disk I/O error" (with "is the disk full?"
    for `/dev/null`) and a reader "no run has been recorded there". Nothing there is fine."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # (the latter: its
        mode = os.stat(path).st_mode  # directory's own fault, which making it says)
        if not stat.S_ISREG(mode):
            what = _NOT_FILES.get(stat.S_IFMT(mode), "not a regular file")
            raise OSError(errno.EINVAL, f"it is {what}, not a file", str(path))


def keep(directory: Path, sha: str, source: str) -> bool:
    """Copies an artifact's bytes to `directory/<sha>` (once for the same bytes); False when
    the source is gone (its run's artifacts were dropped from memory first)."""
    target = directory / sha
    if target.exists():
        return True
    directory.mkdir(mode=0o700, exist_ok=True)
    partial = target.with_name(f".{sha}.{os.getpid()}")
    try:
        shutil.copyfile(source, partial)
    except FileNotFoundError:
        return False
    os.chmod(partial, 0o600)
    os.replace(partial, target)
    return True


def remove_unnamed(directory: Path, named: Set[str]) -> None:
    """Removes the files of `directory` that are not `named` (nor one being written)."""
    for entry in os.scandir(directory):
        if entry.name not in named and not entry.name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
