"""What the search index takes on disk, counted to the runs whose lines it indexed.

FTS5 cannot say how much of its index is whose, but SQLite can say how many pages the
database uses. A write that indexes lines (`store.py`) grows that by what it stored of the
lines (their chunks, which it counts itself) and by what the index took for them: the growth
less the chunks is shared among the runs the write indexed, by the lines each got, and added
to the bytes each run holds (`runs.bytes`), which retention weighs; so `[history]
retainBytes` bounds the index too. The growth is known once the write is committed (FTS5
keeps what it indexes in memory until then), so it is added in the next write. Room the
index gives back later (a dropped run's entries go when FTS5 next merges their segments)
is nobody's.
"""

from __future__ import annotations

import sqlite3


def used(db: sqlite3.Connection) -> int:
    """The bytes of the database's pages in use (free pages are reused, not counted)."""
    size = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return int(pages - free) * int(size)


class Written:
    """What one write transaction stored of lines (the chunks' bytes) and indexed of them
    (lines, by run key)."""

    def __init__(self) -> None:
        self.stored = 0
        self.indexed: dict[int, int] = {}


class IndexShares:
    """The index's growth owed to runs, until the next write adds it to their bytes."""

    def __init__(self) -> None:
        self._owed: dict[int, int] = {}

    def add(self, grown: int, lines: dict[int, int]) -> None:
        """`grown` bytes of index shared among runs (key: lines indexed)."""
        total = sum(lines.values())
        if grown <= 0 or not total:
            return
        for key, count in lines.items():
            self._owed[key] = self._owed.get(key, 0) + grown * count // total

    def settle(self, db: sqlite3.Connection) -> None:
        """Adds what is owed to the runs' bytes (in the caller's transaction; a run dropped
        meanwhile is no row to add to)."""
        owed, self._owed = self._owed, {}
        db.executemany(
            "UPDATE runs SET bytes = bytes + ? WHERE key = ?", [(n, k) for k, n in owed.items()]
        )
