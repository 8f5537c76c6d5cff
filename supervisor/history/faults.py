"""What the history says when SQLite or the file system fails it: one `HistoryFault`, saying
what was being done and why."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Final

from ..core.errors import HooksError

#: SQLite's names of a failed write (a disk full, a file size limit reached), said as such.
_WRITE_ERRORS: Final = frozenset(
    f"SQLITE_IOERR_{n}" for n in ("WRITE", "SHMSIZE", "TRUNCATE", "FSYNC", "SHMMAP")
)


class HistoryFault(HooksError):
    """The history cannot be read or written: the message says why (locked, read-only, full,
    not a database…)."""


@contextlib.contextmanager
def faults(doing: str) -> Iterator[None]:
    """SQLite's and the file system's errors as a `HistoryFault` saying what was being done."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        name = getattr(exc, "sqlite_errorname", "")
        if name in _WRITE_ERRORS:
            why += f" ({name}: a write failed: is the disk full?)"
        raise HistoryFault(f"{doing}: {why}") from exc
