"""docs/history.md run for real, in a scratch project with a home of its own: the page's
`[history]` table as the user's config, its `runs list` / `runs show` / `runs verify` commands
(the page's run id replaced by the run the test made), the verdicts `runs verify` prints
compared with the page's comments, and the lines the page shows when the history cannot be
kept (a file that is not a database; a database another process holds locked) compared with
what `exec` and `doctor` print.

Not run here: `runs list --remote ws://127.0.0.1:8765` (a server's runs): the service page's
walkthrough (tests/test_doc_walkthrough_service.py) runs it against a real `serve`."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import zlib
from pathlib import Path

from docpage import Scratch, block, commands, normal

PAGE = "history.md"
PAGE_ID = "9d81129207f7fb12"
# The page's runs are stored under /home/me.
HOME = "/home/me"


def scratch(tmp_path: Path) -> Scratch:
    s = Scratch(tmp_path)
    s.user_config.parent.mkdir(parents=True)
    s.user_config.write_text(block(PAGE, "[history]", "toml").body)
    return s


def test_list_show_and_verify_as_the_page_shows(tmp_path: Path) -> None:
    s = scratch(tmp_path)
    # A run of five frames (start, two stdout, result, end), as the page's verdict counts.
    assert s.sh("mcpx-hooks exec -- sh -c 'echo a; echo b'").returncode == 0
    db = s.home / "runs" / "history.db"  # the page's path = "~/runs/history.db"
    assert db.is_file()

    listing, show, verbose, show_json, remote, search = commands(
        block(PAGE, "runs list", "sh").body
    )
    done = s.sh(listing)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[0]
    assert re.fullmatch(r"[0-9a-f]{16}", run_id) and "sh -c" in done.stdout, done.stdout
    done = s.sh(show.replace(PAGE_ID, run_id))
    assert done.returncode == 0, done.stderr
    assert normal(done.stdout) == [
        "run RUNID: sh -c 'echo a; echo b'  (sandbox workspace)",
        "| a",
        "| b",
        "RESULT null",
        "end: exit code 0, N ms",
    ]
    # `-v`: what each hook's process used, under its line; this run has no hook.
    again = s.sh(verbose.replace(PAGE_ID, run_id))
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr
    assert s.sh(show_json.replace(PAGE_ID, run_id)).returncode == 0
    assert len((s.proj / "run.ndjson").read_text().splitlines()) == 5
    assert "--remote" in remote
    # The block's search: its phrase is in no run here; a run that prints it is found.
    assert s.sh("mcpx-hooks exec -- sh -c 'echo connection refused by db'").returncode == 0
    done = s.sh(search)
    assert done.returncode == 0, done.stderr
    assert "connection refused" in done.stdout and len(done.stdout.splitlines()) >= 1

    verify = block(PAGE, "runs verify run.ndjson", "sh").body.splitlines()
    assert len(verify) == 4
    done = s.sh(verify[0])
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == verify[1].removeprefix("# ")
    done = s.sh(verify[2].replace(PAGE_ID, run_id))
    assert done.returncode == 0, done.stdout
    assert (
        done.stdout.strip()
        == f"run {run_id}: intact (5 frames; their chain matches their end frame's)"
    )

    # A changed byte in the stored run: CHANGED, as the page's second comment says.
    # (Batches are stored compressed when that makes them smaller: `packed`.)
    # (closed here: a `with` on a connection only commits, and its fds would stay open
    # until the collector took it, in whichever test came next)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        chunks = con.execute("SELECT run, first, packed, data FROM chunks").fetchall()
        changed = 0
        for run, first, packed, data in chunks:
            lines = zlib.decompress(data) if packed else data
            if b'"text":"b"' in lines:
                lines = lines.replace(b'"text":"b"', b'"text":"c"')
                new = zlib.compress(lines) if packed else lines
                con.execute(
                    "UPDATE chunks SET data = ? WHERE run = ? AND first = ?", (new, run, first)
                )
                changed += 1
        assert changed == 1, chunks
    done = s.sh(verify[2].replace(PAGE_ID, run_id))
    assert done.returncode == 1, done.stdout
    said, _, _ = verify[3].removeprefix("# ").partition(": …")
    assert done.stdout.startswith(said.replace(PAGE_ID, run_id) + ": "), done.stdout


def test_a_history_that_cannot_be_kept_is_said_as_the_page_shows(tmp_path: Path) -> None:
    s = Scratch(tmp_path)  # the default path, as the page's lines show it
    db = s.home / ".local" / "state" / "mcpx-hooks" / "history.db"
    db.parent.mkdir(parents=True)
    db.write_text("not a database, but the notes of another program\n" * 100)
    done = s.sh("mcpx-hooks exec -- echo hi")
    assert done.returncode == 0, done.stderr
    shown = block(PAGE, "the run history is not being kept").body
    assert normal(shown)[0] in normal(done.stdout, {str(s.home): HOME}), done.stdout
    assert db.read_text().startswith("not a database"), "the file is never rewritten"


def test_doctor_says_a_locked_history_is_not_kept(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    db = s.home / ".local" / "state" / "mcpx-hooks" / "history.db"
    db.parent.mkdir(parents=True)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        done = s.sh("mcpx-hooks doctor")
    finally:
        holder.close()
    shown = block(PAGE, "run history: NOT KEPT").body
    lines = normal(done.stdout, {str(s.home): HOME})
    assert normal(shown)[0] in lines, done.stdout
