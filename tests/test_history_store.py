"""The history's store and its recorder, in process on real SQLite files: lines come back byte
for byte from any seq, retention by age and bytes drops the oldest finished runs first, a
file that is not ours is never rewritten, a full queue gives a run up with a warning, and a
fault met while a run runs warns that run once."""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import sqlite3
import subprocess
from pathlib import Path

import orjson
import pytest
import trio

from mcpx_hooks.supervisor.core.frames import (
    EndFrame,
    FrameType,
    OutputFrame,
    ResultFrame,
    StartFrame,
    blank,
)
from mcpx_hooks.supervisor.history import sizes
from mcpx_hooks.supervisor.history.faults import HistoryFault
from mcpx_hooks.supervisor.history.store import History, Written, default_path
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.journals import Journals
from mcpx_hooks.supervisor.run.recording import Recorder


def lines(n: int, first: int = 0) -> list[bytes]:
    return [b'{"seq":%d,"text":"line %d","type":"stdout"}' % (i, i) for i in range(first, n)]


def summary(run_id: str) -> dict[str, object]:
    return {"runId": run_id, "status": "result"}


def test_the_default_history_is_never_a_relative_path() -> None:
    """A HOME of `.` put the history in the working directory (a project's own tree), an
    empty one under `/`; a HOME that is no absolute path counts as none, so the user's home
    comes from the password database, as it does when HOME is not set."""
    mine = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local/state/mcpx-hooks/history.db"
    assert default_path({"XDG_STATE_HOME": "/s", "HOME": "."}) == Path("/s/mcpx-hooks/history.db")
    assert default_path({"HOME": "/h"}) == Path("/h/.local/state/mcpx-hooks/history.db")
    for home in (".", "", "relative/dir"):
        assert default_path({"XDG_STATE_HOME": "rel", "HOME": home}) == mine
    assert default_path({}) == mine


def test_lines_come_back_byte_for_byte_from_any_seq(tmp_path: Path) -> None:
    history = History.open(tmp_path / "h.db")
    sent = [*lines(250), "ünïcode \\u2028".encode()]
    try:
        for first in range(0, len(sent), 100):  # three batches: three chunks
            chunk = sent[first : first + 100]
            history.write([Written("r", first, chunk, summary("r"), 1.0, False)])
        assert history.lines("r") == (sent, False)
        for start in (0, 1, 99, 100, 101, 250, 251):
            assert history.lines("r", start) == (sent[start:], False)
        assert history.lines("other") is None
    finally:
        history.close()
    assert (tmp_path / "h.db").stat().st_mode & 0o777 == 0o600


def test_a_run_holds_the_room_its_lines_take_in_the_search_index(tmp_path: Path) -> None:
    """Lines of distinct words and numbers compress well but index large: what a run holds,
    which retention weighs against `retainBytes`, counts its index beside its chunks."""
    history = History.open(tmp_path / "h.db")
    words = random.Random(7)
    try:
        empty = sizes.used(history._db)
        for n in range(6):
            sent = [
                orjson.dumps({"seq": i, "text": f"job {i} took {words.randrange(10**9)}"}).replace(
                    b"}", b',"type":"stdout"}'
                )
                for i in range(6000)
            ]
            history.write([Written(f"r{n}", 0, sent, summary(f"r{n}"), float(n), True)])
        history.write([])  # (the room the last write's index took is added by the next)
        used = sizes.used(history._db) - empty
        assert 0.85 * used <= history.held() <= used
        dropped = history.retain(days=30, max_bytes=used // 2, now=6.0)
        assert dropped[:3] == ["r0", "r1", "r2"] and len(dropped) < 6
    finally:
        history.close()


def test_retention_drops_old_runs_then_the_oldest_finished_past_the_bytes(
    tmp_path: Path,
) -> None:
    history = History.open(tmp_path / "h.db")
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 1000)
    day = 86400.0
    try:
        for run_id, started, finished in [
            ("ancient", 0.0, True),
            ("old", 10 * day, True),
            ("running", 11 * day, False),
            ("mid", 12 * day, True),
            ("new", 13 * day, True),
        ]:
            artifacts = [("a0", f"{run_id:0>64}", "f", "text/plain", 1000, str(blob))]
            history.write([Written(run_id, 0, [], summary(run_id), started, finished, artifacts)])
        assert len(list((tmp_path / "artifacts").iterdir())) == 5
        held = history.held()
        assert history.retain(days=30, max_bytes=held, now=35 * day) == ["ancient"]
        # Past the bytes: the oldest finished go first; the running one stays.
        assert history.retain(days=30, max_bytes=2500, now=35 * day) == ["old", "mid"]
        kept = [s["runId"] for s in history.summaries(10)]
        assert kept == ["new", "running"]
        left = {p.name for p in (tmp_path / "artifacts").iterdir()}
        assert left == {f"{'running':0>64}", f"{'new':0>64}"}  # named by a kept run
        assert history.artifact("mid", "a0") is None
        found = history.artifact("new", "a0")
        assert found is not None and Path(found.path).read_bytes() == b"x" * 1000
    finally:
        history.close()


def test_a_writer_behind_what_another_process_stored_changes_nothing(tmp_path: Path) -> None:
    """Two processes recording one run (gateways, or a gateway and a worker, sharing one
    database): the one behind neither cuts the run short nor makes it unfinished."""
    ahead, behind = History.open(tmp_path / "h.db"), History.open(tmp_path / "h.db")
    run = lines(3000)
    running = {"runId": "r", "status": "running"}
    try:
        ahead.write([Written("r", 0, run, summary("r"), 1.0, True)])
        behind.write([Written("r", 0, run[:1421], running, 1.0, False)])
        behind.write([Written("r", 1421, run[1421:2000], running, 1.0, False)])
        assert ahead.lines("r") == (run, True)
        assert ahead.summaries(10) == [summary("r")]
    finally:
        ahead.close()
        behind.close()


def test_writers_sharing_a_database_store_on_what_they_read(tmp_path: Path) -> None:
    """A write reads how much of a run is stored and writes past it: another process's write
    between the two (here, at this one's first change, if SQLite lets it in then; else
    once this one is done, as it would wait for the lock) must not be written over."""
    path = tmp_path / "h.db"
    first, other = History.open(path), History.open(path)
    run = lines(3000)
    done: list[str] = []

    def theirs() -> None:
        other.write([Written("r", 0, run, summary("r"), 1.0, True)])
        done.append("theirs")

    def between(statement: str) -> None:
        if done or not statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            return
        done.append("tried")
        with contextlib.suppress(HistoryFault):  # locked: it waits for this one's commit
            theirs()

    try:
        other._db.execute("PRAGMA busy_timeout = 0")
        first._db.set_trace_callback(between)
        first.write([Written("r", 0, run[:1421], {"runId": "r"}, 1.0, False)])
        first._db.set_trace_callback(None)
        if done == ["tried"]:
            theirs()
        assert done[-1] == "theirs"
        assert first.lines("r") == (run, True)
    finally:
        first.close()
        other.close()


def test_a_run_whose_owner_is_gone_is_ended_in_the_history_and_verifies(tmp_path: Path) -> None:
    # Two runs stored as far as their owners got: one by a process that is gone (it was
    # killed), one by this one (still running it). Opening the history to write ends the
    # first, there and for good; the second is its owner's.
    from mcpx_hooks.supervisor.core.chain import check
    from mcpx_hooks.supervisor.history.store import OWNER_MARK
    from mcpx_hooks.supervisor.run.interrupted import alive, owner_token, seal_interrupted

    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    dead = owner_token(int(gone.stdout))  # (0: its /proc entry is gone with it)
    ours = owner_token()
    assert alive(ours) and not alive(dead) and not alive((1 << 40) | os.getpid())
    with subprocess.Popen(["sh", "-c", "read x"], stdin=subprocess.PIPE) as child:
        assert child.stdin is not None
        token = owner_token(child.pid)
        assert alive(token)
        child.stdin.close()  # it ends, and is left unreaped: a zombie is gone as well
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert not alive(token)
    history = History.open(tmp_path / "h.db")
    try:
        for run_id, owner in (("killed", dead), ("mine", ours)):
            j = RunJournal(run_id)
            j.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
            history.write(
                [Written(run_id, 0, list(j.lines), j.summary(), 1.0, False)],
                marks={OWNER_MARK + run_id: owner},
            )
        assert seal_interrupted(history) == ["killed"]
        stored, finished = history.lines("killed") or ([], False)
        assert finished and check(stored) is None  # its end carries the chain
        assert [orjson.loads(line)["type"] for line in stored] == ["start", "error", "end"]
        assert "stopped before its end" in orjson.loads(stored[1])["message"]
        statuses = {s["runId"]: s["status"] for s in history.summaries(10)}
        assert statuses == {"killed": "error", "mine": "running"}
        assert history.mark(OWNER_MARK + "killed") is None  # its owner forgotten with it
        assert seal_interrupted(history) == []  # once
        # A run stored without an owner (a cluster gateway's record of a worker's run, which
        # the cluster ends) is left as it is.
        j = RunJournal("mirrored")
        j.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
        history.write([Written("mirrored", 0, list(j.lines), j.summary(), 1.0, False)])
        assert seal_interrupted(history) == []
        assert history.lines("mirrored") == (list(j.lines), False)
    finally:
        history.close()


def test_a_run_ended_for_its_gone_owner_is_read_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was read whole (every line of the run at once) to make its seal: a killed run of
    # 400,000 lines held them all in the next process's memory at its start. Now each read
    # takes one stored chunk, and the seal is the same: its chain covers every line, its
    # outcome (here a result, stored before the kill) stands, and the summary keeps what the
    # recorder stored (a refused hook) with what the first line says.
    from mcpx_hooks.supervisor.core.chain import check
    from mcpx_hooks.supervisor.history.store import OWNER_MARK
    from mcpx_hooks.supervisor.run.interrupted import seal_interrupted

    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    j = RunJournal("big")
    j.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
    history = History.open(tmp_path / "h.db")
    read: list[int] = []
    whole = history.lines

    def counted(run_id: str, start: int = 0, chunks: int = -1) -> tuple[list[bytes], bool] | None:
        found = whole(run_id, start, chunks)
        read.append(len(found[0]) if found else 0)
        return found

    try:
        held = 0
        for batch in range(3):
            for n in range(50):
                j.append(blank(OutputFrame, text=f"line {batch} {n}"))
            if batch == 2:
                j.append(blank(ResultFrame, value=1))
            stored = {**j.summary(), "refused": ["gate"]}
            owner = {OWNER_MARK + "big": int(gone.stdout)}
            history.write([Written("big", held, j.lines[held:], stored, 1.0, False)], marks=owner)
            held = len(j.lines)
        monkeypatch.setattr(history, "lines", counted)
        assert seal_interrupted(history) == ["big"]
        monkeypatch.setattr(history, "lines", whole)
        kept, finished = whole("big") or ([], False)
        assert finished and check(kept) is None
        assert len(kept) == len(j.lines) + 1  # its end only: it has its outcome
        assert 0 < max(read) <= 51 < len(j.lines)  # (a chunk a write here)
        (listed,) = history.summaries(1)
        assert listed["status"] == "result" and listed["refused"] == ["gate"]
        assert listed["argv"] == ["job"] and listed["durationMs"] is None
    finally:
        history.close()


def test_a_run_ended_for_its_gone_owner_lasted_at_least_as_long_as_its_frames_show() -> None:
    # Its `end` said 0 ms: `runs show` then read "end: failed, exec exits 1, 0 ms" of a run
    # that had run for seconds before its process was killed. Then it said the frames' span
    # as if it were the whole run ("4 ms" of a run killed after 2 s): how long it ran is not
    # known, only that it ran at least that long.
    lines = [
        b'{"runId":"r","seq":0,"at":"2026-12-05T05:00:00.000Z","type":"start","argv":["job"],'
        b'"cwd":"/","sandbox":"none"}',
        b'{"runId":"r","seq":1,"at":"2026-12-05T05:00:01.250Z","text":"x","type":"stdout"}',
    ]
    journal = RunJournal.restored("r", lines, finished=False)
    assert [f["type"] for f in journal.frames] == ["start", "stdout", "error", "end"]
    error, end = journal.frames[-2:]
    assert end["durationMs"] is None and end["exitCode"] is None
    assert error["message"].endswith("; it ran for at least 1250 ms (start to last frame)")
    assert journal.summary()["durationMs"] is None


async def test_a_recorded_run_names_its_owner_until_its_end(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.history.store import OWNER_MARK
    from mcpx_hooks.supervisor.run.interrupted import owner_token

    history = History.open(tmp_path / "h.db")
    recorder = Recorder(history)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(recorder.serve)
            running, short = journal("running", recorder), journal("short", recorder)
            finish(short)  # (its first write is its last: no mark left behind)
            await recorder.wait_idle()
            assert history.mark(OWNER_MARK + "running") == owner_token()
            assert history.mark(OWNER_MARK + "short") is None
            finish(running)
            running.recorder = recorder.note
            recorder.note(running)
            await recorder.wait_idle()
            nursery.cancel_scope.cancel()
        assert history.mark(OWNER_MARK + "running") is None
    finally:
        history.close()


def test_a_file_that_is_not_ours_is_a_fault_and_left_as_it_is(tmp_path: Path) -> None:
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("CREATE TABLE mine(x)")
    other.commit()
    other.close()
    before = (tmp_path / "other.db").read_bytes()
    with pytest.raises(HistoryFault, match="another database"):
        History.open(tmp_path / "other.db")
    assert (tmp_path / "other.db").read_bytes() == before


def journal(run_id: str, recorder: Recorder) -> RunJournal:
    j = RunJournal(run_id)
    j.recorder = recorder.note
    j.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    return j


def finish(j: RunJournal) -> None:
    j.append(blank(ResultFrame, value=None))
    j.append(blank(EndFrame, exit_code=0, duration_ms=1))


async def test_a_full_queue_gives_a_run_up_with_one_warning(tmp_path: Path) -> None:
    history = History.open(tmp_path / "h.db")
    recorder = Recorder(history, capacity=2)
    try:
        first, second = journal("one", recorder), journal("two", recorder)
        third = journal("three", recorder)  # the writer has not taken any yet
        third.offer_output(FrameType.STDOUT, ["more"])
        warned = [f for f in third.frames if f["type"] == "warning"]
        assert len(warned) == 1 and "not being kept for this run" in warned[0]["message"]
        assert [f["type"] for f in first.frames] == ["start"]
        for j in (first, second, third):
            finish(j)
        async with trio.open_nursery() as nursery:
            await nursery.start(recorder.serve)
            await recorder.wait_idle()
            nursery.cancel_scope.cancel()
        assert history.lines("one") == (first.lines, True)
        assert history.lines("two") == (second.lines, True)
        assert history.lines("three") is None
    finally:
        history.close()


async def test_a_fault_while_a_run_runs_warns_it_once_and_it_goes_on(tmp_path: Path) -> None:
    history = History.open(tmp_path / "h.db")
    recorder = Recorder(history)
    journals = Journals(8, history=history, recorder=recorder.note)
    holder = sqlite3.connect(tmp_path / "h.db", isolation_level=None)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(recorder.serve)
            running = journals.open("r")
            running.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
            await recorder.wait_idle()
            assert history.lines("r") == (running.lines, False)
            holder.execute("BEGIN IMMEDIATE")  # another writer, until ours gives up (2 s)
            running.offer_output(FrameType.STDOUT, ["one"])
            await recorder.wait_idle()
            assert recorder.fault is not None and "locked" in recorder.fault
            running.offer_output(FrameType.STDOUT, ["two"])
            finish(running)
            later = journals.open("later")
            later.append(blank(StartFrame, argv=("y",), cwd="/", sandbox="none"))
            nursery.cancel_scope.cancel()
        types = [f["type"] for f in running.frames]
        assert types == ["start", "stdout", "warning", "stdout", "result", "end"]
        assert "database is locked" in running.frames[2]["message"]
        assert [f["type"] for f in later.frames] == ["start", "warning"]
        # Memory still serves both, whole.
        assert (await journals.find("r")) is running
    finally:
        holder.close()
        history.close()


@pytest.mark.parametrize("what", ["a directory", "a device", "a FIFO"])
def test_a_history_path_that_is_not_a_file_says_what_it_is(tmp_path: Path, what: str) -> None:
    # SQLite said "disk I/O error" (a FIFO), "… is the disk full?" (`/dev/null`), and a reader
    # "no run has been recorded there" (a directory): none of them the reason.
    path = tmp_path / "history.db"
    if what == "a directory":
        path.mkdir()
    elif what == "a device":
        path.symlink_to("/dev/null")
    else:
        os.mkfifo(path)
    for writes in (True, False):
        with pytest.raises(HistoryFault) as caught:
            History.open(path, writes=writes)
        assert str(caught.value) == (f"opening the run history {path}: it is {what}, not a file")
    assert Path("/dev/null").is_char_device()  # (never written to)


def test_the_run_list_is_newest_first_across_memory_and_the_history(tmp_path: Path) -> None:
    """A server's runs in memory and the runs other processes (`exec`, `mcp`) stored meanwhile
    in the same history are one list, newest first: an `exec` run started after the server's
    last run was listed below it, as if older."""
    history = History.open(tmp_path / "h.db")
    try:
        journals = Journals(8, history=history)
        served = journals.open("served")
        served.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
        finish(served)
        earlier = {**summary("earlier"), "startedAt": "2000-01-01T00:00:00.000Z"}
        later = {**summary("later"), "startedAt": "2999-01-01T00:00:00.000Z"}
        history.write([Written("earlier", 0, lines(1), earlier, 1.0, True)])
        history.write([Written("later", 0, lines(1), later, 2.0, True)])
        listed = [s["runId"] for s in journals.summaries()]
        assert listed == ["later", "served", "earlier"]
    finally:
        history.close()
