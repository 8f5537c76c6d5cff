"""Search across the stored runs: an SQLite FTS5 index of what a person looks for in a run.

Which fields of a frame are searched is a table (`SEARCHED`, by frame type; each name is a
field of the type's class in `core/hookframes.py`'s `FRAME_CLASSES`): the script's output and
logs, hooks' names, advice and failures, the run's argv, errors and warnings. Each frame with
any of them is one row of `search`, whose rowid is the run's key and the frame's seq
(`key << 32 | seq`), so a run's rows are one range and the newest come first.

The index is contentless (`content=''`): it holds the tokens, not the text, which the chunks
hold already. A match's snippet is cut from its frame line, read back from its chunk; a run
dropped from the history has its rows deleted with the same texts, made again from its lines.
SQLite makes the texts (`text_sql`: no Python per line, but for a line that holds a
terminal's escape sequence, which `plain` leaves out). The writer (`store.py`) indexes
in the transactions that store the lines, from where each run's index stops (`runs.indexed`),
at most a budget of lines a write while runs run (`catch_up`; `run/recording.py`), so that
a run that prints fast is stored at once and indexed a little behind.

What a person types is words and "quoted phrases", never FTS5's syntax: `query` makes each
one a quoted FTS5 string (so `needle-42`, `OR`, `NEAR`, `*`, `:` and a stray quote are text),
all of them required; it never fails, and a query with nothing searchable matches nothing.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import unicodedata
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from ..core.frames import FrameType
from ..core.shellwords import shell_line
from .pieces import Frames, line_of
from .snippets import marks, snippet
from .words import alone, spaced

#: The fields searched in each frame type (attrs names of the type's class).
SEARCHED: Final[Mapping[FrameType, tuple[str, ...]]] = {
    FrameType.START: ("argv",),
    FrameType.HOOK: (
        "name",
        "advice",
        "reason",
        "failure_note",
        "answer_note",
        "stderr_tail",
        "egress",
    ),
    FrameType.LOG: ("message",),
    FrameType.EMIT: ("value",),
    FrameType.STDOUT: ("text",),
    FrameType.STDERR: ("text",),
    FrameType.ARTIFACT: ("name",),
    FrameType.RESULT: ("advice",),
    FrameType.ERROR: ("message", "advice", "refused_by"),
    FrameType.END: (),
    FrameType.WARNING: ("message",),
    FrameType.ASK: ("hook", "question"),
    FrameType.CALL: ("server", "tool", "error", "refused_by"),
    FrameType.EGRESS: ("host", "hook", "server"),
}
#: The searched fields whose value may be a list or an object (indexed as its strings,
#: `_field_sql`); every other one is a string, read as it is (one `json_extract`: a run's
#: output lines, most of what is indexed, take nothing more).
STRUCTURED: Final = frozenset({"argv", "advice", "egress", "value"})
#: The index, and each run's lines indexed so far (made with the store's schema, and for a
#: history made before it, when it is opened): `indexed < frames` is a run the index is behind.
SCHEMA: Final = """
CREATE VIRTUAL TABLE search USING fts5(text, content='', columnsize=0,
    tokenize='unicode61 remove_diacritics 2');
ALTER TABLE runs ADD COLUMN indexed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_behind ON runs(key) WHERE indexed < frames;
"""
#: Matches a search gives by default, and at most.
MATCHES: Final = 50
MAX_MATCHES: Final = 500
#: The characters of a query that are read (the rest is ignored), and the terms.
MAX_QUERY: Final = 1000
MAX_TERMS: Final = 32
_SEQ_BITS: Final = 32
#: A terminal's escape sequences: CSI (colours, cursor moves; with ESC [ or the one byte
#: U+009B), OSC (a title, a link, the clipboard; ended by BEL or ESC \\, or by the text's
#: end), and the two-character ones. A line as a terminal shows it has none of them.
_ESCAPES: Final = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]"
)
#: The SQL function that is `plain` (`functions` gives it to a connection).
PLAIN_SQL: Final = "mcpx_plain"


def plain(text: str) -> str:
    """`text` as a terminal shows it: its escape sequences left out, so that the words a
    script printed in colour (`\\x1b[31mFAILED\\x1b[0m`) are the words that are indexed
    and found, and shown in a snippet."""
    if "\x1b" not in text and "\x9b" not in text:
        return text
    return _ESCAPES.sub("", text)


def functions(db: sqlite3.Connection) -> None:
    """Gives a connection the SQL function `text_sql`'s texts go through (`plain`): each
    connection that indexes, or deletes what was indexed, makes the same text of a line."""
    db.create_function(PLAIN_SQL, 1, _plain_sql, deterministic=True)


def _plain_sql(text: str | bytes | int | float | None) -> str | bytes | int | float | None:
    return spaced(plain(text)) if isinstance(text, str) else text


@functools.cache
def text_sql() -> str:
    """SQL of the text indexed of the frame line `v.value` (a JSON text): its searched fields'
    values, one a line (a list or an object as its JSON: the same words), NULL when it has
    none. SQLite reads the lines, never Python: the writer thread that indexes them holds
    no lock a run needs, and each field costs one `json_extract`. The fields are by wire
    name, the converter's camelCase (tests/test_search.py checks each is its class's field
    and wire name); made without the hook frames' classes, which a run without hooks never
    builds."""
    from ..core.convert import camel

    cases = []
    for frame_type, names in SEARCHED.items():
        parts = []
        for name in names:
            assert camel(name).isidentifier()
            path = f"'$.{camel(name)}'"
            parts.append(_field_sql(path) if name in STRUCTURED else _string_sql(path))
        if len(parts) > 1:
            joined = " || ".join(f"coalesce({part} || char(10), '')" for part in parts)
            parts = [f"rtrim({joined}, char(10))"]
        if parts:
            cases.append(f"WHEN '{frame_type.value}' THEN {parts[0]}")
    text = f"CASE json_extract(v.value, '$.type') {' '.join(cases)} END"
    # Python only for a text that holds an escape (char(27), or U+009B) or a character not
    # ASCII (`words.spaced`: CJK, emoji): a character neither a tab, a line break nor printable
    # ASCII. Most lines have none.
    return (
        f"(SELECT CASE WHEN t GLOB ('*[^' || char(9, 10, 13) || ' -~]*') THEN {PLAIN_SQL}(t)"
        f" ELSE t END FROM (SELECT {text} AS t))"
    )


def _string_sql(path: str) -> str:
    """SQL of a string field's text."""
    return f"json_extract(v.value, {path})"


def _field_sql(path: str) -> str:
    """SQL of one field's text: a string as it is; a list or an object as its strings, keys
    and values, one after the other (never its JSON text, where a line break in an argument
    is `\\n` and glued the next word to an `n`: `x=1\\nzebra` indexed `nzebra`)."""
    leaves = (
        "(SELECT group_concat(iif(typeof(key) = 'text', key || ' ', '') || coalesce(atom, ''),"
        f" char(10)) FROM json_tree(v.value, {path}) WHERE fullkey != {path})"
    )
    return (
        f"CASE json_type(v.value, {path}) WHEN 'array' THEN {leaves} WHEN 'object' THEN"
        f" {leaves} ELSE json_extract(v.value, {path}) END"
    )


def frame_text(db: sqlite3.Connection, line: str | bytes) -> str:
    """The text indexed of one frame line ("" when it has none, or is not a frame); `db`
    has `functions`."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    sql = f"SELECT {text_sql()} FROM (SELECT ? AS value) v WHERE json_valid(v.value)"
    row = db.execute(sql, (text,)).fetchone()
    return "" if row is None or row[0] is None else str(row[0])


def shown_text(frame: Any) -> str:
    """The searched fields of a parsed frame as a person reads them: a run's argv as a
    command line (`runs list`'s, which a shell takes back), another list's strings joined
    by spaces, another value as JSON, one field a line."""
    if not isinstance(frame, dict):
        return ""
    fields = SEARCHED.get(FrameType(frame["type"])) if frame.get("type") in _TYPES else ()
    from ..core.convert import camel

    parts: list[str] = []
    for name in fields or ():
        value = frame.get(camel(name))
        if value is None or value in ("", []):
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            parts.append(shell_line(value) if name == "argv" else " ".join(value))
        else:
            parts.append(value if isinstance(value, str) else orjson.dumps(value).decode())
    return "\n".join(parts)


_TYPES: Final = frozenset(t.value for t in FrameType)


#: The two ways a row is written: added, and deleted (FTS5's delete of a contentless row is
#: an insert of `'delete'`, the rowid and the text it was given).
_ADD: Final = ("search(rowid, text)", "")
_DELETE: Final = ("search(search, rowid, text)", "'delete', ")


def _each(
    db: sqlite3.Connection, how: tuple[str, str], key: int, first: int, lines: Sequence[bytes]
) -> None:
    """Adds or deletes the rows of the lines' texts, in one statement."""
    if not lines:
        return
    columns, head = how
    batch = (b"[" + b",".join(lines) + b"]").decode("utf-8", "replace")
    base = (key << _SEQ_BITS) + first
    try:  # (MATERIALIZED: each text made once; a subquery would be made again wherever named)
        db.execute(
            f"WITH texts(key, text) AS MATERIALIZED (SELECT v.key, {text_sql()} FROM"
            f" json_each(:batch) v) INSERT INTO {columns} SELECT {head}:base + key, text"
            " FROM texts WHERE text IS NOT NULL AND text != ''",
            {"base": base, "batch": batch},
        )
    except sqlite3.OperationalError:  # a line that is not JSON: the others one by one
        for at, line in enumerate(lines):
            text = frame_text(db, line)
            if text:
                db.execute(f"INSERT INTO {columns} VALUES ({head}?, ?)", (base + at, text))


def index(db: sqlite3.Connection, key: int, first: int, lines: Sequence[bytes]) -> None:
    """Adds the rows of a run's lines from seq `first` (in the caller's transaction)."""
    if lines:
        _each(db, _ADD, key, first, lines)


def catch_up(
    db: sqlite3.Connection, budget: int | None = None, counted: dict[int, int] | None = None
) -> bool:
    """Indexes the stored lines the index is behind on, oldest run first, at most `budget`
    of them (None: all), adding to `counted` the lines indexed of each run (by key); whether
    it is still behind."""
    behind = db.execute("SELECT key, indexed, frames FROM runs WHERE indexed < frames ORDER BY key")
    for key, indexed, frames in behind.fetchall():
        if budget is not None and budget <= 0:
            return True
        end = frames if budget is None else min(frames, indexed + budget)
        for first, lines in _chunks(db, key, indexed, end):
            low, high = max(indexed, first), min(end, first + len(lines))
            index(db, key, low, lines[low - first : high - first])
        db.execute("UPDATE runs SET indexed = ? WHERE key = ?", (end, key))
        if counted is not None:
            counted[key] = counted.get(key, 0) + end - indexed
        budget = None if budget is None else budget - (end - indexed)
    return budget is not None and lags(db)


def lags(db: sqlite3.Connection) -> bool:
    """Whether some stored lines are not indexed yet."""
    return db.execute("SELECT 1 FROM runs WHERE indexed < frames LIMIT 1").fetchone() is not None


def _chunks(
    db: sqlite3.Connection, key: int, start: int, end: int
) -> list[tuple[int, list[bytes]]]:
    """A run's chunks that hold seq `start` to `end` (excluded), as lines."""
    rows = db.execute(
        "SELECT first, packed, data FROM chunks WHERE run = ? AND first < ? AND first + count > ?"
        " ORDER BY first",
        (key, end, start),
    )
    return [
        (first, (zlib.decompress(data) if packed else bytes(data)).split(b"\n"))
        for first, packed, data in rows.fetchall()
    ]


def unindex(db: sqlite3.Connection, key: int) -> None:
    """Deletes a run's rows (those indexed), their texts made again from its stored lines."""
    (indexed,) = db.execute("SELECT indexed FROM runs WHERE key = ?", (key,)).fetchone()
    for first, lines in _chunks(db, key, 0, indexed):
        _each(db, _DELETE, key, first, lines[: max(0, indexed - first)])


def terms(text: str) -> list[str]:
    """The words and "quoted phrases" of a query, as typed (a quote left open runs to the end;
    a term with no letter or digit, which the index never holds, is left out)."""
    text = text[:MAX_QUERY].encode("utf-8", "replace").decode("utf-8")
    found: list[str] = []
    for n, part in enumerate(text.split('"')):
        pieces = [part] if n % 2 else part.split()
        found += [p.strip() for p in pieces if any(_searchable(c) for c in p)]
    return found[:MAX_TERMS]


def _searchable(char: str) -> bool:
    """Whether the index keeps `char` in a word (the tokenizer, unicode61, or `words`)."""
    category = unicodedata.category(char)
    return category[0] in "LN" or category == "Co" or alone(char)


def query(text: str) -> str | None:
    """The FTS5 query of what a person typed: each term a quoted string (`spaced` as the
    index's texts are: a CJK term is the phrase of its characters), all required; None when
    nothing in it is searchable."""
    quoted = ['"' + spaced(t).replace('"', '""').replace("\x00", " ") + '"' for t in terms(text)]
    return " AND ".join(quoted) or None


def find(
    db: sqlite3.Connection, text: str, *, run_id: str | None = None, limit: int = MATCHES
) -> list[dict[str, Any]]:
    """The matches of `text` (`{runId, seq, type, snippet, marks}`: `marks` where in the
    snippet the terms are), newest run first and the later frames of a run first; `limit` is
    kept within 1 and `MAX_MATCHES`."""
    match = query(text)
    limit = max(1, min(limit, MAX_MATCHES))
    if match is None or not _indexed(db):
        return []
    sql = "SELECT rowid FROM search WHERE search MATCH ?"
    params: list[Any] = [match]
    if run_id is not None:
        row = db.execute("SELECT key FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return []
        sql += " AND rowid BETWEEN ? AND ?"
        params += [row[0] << _SEQ_BITS, ((row[0] + 1) << _SEQ_BITS) - 1]
    rowids = [r[0] for r in db.execute(f"{sql} ORDER BY rowid DESC LIMIT ?", (*params, limit))]
    return _matches(db, rowids, terms(text))


def _indexed(db: sqlite3.Connection) -> bool:
    """Whether the history has an index: one made before it gets one when a process next
    writes to it, and has nothing to find until then."""
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search'")
    return found.fetchone() is not None


def _matches(db: sqlite3.Connection, rowids: list[int], words: list[str]) -> list[dict[str, Any]]:
    """Each rowid's match, its snippet cut from its frame line (read from its chunk); a
    piece of a line over 64 KiB says so (`line`: which frames hold it, `pieces.line_of`)."""
    ids: dict[int, str] = {}
    runs: dict[int, Frames] = {}
    found: list[dict[str, Any]] = []
    for rowid in rowids:
        key, seq = rowid >> _SEQ_BITS, rowid & ((1 << _SEQ_BITS) - 1)
        if key not in ids:
            row = db.execute("SELECT id FROM runs WHERE key = ?", (key,)).fetchone()
            ids[key] = "" if row is None else row[0]  # "": dropped since it matched
            runs[key] = Frames(db, key)
        frame = runs[key].frame(seq) if ids[key] else None
        if not isinstance(frame, dict):
            continue
        match = {"runId": ids[key], "seq": seq, "type": frame.get("type")}
        text = snippet(plain(shown_text(frame)), words)
        if (line := line_of(runs[key], seq)) is not None:
            match["line"] = line
            text = _within(text, first=seq == line["from"], last=seq == line["to"])
        found.append({**match, "snippet": text, "marks": [list(m) for m in marks(text, words)]})
    return found


def _within(text: str, *, first: bool, last: bool) -> str:
    """A piece's snippet, with `…` where the line goes on before or after the piece."""
    if not first and not text.startswith("…"):
        text = "…" + text
    if not last and not text.endswith("…"):
        text += "…"
    return text
