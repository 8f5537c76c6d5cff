"""Search in any script, in process on real SQLite files: a substring of a run of CJK
characters is found (each character is a word), an emoji is a word, Latin words are found as
before and no more, and a history indexed before (schema version 4: a CJK run one word, no
emoji at all) is indexed again by its first writer."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from mcpx_hooks.supervisor.history.schema import _SCHEMA, VERSION
from mcpx_hooks.supervisor.history.search import SCHEMA
from mcpx_hooks.supervisor.history.store import History, Written

LINES = [
    "日本語テキストを表示します",
    "東京都に住んでいます",
    "데이터베이스에 연결했습니다",
    "🚀 launched build 42",
    "build ✅passed",
    "👍🏽 looks good",
    "needle-42 café",
    "──── ████ ⠋ progress",
    "needles and pins",
]


def frame(seq: int, type_: str, **fields: object) -> bytes:
    return orjson.dumps({"runId": "r", "seq": seq, "at": "t", "type": type_, **fields})


def sent() -> list[bytes]:
    lines = [frame(0, "start", argv=["x"], cwd="/", sandbox="none")]
    return lines + [frame(seq, "stdout", text=t) for seq, t in enumerate(LINES, 1)]


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    opened = History.open(tmp_path / "h.db")
    opened.write([Written("r", 0, sent(), {"runId": "r"}, 1.0, True)])
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("words", "seqs"),
    [
        ("日本語", [1]),  # the start of a run of CJK characters
        ("テキスト", [1]),  # its middle
        ("表示します", [1]),  # its end
        ('"本語テ"', [1]),
        ("東京 住んで", [2]),
        ("데이터베이스", [3]),  # Hangul: a word with its particle glued on
        ("語日", []),  # not in that order
        ("🚀", [4]),
        ("✅", [5]),
        ("✅ passed", [5]),
        ("👍", [6]),  # whatever its skin tone
        ("👍🏽", [6]),
        ("needle 42", [7]),
        ("cafe", [7]),
        ("needle", [7]),  # a word, never a part of one: `needles` is another word
        ("progress", [8]),
        ("─", []),  # what draws boxes and bars is not a word
    ],
)
def test_a_word_in_any_script_is_found(history: History, words: str, seqs: list[int]) -> None:
    found = history.search(words)
    assert [m["seq"] for m in found] == seqs, found
    for m in found:
        assert m["snippet"] == LINES[m["seq"] - 1]


def test_a_history_of_version_4_is_indexed_again(tmp_path: Path) -> None:
    # Version 4 indexed a run of CJK characters as one word, and no emoji: `日本語` was not
    # found in `日本語テキスト`, nor `🚀` at all. The first writer empties its index and makes
    # it again; what was indexed before is deleted as it is indexed now.
    path = tmp_path / "h.db"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA + SCHEMA)
    lines = sent()
    db.execute(
        "INSERT INTO runs(id, started, summary, frames, indexed, finished)"
        " VALUES ('r', 1, '{}', ?, ?, 1)",
        (len(lines), len(lines)),
    )
    db.execute("INSERT INTO chunks VALUES (1, 0, ?, 0, ?)", (len(lines), b"\n".join(lines)))
    for seq, text in enumerate(LINES, 1):
        db.execute("INSERT INTO search(rowid, text) VALUES (?, ?)", ((1 << 32) + seq, text))
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    reader = History.open(path, writes=False)
    try:
        assert reader.search("🚀") == []  # as indexed by version 4
    finally:
        reader.close()
    history = History.open(path)
    try:
        assert [m["seq"] for m in history.search("テキスト")] == [1]
        assert [m["seq"] for m in history.search("🚀")] == [4]
        history.drop(["r"])
        assert history.search("テキスト") == []
    finally:
        history.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (VERSION,) == (5,)
    db.execute("INSERT INTO search(search) VALUES ('integrity-check')")
    db.close()


def _newer_history(path: Path) -> bytes:
    """A history at `path` as a newer version (the next schema) would leave it; its bytes."""
    History.open(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {VERSION + 1}")
    db.commit()
    db.close()
    return path.read_bytes()


def test_a_newer_history_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    before = _newer_history(path)
    from mcpx_hooks.supervisor.history.faults import HistoryFault

    with pytest.raises(HistoryFault, match=f"schema version {VERSION + 1}"):
        History.open(path)
    assert path.read_bytes() == before


def test_a_newer_history_says_what_to_do_and_runs_go_on_in_memory(tmp_path: Path) -> None:
    # An operator who goes back to this version after a newer one wrote the history: every
    # command that reads it says the file is a newer version's and what to do, never a
    # traceback; a run goes on (kept in memory, with a warning); the file is left as it is.
    import subprocess

    from service_client import CLI, ENV

    state = tmp_path / "state"
    path = state / "mcpx-hooks" / "history.db"
    path.parent.mkdir(parents=True, mode=0o700)
    before = _newer_history(path)
    env = {**ENV, "XDG_STATE_HOME": str(state)}
    said = (
        f"the file is the run history of a newer mcpx-hooks (schema version {VERSION + 1};"
        f" this one reads up to {VERSION}); it is left as it is: run the newer mcpx-hooks,"
        " or give this one another file ([history] path)"
    )
    for argv in (["runs", "list"], ["runs", "search", "x"], ["exec", "--", "true"]):
        done = subprocess.run(
            [*CLI, *argv],
            check=False,
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert said in done.stderr + done.stdout, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert path.read_bytes() == before
