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


#: How long a write waits for another process's lock before it is a fault, in ms.
BUSY_MS: Final = 2000
#: SQLite's names of a lock another connection held past the busy timeout.
_BUSY: Final = frozenset(("SQLITE_BUSY", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_TIMEOUT"))


class HistoryFault(HooksError):
    """The history cannot be read or written: the message says why (locked, read-only, full,
    not a database…)."""


class HistoryBusy(HistoryFault):
    """Another process held the history's lock past the busy timeout: it may be free again
    in a moment (a large write, retention dropping large runs, a search indexing)."""


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
        if name in _BUSY:
            held = f"another process held its lock past {BUSY_MS / 1000:g} s"
            raise HistoryBusy(f"{doing}: {why} ({held})") from exc
        raise HistoryFault(f"{doing}: {why}") from exc
