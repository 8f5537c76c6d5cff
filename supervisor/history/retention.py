"""What the stored runs take on disk, and which of them retention drops (`store.py`).

A run's lines are stored compressed in `chunks`, whose sizes each run's row counts
(`runs.bytes`, with its artifacts); its search index (`search.py`) takes room too, often
more than the compressed lines (every distinct word or number a line holds is a term of its
own), and FTS5 cannot say how much of it is whose. So the database's own count of the pages
it uses, beyond what an empty history holds and the chunks' bytes, is shared among the runs
by the lines each has indexed: the index is most of it, and grows with the lines indexed.

Dropping a run leaves its index entries to be cancelled when FTS5 next merges the segments
that hold them (until then the deletion is more entries, not fewer); `reclaim` does a
bounded part of that merge after a retention that dropped runs, as much as the writer can do
without holding the database much longer than a write does.
"""

from __future__ import annotations

import sqlite3
from typing import Final

#: FTS5's `merge` after runs were dropped: at most this many pages written (negative: every
#: segment may take part, not only full levels; the rest is done by the next retention).
RECLAIM_PAGES: Final = 2000


def on_disk(db: sqlite3.Connection) -> int:
    """The bytes the database uses beyond an empty history's pages (its free pages left out:
    SQLite reuses them)."""
    size = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    (trees,) = db.execute("SELECT count(*) FROM sqlite_master WHERE rootpage > 0").fetchone()
    return max(0, int(pages - free - trees - 1)) * int(size)


def to_drop(db: sqlite3.Connection, *, cutoff: float, max_bytes: int) -> list[tuple[int, str]]:
    """The runs (key, id) retention drops, oldest first: every run started before `cutoff`,
    then the oldest finished runs while the runs take more than `max_bytes` on disk, each
    weighed by its chunks and artifacts and its share of the rest of the database."""
    rows = db.execute(
        "SELECT key, id, started, finished, bytes, indexed FROM runs ORDER BY started"
    ).fetchall()
    held = sum(row[4] for row in rows)
    (artifacts,) = db.execute("SELECT coalesce(sum(size), 0) FROM artifacts").fetchone()
    rest = max(0, on_disk(db) - (held - artifacts))
    lines = sum(row[5] for row in rows)
    total = held + rest
    gone: list[tuple[int, str]] = []
    for key, run_id, started, finished, size, indexed in rows:
        if started < cutoff or (finished and total > max_bytes):
            gone.append((key, run_id))
            share = rest * indexed // lines if lines else rest * size // max(held, 1)
            total -= size + share
        elif total <= max_bytes:
            break
    return gone


def reclaim(db: sqlite3.Connection) -> None:
    """A bounded part of the merge that frees dropped runs' index entries."""
    db.execute("INSERT INTO search(search, rank) VALUES('merge', ?)", (-RECLAIM_PAGES,))
