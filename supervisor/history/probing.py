"""Whether the run history can be kept where it is configured, for `mcpx-hooks doctor`."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Final

from ..config.statefiles import unmade
from ..core.amounts import shown_size
from ..core.places import shown_file
from .faults import HistoryFault, faults
from .store import History


def probe(path: Path) -> str | None:
    """Why the history at `path` cannot be kept, or None when it can: opened to write, a
    write transaction taken and given back, its pages checked (for `doctor`; `room` says
    whether its disk has the room it needs). A history not made yet is not made here: its
    nearest directory must let one be made."""
    try:
        there = path.exists()
    except OSError as exc:  # (a directory that may not be searched, as one `sudo` made)
        return f"the run history {shown_file(path)} cannot be read: {exc.strerror}"
    if not there:  # (why not, as a run's warning says it: a home that is not there, say)
        parent = path.parent
        while not parent.exists():
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            why = unmade(path) or f"{shown_file(parent)} is not writable"
            return f"the run history {shown_file(path)} cannot be made: {why}"
        return None
    try:
        history = History.open(path)
    except HistoryFault as exc:
        return str(exc)
    try:
        with faults(f"writing to the run history {shown_file(path)}", path), history._lock:
            history._db.execute("BEGIN IMMEDIATE")
            history._db.execute("ROLLBACK")
            (check,) = history._db.execute("PRAGMA quick_check(1)").fetchone()
            if check != "ok":
                raise sqlite3.DatabaseError(f"the database is damaged: {check}")
    except HistoryFault as exc:
        return str(exc)
    finally:
        history.close()
    return None


def room(path: Path) -> str | None:
    """Why the disk of the history at `path` (kept: `probe` passed) has too little room
    for it, or None: it needs room for its write-ahead log, which grows to SQLite's
    checkpoint (`wal_autocheckpoint` pages) before its pages are copied into the database,
    less what the log holds already; a process that keeps the history open (`serve`) fills
    a smaller disk within a few runs. A history not made yet needs as much."""
    pages, size = _DEFAULT_CHECKPOINT
    # (the checkpoint is each connection's, the writer's as SQLite sets it by default; the
    # page size is the file's. Where they cannot be read, SQLite's defaults are in force.)
    with contextlib.suppress(sqlite3.Error):
        if path.exists():
            at = f"{path.resolve().as_uri()}?mode=ro"
            with contextlib.closing(sqlite3.connect(at, uri=True)) as db:
                (pages,) = db.execute("PRAGMA wal_autocheckpoint").fetchone()
                (size,) = db.execute("PRAGMA page_size").fetchone()
    where = path if path.exists() else path.parent
    while not where.exists():
        where = where.parent
    log = Path(f"{path}-wal")
    need = max(0, pages * size - (log.stat().st_size if log.exists() else 0))
    disk = os.statvfs(where)
    free, total = disk.f_bavail * disk.f_frsize, disk.f_blocks * disk.f_frsize
    if free >= need:
        return None
    return (
        f"its disk has {shown_size(free)} free (of {shown_size(total)}), and the history needs"
        f" about {shown_size(need)} there: its write-ahead log grows to {pages} pages of"
        f" {size:,} bytes before they are copied into the database"
    )


#: SQLite's defaults: the pages a write-ahead log grows to before a checkpoint, and their size.
_DEFAULT_CHECKPOINT: Final = (1000, 4096)
