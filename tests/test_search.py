"""Search across stored runs, in process on real SQLite files: the searched fields are each
frame class's own, a match's seq is the frame that holds it, the run filter and the limit,
newest first, retention drops a run's index rows with it, a history made before the index is
indexed when opened, and no query string (words, quotes, FTS5's own syntax, anything
Hypothesis makes) raises or is answered with an error, in the store and on `/v1/search`."""

from __future__ import annotations

import json
import sqlite3
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.core.convert import wire_name
from mcpx_hooks.supervisor.core.frames import FrameType
from mcpx_hooks.supervisor.core.hookframes import FRAME_CLASSES
from mcpx_hooks.supervisor.history.schema import _SCHEMA, VERSION
from mcpx_hooks.supervisor.history.search import (
    MAX_MATCHES,
    MAX_QUERY,
    SCHEMA,
    SEARCHED,
    STRUCTURED,
    frame_text,
    functions,
    plain,
    query,
    shown_text,
)
from mcpx_hooks.supervisor.history.snippets import marks, snippet
from mcpx_hooks.supervisor.history.store import History, Written
from mcpx_hooks.supervisor.run.journals import Journals
from mcpx_hooks.supervisor.service.protocolevents import Request
from mcpx_hooks.supervisor.service.routes import Answer, Later, RouteState, answer

HOSTILE = [
    "",
    '"',
    '"""',
    'needle "',
    "OR",
    "AND",
    "NOT",
    "NEAR",
    "NEAR(a b, 2)",
    "*",
    "needle*",
    ":",
    "text:needle",
    "^needle",
    "(needle",
    "needle)",
    "-needle",
    "+",
    "{text}: x",
    "a OR b NOT c",
    "\x00",
    "needle\x00",
    "\ud800",
    "'",
    "%",
    "\\",
    "x" * (MAX_QUERY * 3),
    " ".join(["w"] * 500),
]


def frame(run_id: str, seq: int, type_: str, **fields: object) -> bytes:
    return orjson.dumps({"runId": run_id, "seq": seq, "at": "t", "type": type_, **fields})


def run_lines(run_id: str, n: int, needles: dict[int, str] | None = None) -> list[bytes]:
    """A run of `n` frames: start (argv), stdout lines, some `needles` at their seq."""
    needles = needles or {}
    sent = [frame(run_id, 0, "start", argv=["python3", "build.py"], cwd="/", sandbox="none")]
    for seq in range(1, n):
        sent.append(frame(run_id, seq, "stdout", text=needles.get(seq, f"line {seq:>18}")))
    return sent


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    opened = History.open(tmp_path / "h.db")
    yield opened
    opened.close()


def store(history: History, run_id: str, sent: list[bytes], started: float) -> None:
    for first in range(0, len(sent), 5000):  # batches as the recorder writes them
        chunk = sent[first : first + 5000]
        done = first + 5000 >= len(sent)
        history.write([Written(run_id, first, chunk, {"runId": run_id}, started, done)])


def test_each_searched_field_is_its_frame_class_s_own() -> None:
    assert set(SEARCHED) == set(FrameType)
    for frame_type, names in SEARCHED.items():
        fields = {f.name: f for f in attrs.fields(FRAME_CLASSES[frame_type])}
        for name in names:
            assert name in fields, (frame_type, name)
            # The converter's camelCase is the name a frame line has (`frame_text` reads it).
            wire = wire_name(fields[name])
            line = json.dumps({"type": frame_type.value, wire: f"v-{name}"})
            assert frame_text(MEMORY, line) == f"v-{name}"
            # A field read as a string alone is declared one (a list or a value would be
            # indexed as its JSON text: `STRUCTURED` says which are read as their strings).
            if name not in STRUCTURED:  # (as written, or resolved by an earlier test)
                declared = fields[name].type
                assert declared in ("str", "str | None", str, str | None), (frame_type, name)


MEMORY = sqlite3.connect(":memory:")
functions(MEMORY)


def test_frame_text_reads_lists_and_values_and_skips_the_rest() -> None:
    hook = {"type": "hook", "name": "lint", "advice": ["fix a", "fix b"], "status": "failed"}
    assert frame_text(MEMORY, json.dumps(hook)) == "lint\nfix a\nfix b"
    assert shown_text(hook) == "lint\nfix a fix b"  # what a snippet shows
    emit = {"type": "emit", "value": {"k": [1, "two"]}}
    assert frame_text(MEMORY, json.dumps(emit)).split() == ["k", "1", "two"]
    # A list's strings as they are, never their JSON (where `\n` glued `n` to the next word).
    start = {"type": "start", "argv": ["py", "-c", "x=1\nzebra\tword"]}
    assert frame_text(MEMORY, json.dumps(start)).split() == ["py", "-c", "x=1", "zebra", "word"]
    assert shown_text(emit) == '{"k":[1,"two"]}'
    assert shown_text({"type": "nope"}) == shown_text([]) == ""
    assert frame_text(MEMORY, '{"type": "end", "exitCode": 0}') == ""
    assert frame_text(MEMORY, '{"type": "no-such-type", "text": "x"}') == ""
    assert frame_text(MEMORY, '["not", "a", "frame"]') == ""
    assert frame_text(MEMORY, b"not json") == ""


def test_a_line_is_found_in_a_100000_line_run_at_its_seq(history: History) -> None:
    sent = run_lines("big", 100_000, {77_777: "the build said needle-42 here"})
    store(history, "big", sent, 1.0)
    (found,) = history.search("needle-42")
    assert found == {
        "runId": "big",
        "seq": 77_777,
        "type": "stdout",
        "snippet": "the build said needle-42 here",
        "marks": [[15, 24]],
    }
    # The seq points at the frame holding it: the stored line at that seq has the text.
    stored, _ = history.lines("big", found["seq"]) or ([], False)
    assert json.loads(stored[0])["text"] == "the build said needle-42 here"
    # A phrase, the words the other way round, and a word alone.
    assert [m["seq"] for m in history.search('"said needle"')] == [77_777]
    assert history.search('"needle said"') == []
    assert [m["seq"] for m in history.search("build.py")] == [0]


def test_run_filter_limit_and_newest_first(history: History) -> None:
    for n, run_id in enumerate(("old", "mid", "new")):
        store(history, run_id, run_lines(run_id, 40, {3: "shared word", 9: "shared again"}), n)
    everything = history.search("shared")
    assert [(m["runId"], m["seq"]) for m in everything] == [
        ("new", 9),
        ("new", 3),
        ("mid", 9),
        ("mid", 3),
        ("old", 9),
        ("old", 3),
    ]
    assert [m["seq"] for m in history.search("shared", run_id="mid")] == [9, 3]
    assert {m["runId"] for m in history.search("shared", run_id="mid")} == {"mid"}
    assert history.search("shared", run_id="nope") == []
    assert len(history.search("shared", limit=2)) == 2
    store(history, "long", run_lines("long", MAX_MATCHES + 100), 4.0)
    assert len(history.search("line", limit=10**9)) == MAX_MATCHES
    assert len(history.search("line", limit=0)) == 1


def test_retention_drops_a_run_s_index_rows_with_it(history: History, tmp_path: Path) -> None:
    store(history, "old", run_lines("old", 50, {7: "gone soon"}), 0.0)
    store(history, "new", run_lines("new", 50, {7: "kept here"}), 86400.0)
    assert history.retain(days=1, max_bytes=1 << 40, now=86400 * 1.5) == ["old"]
    assert history.search("gone") == []
    assert [m["runId"] for m in history.search("kept")] == ["new"]
    history.drop(["new"])
    assert history.search("line") == []
    db = sqlite3.connect(tmp_path / "h.db")
    # The index agrees with what is stored (a delete with other texts would fail this).
    db.execute("INSERT INTO search(search) VALUES ('integrity-check')")
    db.close()


def test_a_history_made_before_the_index_is_indexed_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA)  # the tables a history had before the index
    data = b"\n".join(run_lines("r", 5, {2: "from before"}))
    db.execute("INSERT INTO runs(id, started, summary, frames) VALUES ('r', 1, '{}', 5)")
    db.execute("INSERT INTO chunks VALUES (1, 0, 5, 1, ?)", (zlib.compress(data),))
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    reader = History.open(path, writes=False)  # `runs search` before any writer opened it
    assert reader.search("before") == []
    reader.close()
    history = History.open(path)
    reader = History.open(path, writes=False)  # sees what is indexed, indexes nothing
    try:
        assert reader.search("before") == []  # not indexed yet: no match, no error
        assert history.write([], index=2) is True  # two of its five lines indexed
        assert reader.search("before") == []
        assert history.write([], index=3) is False
        assert [m["seq"] for m in reader.search("before")] == [2]
    finally:
        reader.close()
        history.close()


#: What a test runner prints in colour, and the words a person sees of it.
COLOURED = {
    "tests/test_x.py::test_a \x1b[31mFAILED\x1b[0m": "tests/test_x.py::test_a FAILED",
    "\x1b[1;32mPASSED\x1b[0m in 0.1s": "PASSED in 0.1s",
    "\x1b[38;5;196merror\x1b[m: build \x9b2Kbroken": "error: build broken",
    "\x1b]8;;https://example.com\x07link\x1b]8;;\x1b\\ done\x1b(B": "link done",
    "\x1b]0;a title": "",
    "plain text": "plain text",
}


def test_words_printed_in_colour_are_found_and_shown_as_a_terminal_shows_them(
    history: History, tmp_path: Path
) -> None:
    # Colour codes glued to a word made another token ("31mfailed"): `runs search FAILED`
    # found nothing in a test runner's coloured output.
    assert {text: plain(text) for text in COLOURED} == COLOURED
    texts = list(COLOURED)
    sent = [frame("c", 0, "start", argv=["pytest"], cwd="/", sandbox="none")]
    sent += [frame("c", seq, "stdout", text=text) for seq, text in enumerate(texts, 1)]
    store(history, "c", sent, 1.0)
    for word, seq in (("FAILED", 1), ("passed", 2), ("error build broken", 3), ("link", 4)):
        (match,) = history.search(word)
        assert match["seq"] == seq, (word, match)
        assert match["snippet"] == COLOURED[texts[seq - 1]]
    assert history.search("31mfailed") == [] and history.search("title") == []
    history.drop(["c"])
    assert history.search("FAILED") == []
    db = sqlite3.connect(tmp_path / "h.db")
    db.execute("INSERT INTO search(search) VALUES ('integrity-check')")  # deleted as indexed
    db.close()


#: Text with the terminal's sequences in it, and what may break them: ESC, CSI, BEL, `[`, `]`.
_TERMINAL_TEXT = st.text(
    alphabet=st.sampled_from("\x1b\x9b\x07[];:?m0123 aZ\\()\u00e9"), max_size=40
)


@given(st.lists(st.one_of(_TERMINAL_TEXT, st.text(max_size=40)), min_size=1, max_size=8))
def test_any_text_is_indexed_and_its_rows_deleted_as_indexed(texts: list[str]) -> None:
    # A row of a contentless index is deleted with the text it was indexed with, made again
    # from the stored line: `plain` gives the same text both times, whatever the line holds.
    assert all(len(plain(t)) <= len(t) for t in texts)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        history = History.open(Path(tmp) / "h.db")
        try:
            sent = [frame("p", 0, "start", argv=["x"], cwd="/", sandbox="none")]
            sent += [frame("p", seq, "stdout", text=t) for seq, t in enumerate(texts, 1)]
            store(history, "p", sent, 1.0)
            history.drop(["p"])
        finally:
            history.close()
        db = sqlite3.connect(Path(tmp) / "h.db")
        try:
            db.execute("INSERT INTO search(search) VALUES ('integrity-check')")
        finally:
            db.close()


@pytest.mark.parametrize("version", [2, 3])
def test_a_history_indexed_with_the_escapes_is_indexed_again_without(
    tmp_path: Path, version: int
) -> None:
    # A history of schema version 2 indexed a line's text as it came, escapes and all (and
    # version 3 a list's text as its JSON): the first writer indexes it again.
    path = tmp_path / "h.db"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA + SCHEMA)
    line = frame("r", 0, "stdout", text="test_a \x1b[31mFAILED\x1b[0m")
    db.execute(
        "INSERT INTO runs(id, started, summary, frames, indexed) VALUES ('r', 1, '{}', 1, 1)"
    )
    db.execute("INSERT INTO chunks VALUES (1, 0, 1, 0, ?)", (line,))
    db.execute(
        "INSERT INTO search(rowid, text) VALUES (?, ?)", (1 << 32, "test_a \x1b[31mFAILED\x1b[0m")
    )
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    history = History.open(path)
    try:
        assert [m["seq"] for m in history.search("FAILED")] == [0]
        history.drop(["r"])
        assert history.search("FAILED") == [] and history.search("31mfailed") == []
    finally:
        history.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (VERSION,)
    db.execute("INSERT INTO search(search) VALUES ('integrity-check')")
    db.close()


def test_a_search_that_may_write_indexes_what_was_left_first(
    history: History, tmp_path: Path
) -> None:
    """A process that ended left its lines unindexed (`index=0`): a reader finds nothing,
    a search that may write the history indexes them before it looks."""
    sent = run_lines("r", 100, {10: "early needle", 90: "late needle"})
    assert history.write([Written("r", 0, sent, {"runId": "r"}, 1.0, False)], index=0)
    reader = History.open(tmp_path / "h.db", writes=False)
    try:
        assert reader.search("needle") == []
        assert [m["seq"] for m in history.search("needle")] == [90, 10]
        assert [m["seq"] for m in reader.search("needle")] == [90, 10]
    finally:
        reader.close()


def test_the_writer_indexes_at_most_its_budget_and_drops_only_what_it_indexed(
    history: History, tmp_path: Path
) -> None:
    sent = run_lines("r", 100, {10: "early needle", 90: "late needle"})
    assert history.write([Written("r", 0, sent, {"runId": "r"}, 1.0, False)], index=50)
    reader = History.open(tmp_path / "h.db", writes=False)  # indexes nothing itself
    try:
        assert [m["seq"] for m in reader.search("needle")] == [10]
    finally:
        reader.close()
    history.drop(["r"])  # deletes the 50 rows indexed, not the 50 that were not
    db = sqlite3.connect(tmp_path / "h.db")
    db.execute("INSERT INTO search(search) VALUES ('integrity-check')")
    db.close()
    assert history.search("needle") == []


def test_snippet_is_the_line_as_printed_cut_around_the_first_term() -> None:
    text = "a" * 300 + " needle " + "b" * 300
    cut = snippet(text, ["needle"])
    assert "needle" in cut and cut.startswith("…") and cut.endswith("…")
    assert len(cut) <= 162
    # The line that holds the term, its spaces and tabs as printed; `…` for the other lines.
    assert snippet("first\n  two  spaces\tand a tab\nlast", ["spaces"]) == (
        "…  two  spaces\tand a tab…"
    )
    assert snippet("one line\n", ["line"]) == "one line"
    assert snippet("no term\nhere", ["absent"]) == "no term…"
    # Found as the index finds it: case, accents and the separators of a phrase aside.
    long = "x" * 400 + " Café-Crème " + "y" * 400
    assert "Café-Crème" in snippet(long, ["cafe creme"])
    # A cut never leaves an accent without its letter.
    accented = "e\u0301" * 200 + " needle " + "e\u0301" * 200
    assert not unicodedata.combining(snippet(accented, ["needle"])[1])


def test_marks_are_where_the_index_found_the_terms() -> None:
    """A snippet's marks are its words as the index matched them (the console marked the
    typed text, literally, and `"needle 42"` marked nothing in `Needle-42`)."""

    def marked(text: str, *words: str) -> list[str]:
        return [text[start:end] for start, end in marks(text, words)]

    assert marked("build Needle-42 done, needles", "needle 42") == ["Needle-42"]
    assert marked("build Needle-42 done, needles", "NEEDLE") == ["Needle"]  # words whole
    assert marked("le café est prêt", "cafe", "PRET") == ["café", "prêt"]
    assert marked("un cafe\u0301 noir", "cafe") == ["cafe\u0301"]  # its accent with it
    assert marked("two  spaces", "two spaces") == ["two  spaces"]
    assert marked("日本語テキストを表示します", "本語 テキ", "表示") == ["本語テキ", "表示"]
    assert marked("deploy 🚀launched, ✅passed", "🚀 launched", "passed") == [
        "🚀launched",
        "passed",
    ]
    # An emoji whole: its skin tone, the rest of its sequence.
    assert marked("👍🏽 ok 👩\u200d💻 👩🏽\u200d💻", "👍", "💻") == [
        "👍🏽",
        "👩\u200d💻",
        "👩🏽\u200d💻",
    ]
    assert marks("nothing here", ["absent"]) == [] and marks("x", []) == []
    # The line shown is one that holds the word, not a longer word: `need` is not in `needles`.
    assert snippet("needles\nwe need it", ["need"]) == "…we need it"


@given(st.text(max_size=60), st.lists(st.text(max_size=8), max_size=3))
def test_marks_are_in_order_apart_and_in_the_text(text: str, words: list[str]) -> None:
    at = 0
    for start, end in marks(text, words):
        assert at <= start < end <= len(text)
        at = end


@pytest.mark.parametrize("typed", HOSTILE)
def test_hostile_queries_are_text_never_an_error(history: History, typed: str) -> None:
    store(history, "r", run_lines("r", 20, {4: 'needle OR "quoted" NEAR * : ^x'}), 1.0)
    history.search(typed)  # no exception
    made = query(typed)
    assert made is None or made.startswith('"')


def test_what_looks_like_syntax_is_searched_as_text(history: History) -> None:
    store(history, "r", run_lines("r", 20, {4: "alpha OR beta", 5: "alpha gamma"}), 1.0)
    # `OR` is a word here, not FTS5's operator: only the line that holds it matches.
    assert [m["seq"] for m in history.search("alpha OR")] == [4]
    assert [m["seq"] for m in history.search('"alpha OR beta')] == [4]  # a quote left open
    assert [m["seq"] for m in history.search("alpha*")] == [5, 4]  # `*` is no prefix search
    assert history.search("alp*") == []


@given(st.text(max_size=200))
def test_no_query_string_raises(tmp_path_factory: pytest.TempPathFactory, typed: str) -> None:
    history = _shared(tmp_path_factory)
    found = history.search(typed, limit=5)
    assert len(found) <= 5 and all(
        set(m) == {"runId", "seq", "type", "snippet", "marks"} for m in found
    )


@given(st.text(max_size=200))
def test_no_query_string_is_an_error_on_v1_search(
    tmp_path_factory: pytest.TempPathFactory, typed: str
) -> None:
    journals = Journals(10, history=_shared(tmp_path_factory))
    target = f"/v1/search?q={quote(typed, safe='', errors='surrogatepass')}&limit=3"
    got = _search(target, journals)
    assert got.status == 200, got.body
    assert isinstance(json.loads(got.body), list)


_SHARED: dict[str, History] = {}


def _shared(factory: pytest.TempPathFactory) -> History:
    """One history for every Hypothesis example (made once)."""
    if "h" not in _SHARED:
        history = History.open(factory.mktemp("shared") / "h.db")
        store(history, "r", run_lines("r", 200, {4: 'needle OR "quoted" NEAR * : ^x'}), 1.0)
        _SHARED["h"] = history
    return _SHARED["h"]


def _search(target: str, journals: RouteState, token: str | None = "t0k") -> Answer:
    headers = ((b"host", b"x"),) + (
        ((b"authorization", f"Bearer {token}".encode()),) if token else ()
    )
    got = answer(
        Request("GET", target, headers, websocket=False),
        token="t0k",
        origins=frozenset(),
        stopping=False,
        state=journals,
    )
    if isinstance(got, Later):
        return got.make()
    assert isinstance(got, Answer)
    return got


def test_v1_search_needs_the_token_and_a_good_limit(history: History) -> None:
    store(history, "r", run_lines("r", 20, {4: "needle here"}), 1.0)
    journals = Journals(10, history=history)
    assert _search("/v1/search?q=needle", journals, token=None).status == 401
    assert _search("/v1/search?q=needle", journals, token="wrong").status == 401
    found = _search("/v1/search?q=needle&run=r", journals)
    assert json.loads(found.body) == [
        {"runId": "r", "seq": 4, "type": "stdout", "snippet": "needle here", "marks": [[0, 6]]}
    ]
    assert json.loads(_search("/v1/search?q=needle&run=other", journals).body) == []
    nothing = _search("/v1/search", journals)  # no q: nothing asked, nothing found
    assert (nothing.status, json.loads(nothing.body)) == (200, [])
    for bad in ("0", "-1", "x", "1e3", "", "0" * 20):
        got = _search(f"/v1/search?q=needle&limit={bad}", journals)
        assert got.status == 400 and b"limit" in got.body, bad
    for many in ("100000", "99999999999", "9" * 5000):  # past the most: the most
        assert len(json.loads(_search(f"/v1/search?q=line&limit={many}", journals).body)) == 18
    assert _search("/v1/search?q=needle", Journals(10)).status == 404


def test_a_gateway_has_no_history_to_search() -> None:
    from mcpx_hooks.supervisor.cluster.artifacts import ClusterRoutes
    from mcpx_hooks.supervisor.cluster.watch import RunsIndex

    gateway = ClusterRoutes(RunsIndex(4), None)  # type: ignore[arg-type]
    got = _search("/v1/search?q=needle", gateway)
    assert got.status == 404 and b"no run history" in got.body
