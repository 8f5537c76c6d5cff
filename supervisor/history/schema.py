"""The run history's schema: its tables, its version, and a file checked and brought up to
it when opened (`store.py`)."""

from __future__ import annotations

import sqlite3
from typing import Final

from . import search

#: The schema's version (`PRAGMA user_version`); another one is a fault, never rewritten.
VERSION: Final = 5
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS runs(
    key INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, started REAL NOT NULL,
    finished INTEGER NOT NULL DEFAULT 0, summary BLOB NOT NULL,
    bytes INTEGER NOT NULL DEFAULT 0, frames INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started);
CREATE TABLE IF NOT EXISTS chunks(
    run INTEGER NOT NULL, first INTEGER NOT NULL, count INTEGER NOT NULL,
    packed INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(run, first)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS artifacts(
    run INTEGER NOT NULL, id TEXT NOT NULL, sha256 TEXT NOT NULL, name TEXT NOT NULL,
    mime TEXT NOT NULL, size INTEGER NOT NULL, PRIMARY KEY(run, id)) WITHOUT ROWID;
"""
#: Made in any database opened to write (added to version 2 without changing it: a table
#: that older versions never read).
_MARKS: Final = "CREATE TABLE IF NOT EXISTS marks(name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
#: The versions before this one: their files are brought up to it (version 1: no `search`;
#: version 2: its index made of the texts with their terminal escapes, made again without;
#: version 3: a list's or an object's text indexed as its JSON, made again of its strings;
#: version 4: a run of CJK characters indexed as one word and emoji not at all, made again
#: with each of them a word, `words.py`).
_OLDER: Final = (1, 2, 3, 4)
#: Version 2, 3 or 4 to 5: the index emptied, every run to be indexed again (`search.catch_up`, as
#: for a run whose index is behind: a little at a time while runs run, all before a search).
_REINDEX: Final = "INSERT INTO search(search) VALUES('delete-all'); UPDATE runs SET indexed = 0;"


def prepare(db: sqlite3.Connection, writes: bool) -> None:
    """Checks the file is a history of ours, and (to write) makes the schema and WAL."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version > VERSION and "runs" in tables:  # (one going back a version has a way out)
        raise sqlite3.DatabaseError(
            f"the file is the run history of a newer mcpx-hooks (schema version {version};"
            f" this one reads up to {VERSION}); it is left as it is: run the newer"
            " mcpx-hooks, or give this one another file ([history] path)"
        )
    if version not in (0, VERSION, *_OLDER) or (version == 0 and tables):
        raise sqlite3.DatabaseError(
            f"the file holds another database (schema version {version}, tables"
            f" {', '.join(sorted(tables)) or 'none'}); it is left as it is"
        )
    if not writes:
        return
    if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
        raise sqlite3.OperationalError("the database cannot be put in WAL mode")
    db.execute("PRAGMA synchronous=NORMAL")
    if version == 0:
        with db:
            db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} {search.SCHEMA} PRAGMA user_version = {VERSION};"
            )
    elif version in _OLDER:
        made = search.SCHEMA if version == 1 else _REINDEX
        with db:
            db.executescript(f"BEGIN IMMEDIATE; {made} PRAGMA user_version = {VERSION};")
    if "marks" not in tables:  # (no write lock taken when it is there)
        with db:
            db.execute(_MARKS)
