"""Each stored line's text is made once when it is indexed, and once when its rows are
deleted: the statement that indexes a batch of lines reads each line's text in SQLite, and
a text computed again for each place the statement names it (its filter, its value) made
indexing three times the work. That is what a history written by an earlier version, whose
index is made again, waits for at its first search (5,000 runs: 9 s, where 3 s does)."""

from __future__ import annotations

import sqlite3

import orjson

from mcpx_hooks.supervisor.history.schema import _SCHEMA
from mcpx_hooks.supervisor.history.search import (
    PLAIN_SQL,
    SCHEMA,
    functions,
    index,
    plain,
    spaced,
)


def _counting(db: sqlite3.Connection) -> list[str]:
    """The texts the index's statements pass through the connection's `PLAIN_SQL` (every
    text not plain ASCII goes there), one for each time SQLite computed one."""
    functions(db)
    seen: list[str] = []

    def counted(text: object) -> object:
        seen.append(str(text))
        return spaced(plain(text)) if isinstance(text, str) else text

    db.create_function(PLAIN_SQL, 1, counted, deterministic=True)
    return seen


def test_each_line_s_text_is_made_once_when_indexed() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(_SCHEMA + SCHEMA)
    seen = _counting(db)
    lines = [
        orjson.dumps({"runId": "r", "seq": seq, "at": "t", "type": "stdout", "text": f"café {seq}"})
        for seq in range(1, 21)
    ]
    index(db, 1, 1, lines)
    assert sorted(seen) == sorted(f"café {seq}" for seq in range(1, 21))
    found = db.execute("SELECT count(*) FROM search WHERE search MATCH 'cafe'").fetchone()
    assert found == (20,)
