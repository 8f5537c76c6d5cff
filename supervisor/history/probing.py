"""Whether the run history can be kept where it is configured, for `mcpx-hooks doctor`."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .store import History, HistoryFault, faults


def probe(path: Path) -> str | None:
    """Why the history at `path` cannot be kept, or None when it can: opened to write, a
    write transaction taken and given back, and room on its disk (for `doctor`). A history
    not made yet is not made here: its nearest directory must let one be made."""
    if not path.exists():
        parent = path.parent
        while not parent.exists():
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"the run history {path} cannot be made: {parent} is not writable"
        return None
    try:
        history = History.open(path)
    except HistoryFault as exc:
        return str(exc)
    try:
        with faults(f"writing to the run history {path}"), history._lock:
            history._db.execute("BEGIN IMMEDIATE")
            history._db.execute("ROLLBACK")
            (check,) = history._db.execute("PRAGMA quick_check(1)").fetchone()
            if check != "ok":
                raise sqlite3.DatabaseError(f"the database is damaged: {check}")
        disk = os.statvfs(path.parent)
        if disk.f_bavail * disk.f_frsize < 1 << 20:
            return f"the disk holding the run history {path} is full (under 1 MiB free)"
    except HistoryFault as exc:
        return str(exc)
    finally:
        history.close()
    return None
