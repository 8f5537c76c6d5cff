"""What the history says when SQLite or the file system fails it: one `HistoryFault`, saying
what was being done and why."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ..config.statefiles import denied_said
from ..core.errors import HooksError
from ..core.places import shown_file

#: SQLite's names of a failed write (a disk full, a file size limit reached), said as such.
_WRITE_ERRORS: Final = frozenset(
    f"SQLITE_IOERR_{n}" for n in ("WRITE", "SHMSIZE", "TRUNCATE", "FSYNC", "SHMMAP")
)


#: How long a write waits for another process's lock before it is a fault, in ms.
BUSY_MS: Final = 2000
#: SQLite's names of a lock another connection held past the busy timeout.
_BUSY: Final = frozenset(("SQLITE_BUSY", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_TIMEOUT"))


def write_failed(exc: BaseException) -> bool:
    """Whether SQLite says a write failed (a disk full, a file size limit reached)."""
    return getattr(exc, "sqlite_errorname", "") in _WRITE_ERRORS


class HistoryFault(HooksError):
    """The history cannot be read or written: the message says why (locked, read-only, full,
    not a database…)."""


class HistoryBusy(HistoryFault):
    """Another process held the history's lock past the busy timeout: it may be free again
    in a moment (a large write, retention dropping large runs, a search indexing)."""


@contextlib.contextmanager
def faults(doing: str, path: Path | None = None) -> Iterator[None]:
    """SQLite's and the file system's errors as a `HistoryFault` saying what was being done
    (to the history at `path`, when given: what is read-only is then said)."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_READONLY_DIRECTORY" and path is not None:
            why = _directory_read_only(path)
        elif isinstance(exc, OSError) and path is not None:
            why = denied_said(exc, path.parent)  # (whose the state directory is, if not yours)
        if name in _WRITE_ERRORS:
            why += f" ({name}: a write failed: is the disk full?)"
        if name in _BUSY:
            held = f"another process held its lock past {BUSY_MS / 1000:g} s"
            raise HistoryBusy(f"{doing}: {why} ({held})") from exc
        raise HistoryFault(f"{doing}: {why}") from exc


def _directory_read_only(path: Path) -> str:
    """Why SQLite found the history at `path` read-only although the file may be written:
    its directory may not be, and a history without its write-ahead log (`-wal`, removed when
    the last writer closed it) needs to make one there. SQLite said only "attempt to write a
    readonly database"."""
    directory = path.parent
    try:
        mode = f" (mode {stat.S_IMODE(os.stat(directory).st_mode):04o})"
    except OSError:
        mode = ""
    return (
        f"its directory {shown_file(directory)} may not be written{mode}, and the history"
        f" makes its write-ahead log ({path.name}-wal) there: chmod u+w {shown_file(directory)}"
    )
