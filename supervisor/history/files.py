"""The artifacts' bytes beside the database: one file `artifacts/<sha256>` for the same
bytes of every run (`store.py` says which runs name which)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Set
from pathlib import Path


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
