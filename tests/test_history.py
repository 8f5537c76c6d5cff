"""The run history on disk, with real processes: a `serve` restarted on the same database
serves its runs byte for byte (frames, seq, the run list, artifacts); `exec` records and
`runs list` / `runs show` read it; `[history] enabled = false` keeps nothing; retention; and
each fault (locked, read-only, full, corrupt) leaves the run whole in memory, with one
warning, while `doctor` says why."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Marker
from service_client import CLI, ENV, Server, arun, http_get, open_ws, start_server
from websockets.exceptions import ConnectionClosed

HOOKS = """
[[hooks]]
name = "tidy"
on = "script"
phase = "suffix"
effect = "apply"
run = ["sh", "-c", "echo '{\\"advise\\": \\"all tidy\\", \\"apply\\": {\\"value\\": 1}}'"]

[[hooks]]
name = "hello"
on = "script"
phase = "before"
run = ["sh", "-c", "echo hello from the hook"]
"""
SCRIPT = (
    'printf "<b>kept</b>" > "$MCPX_ARTIFACTS_DIR/page.html"; for i in $(seq 1 300); do'
    ' echo "line $i"; done; echo oops >&2'
)
NOT_KEPT = "the run history is not being kept"


@pytest.fixture(autouse=True)
def _readable(readable_tmp: Path) -> None:
    """Each test's directory is the runs' cwd: open to a sandboxed hook's own user."""


def config(tmp: Path, history: str = "") -> Path:
    """A config with two hooks and `[history]` pointing into `tmp` (with `history` added)."""
    path = tmp / "c.toml"
    path.write_text(f'{HOOKS}\n[history]\npath = "{tmp / "h" / "history.db"}"\n{history}')
    return path


def mcpx(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env={**ENV, "XDG_STATE_HOME": str(cwd / "state"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def lines_of(server: Server, path: str, request: dict[str, Any] | None = None) -> list[str]:
    """Every line of every message the socket at `path` sends, as sent, to its close."""
    lines: list[str] = []
    async with open_ws(server, path) as ws:
        if request is not None:
            await ws.send(json.dumps(request))
        try:
            while True:
                message = await ws.recv()
                assert isinstance(message, str)
                lines += message.split("\n")
        except ConnectionClosed as exc:
            assert exc.rcvd is not None and exc.rcvd.code == 1000, exc
    return lines


@pytest.fixture
def restarted(readable_tmp: Path) -> Iterator[tuple[Path, list[Server]]]:
    servers: list[Server] = []
    yield readable_tmp, servers
    for server in servers:
        if server.proc.poll() is None:
            server.stop()


def test_a_restarted_serve_serves_its_stored_runs_byte_for_byte(
    restarted: tuple[Path, list[Server]],
) -> None:
    tmp, servers = restarted
    config(tmp)
    env = {"XDG_STATE_HOME": str(tmp / "state")}
    first = start_server(tmp, "--config", "c.toml", env=env)
    servers.append(first)
    request = {"argv": ["sh", "-c", SCRIPT], "sandbox": "workspace"}
    live = arun(lines_of(first, "/v1/exec", request))
    frames = [json.loads(line) for line in live]
    run_id = frames[0]["runId"]
    assert [f["seq"] for f in frames] == list(range(len(frames)))
    kinds = {f["type"] for f in frames}
    assert {"start", "hook", "stdout", "stderr", "artifact", "result", "end"} <= kinds, kinds
    assert [f["type"] for f in frames if "not being kept" in f.get("message", "")] == []
    artifact = next(f for f in frames if f["type"] == "artifact")
    replayed = arun(lines_of(first, f"/v1/runs/{run_id}?from=5"))
    assert replayed == live[5:]
    status, listed = http_get(first, "/v1/runs")
    assert status == 200
    assert first.stop() == 0
    assert "Traceback" not in first.log()

    second = start_server(tmp, "--config", "c.toml", env=env)
    servers.append(second)
    assert arun(lines_of(second, f"/v1/runs/{run_id}")) == live
    assert arun(lines_of(second, f"/v1/runs/{run_id}?from=7")) == live[7:]
    assert arun(lines_of(second, f"/v1/runs/{run_id}?from={len(live)}")) == []
    status, again = http_get(second, "/v1/runs")
    assert status == 200 and json.loads(again) == json.loads(listed)
    status, body = http_get(second, f"/v1/runs/{run_id}/artifacts/{artifact['id']}")
    assert (status, body) == (200, b"<b>kept</b>")
    # A second run on the restarted server is listed first, the stored one after it.
    arun(lines_of(second, "/v1/exec", {"argv": ["true"], "sandbox": "workspace"}))
    status, now = http_get(second, "/v1/runs")
    assert [r["runId"] for r in json.loads(now)][1:] == [run_id]
    assert second.stop() == 0
    assert "Traceback" not in second.log()

    # `runs list` and `runs show` read the same database with no server.
    shown = mcpx("runs", "show", run_id, "--config", "c.toml", "--json", cwd=tmp)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == live
    listing = mcpx("runs", "list", "--config", "c.toml", "--json", cwd=tmp)
    assert json.loads(listing.stdout)[1:] == json.loads(listed)


def test_exec_records_and_runs_list_and_show_read_it(tmp_path: Path) -> None:
    done = mcpx("exec", "--json", "--", "sh", "-c", "echo one; echo two", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sent = done.stdout.splitlines()
    run_id = json.loads(sent[0])["runId"]
    assert (tmp_path / "state" / "mcpx-hooks" / "history.db").stat().st_mode & 0o777 == 0o600
    listing = mcpx("runs", "list", "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    (summary,) = json.loads(listing.stdout)
    assert summary["runId"] == run_id and summary["status"] == "result"
    assert summary["argv"] == ["sh", "-c", "echo one; echo two"] and summary["exitCode"] == 0
    shown = mcpx("runs", "show", run_id, "--json", cwd=tmp_path)
    assert shown.stdout.splitlines() == sent
    readable = mcpx("runs", "show", run_id, cwd=tmp_path)
    assert "one" in readable.stdout and "exit code 0" in readable.stdout
    table = mcpx("runs", "list", cwd=tmp_path)
    assert run_id in table.stdout and "echo one; echo two" in table.stdout
    unknown = mcpx("runs", "show", "nope", cwd=tmp_path)
    assert unknown.returncode == 1 and "no run 'nope'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_a_listing_carries_a_long_argv_cut_and_the_run_keeps_it_whole(
    restarted: tuple[Path, list[Server]],
) -> None:
    """An argv of 300 KB was carried whole by every listing of runs (`GET /v1/runs`, `runs
    list`, the history's summary): now each carries at most LISTED_ARGV_CHARS of it, with
    `argvCut` the arguments not listed whole; the run's `start` frame keeps it whole."""
    from mcpx_hooks.supervisor.core.scripts import LISTED_ARGV_CHARS

    tmp, servers = restarted
    argv = ["true", *(f"{i:04}" + "x" * 996 for i in range(300))]
    done = mcpx("exec", "--json", "--", *argv, cwd=tmp)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["argv"] == argv
    listing = mcpx("runs", "list", "--json", cwd=tmp)
    (summary,) = json.loads(listing.stdout)
    listed = summary["argv"]
    assert sum(map(len, listed)) == LISTED_ARGV_CHARS and listed[:3] == argv[:3]
    assert summary["argvCut"] == len(argv) - len(listed) + 1  # (its last one cut)
    assert len(listing.stdout) < 2 * LISTED_ARGV_CHARS
    table = mcpx("runs", "list", cwd=tmp)
    assert f"({summary['argvCut']} argument(s) cut in listings;" in table.stdout
    shown = mcpx("runs", "show", summary["runId"], "--json", cwd=tmp)
    assert json.loads(shown.stdout.splitlines()[0])["argv"] == argv
    server = start_server(tmp, env={"XDG_STATE_HOME": str(tmp / "state")})
    servers.append(server)
    arun(lines_of(server, "/v1/exec", {"argv": ["echo", "y" * 100_000], "sandbox": "workspace"}))
    status, body = http_get(server, "/v1/runs")
    assert status == 200 and len(body) < 3 * LISTED_ARGV_CHARS, len(body)
    first, second = json.loads(body)
    assert (first["argv"], first["argvCut"]) == (["echo", "y" * (LISTED_ARGV_CHARS - 4)], 1)
    assert second == summary
    assert server.stop() == 0


def test_runs_list_says_when_older_runs_are_kept_than_it_lists(tmp_path: Path) -> None:
    """`runs list` shows the newest `[runs] retain` stored runs; past them it listed nothing
    more and said nothing, as if the history held no older run, though `runs show` and
    `runs search` still reach them."""
    (tmp_path / "c.toml").write_text("[runs]\nretain = 2\n")
    ids = []
    for word in ("one", "two", "three"):
        done = mcpx("exec", "--config", "c.toml", "--json", "--", "echo", word, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout.splitlines()[0])["runId"])
    said = (
        "mcpx-hooks runs list: these are the newest 2 runs ([runs] retain); older ones are"
        " kept too: runs show RUN_ID shows one, runs search finds them\n"
    )
    listing = mcpx("runs", "list", "--config", "c.toml", "--json", cwd=tmp_path)
    assert [r["runId"] for r in json.loads(listing.stdout)] == ids[:0:-1]
    assert (listing.returncode, listing.stderr) == (0, said)
    table = mcpx("runs", "list", "--config", "c.toml", cwd=tmp_path)
    assert [line[:16] for line in table.stdout.splitlines()] == ids[:0:-1]
    assert table.stderr == said
    # As many as it lists: nothing more to say.
    (tmp_path / "c.toml").write_text("[runs]\nretain = 3\n")
    listing = mcpx("runs", "list", "--config", "c.toml", cwd=tmp_path)
    assert (len(listing.stdout.splitlines()), listing.stderr) == (3, "")


def test_runs_show_reads_a_stored_run_as_exec_showed_it(tmp_path: Path) -> None:
    """A run that ended before its script did: `runs show` says how `exec` exited, as
    `exec` and `runs show --remote` do, not "no exit code"."""
    done = mcpx("exec", "--timeout", "0.2", "--", "sleep", "5", cwd=tmp_path)
    assert done.returncode == 124, done.stderr
    assert "end: timeout, exec exits 124, " in done.stdout
    run_id = done.stdout.split()[1].rstrip(":")
    readable = mcpx("runs", "show", run_id, cwd=tmp_path)
    assert readable.returncode == 0, readable.stderr
    assert readable.stdout == done.stdout


def test_history_disabled_keeps_nothing_on_disk(tmp_path: Path) -> None:
    (tmp_path / "off.toml").write_text("[history]\nenabled = false\n")
    done = mcpx("exec", "--config", "off.toml", "--", "echo", "hi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "state" / "mcpx-hooks" / "history.db").exists()
    listing = mcpx("runs", "list", "--config", "off.toml", cwd=tmp_path)
    assert listing.returncode == 1 and "enabled = false" in listing.stderr


def test_retention_by_bytes_drops_the_oldest_run_first(tmp_path: Path) -> None:
    config(tmp_path, "retainBytes = 1\n")
    ids = []
    for word in ("first", "second"):
        done = mcpx("exec", "--config", "c.toml", "--json", "--", "echo", word, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout.splitlines()[0])["runId"])
    listing = mcpx("runs", "list", "--config", "c.toml", "--json", cwd=tmp_path)
    # Retention runs as the history opens: the first run is gone, the second is kept.
    assert [r["runId"] for r in json.loads(listing.stdout)] == [ids[1]]


def _exec_with_fault(tmp: Path, doctor: bool = True, **popen: Any) -> tuple[list[Any], str]:
    """An `exec` on the faulty history in `tmp/h`: its frames (the run whole, one warning),
    and what the warning and (with `doctor`) `doctor` said."""
    done = subprocess.run(
        [*CLI, "exec", "--config", "c.toml", "--json", "--", "sh", "-c", "echo one; echo two"],
        check=False, cwd=tmp, env={**ENV, "XDG_STATE_HOME": str(tmp / "state")},
        capture_output=True, text=True, timeout=60, **popen,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert [f["text"] for f in frames if f["type"] == "stdout"] == ["one", "two"]
    assert frames[-1]["type"] == "end" and frames[-1]["exitCode"] == 0
    warned = [f for f in frames if f["type"] == "warning" and NOT_KEPT in f["message"]]
    assert len(warned) == 1, frames
    assert frames[0]["type"] == "start" and "mcpx-hooks doctor" in warned[0]["message"]
    said = _doctor(tmp) if doctor else ""
    return frames, warned[0]["message"] + "\n" + said


def _doctor(tmp: Path) -> str:
    """`doctor`'s line on the history (the config as the user's file: doctor discovers it)."""
    (tmp / "home").mkdir(exist_ok=True)
    (tmp / "home" / ".config" / "mcpx-hooks").mkdir(parents=True, exist_ok=True)
    (tmp / "home" / ".config" / "mcpx-hooks" / "config.toml").write_text(
        (tmp / "c.toml").read_text()
    )
    done = subprocess.run(
        [*CLI, "doctor"],
        check=False, cwd=tmp, capture_output=True, text=True, timeout=60,
        env={**ENV, "MCPX_HOOKS_NO_DISCOVERY": "0", "HOME": str(tmp / "home"),
             "XDG_CONFIG_HOME": str(tmp / "home" / ".config"), "MCPX_HOOKS_TRUST": ""},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("run history:"))
    assert done.returncode == 1, done.stdout
    return line


def test_doctor_checks_the_history_a_config_names(tmp_path: Path) -> None:
    # `serve --config c.toml` keeps its runs where c.toml says: `doctor --config c.toml`
    # checks that one (it read the default's only, and had no --config).
    config(tmp_path)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "history.db").write_bytes(b"not a database, " * 1000)
    done = mcpx("doctor", "--config", "c.toml", cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("run history:"))
    assert str(tmp_path / "h" / "history.db") in line and "NOT KEPT" in line, line
    assert done.returncode == 1


def test_a_corrupt_history_never_stops_a_run(tmp_path: Path) -> None:
    config(tmp_path)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "history.db").write_bytes(b"not a database, " * 1000)
    _, said = _exec_with_fault(tmp_path)
    assert said.count("file is not a database") == 2, said
    assert (tmp_path / "h" / "history.db").read_bytes() == b"not a database, " * 1000


def test_serve_says_once_at_its_start_that_its_history_is_not_kept(tmp_path: Path) -> None:
    # It said nothing until a run came, and then only in the run's own frames.
    config(tmp_path)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "history.db").write_bytes(b"not a database, " * 1000)
    server = start_server(tmp_path, "--config", "c.toml", auth=False)
    try:
        said = (
            f"mcpx-hooks serve: {NOT_KEPT} (opening the run history {tmp_path}/h/history.db:"
            " file is not a database); runs are kept in memory only (mcpx-hooks doctor says"
            " more)"
        )
        assert server.log().splitlines() == [said]  # by the time it listens
        request = {"argv": ["true"], "sandbox": "workspace"}
        frames = [json.loads(line) for line in arun(lines_of(server, "/v1/exec", request))]
        assert [f["type"] for f in frames if NOT_KEPT in f.get("message", "")] == ["warning"]
    finally:
        assert server.stop() == 0
    assert server.log().count(NOT_KEPT) == 1, server.log()


def test_a_locked_history_never_stops_a_run(tmp_path: Path) -> None:
    config(tmp_path)
    assert mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path).returncode == 0
    holder = sqlite3.connect(tmp_path / "h" / "history.db", isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        _, said = _exec_with_fault(tmp_path)
    finally:
        holder.close()
    assert said.count("database is locked") == 2, said


def test_a_run_that_ended_before_the_history_failed_is_said_not_kept(tmp_path: Path) -> None:
    # Locked to writes only (in WAL, reads go on): the history opens, and the fault comes
    # when the writer gives up waiting (2 s), after the short run has ended; it can take no
    # `warning` then: `exec` says it on stderr, and nothing of the run is stored.
    config(tmp_path)
    assert mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path).returncode == 0
    holder = sqlite3.connect(tmp_path / "h" / "history.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        done = mcpx("exec", "--config", "c.toml", "--json", "--", "echo", "short", cwd=tmp_path)
    finally:
        holder.close()
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[0])["runId"]
    assert f"mcpx-hooks exec: {NOT_KEPT} (" in done.stderr and "database is locked" in done.stderr
    listed = mcpx("runs", "list", "--config", "c.toml", "--json", cwd=tmp_path)
    assert run_id not in listed.stdout and len(json.loads(listed.stdout)) == 1


#: Another process holding the history's write lock for `argv[2]` seconds (the situation
#: itself: a large write, retention dropping large runs, a search indexing).
HOLD = """import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


def test_a_lock_another_process_holds_for_a_while_is_waited_out(tmp_path: Path) -> None:
    # A lock held past the 2 s a write waits for it (here 3.5 s) made the writer give the
    # history up: the run was not kept, and a `serve` recorded nothing more for its life.
    # Now the same lines are written again once it is free.
    config(tmp_path)
    assert mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path).returncode == 0
    db = str(tmp_path / "h" / "history.db")
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, db, "3.5"], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        done = mcpx("exec", "--config", "c.toml", "--json", "--", "echo", "short", cwd=tmp_path)
        assert holder.wait(timeout=30) == 0
    assert done.returncode == 0, done.stderr
    assert NOT_KEPT not in done.stdout + done.stderr
    run_id = json.loads(done.stdout.splitlines()[0])["runId"]
    listed = mcpx("runs", "list", "--config", "c.toml", "--json", cwd=tmp_path)
    assert next(r["runId"] for r in json.loads(listed.stdout)) == run_id


def _mount(where: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "h"
    yield where
    subprocess.run(["umount", str(where)], capture_output=True, check=False)


def test_a_read_only_history_never_stops_a_run(tmp_path: Path, mounted: Path) -> None:
    config(tmp_path)
    if os.geteuid() == 0:
        _mount(mounted, "size=1m,mode=0700")
        assert mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mounted)], check=True)
        why = "Read-only file system"
    else:  # the directory, read-only to its owner
        mounted.mkdir(mode=0o500)
        why = "not writable"
    _, said = _exec_with_fault(tmp_path)
    assert why in said or "readonly" in said, said


def test_a_full_disk_never_stops_a_run(tmp_path: Path, mounted: Path) -> None:
    config(tmp_path)
    _mount(mounted, "size=64k,mode=0700")
    with pytest.raises(OSError), (mounted / "filler").open("wb") as filler:
        while True:
            filler.write(b"x" * 4096)
            filler.flush()
    _, said = _exec_with_fault(tmp_path)
    assert "full" in said, said


def test_doctor_weighs_a_small_disks_room_against_what_the_history_needs(
    tmp_path: Path, mounted: Path
) -> None:
    """A 1 MiB tmpfs is not full, but a history kept open (`serve`) needs room for its
    write-ahead log (1000 pages of 4 KiB before they are copied back): doctor says both
    numbers. On 16 MiB it finds nothing to say."""
    config(tmp_path)
    _mount(mounted, "size=1m,mode=0700")
    assert mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path).returncode == 0
    done = mcpx("doctor", "--config", "c.toml", cwd=tmp_path)
    line = next(x for x in done.stdout.splitlines() if x.startswith("run history:"))
    assert line.startswith(f"run history: {mounted / 'history.db'}: TOO LITTLE ROOM: its disk")
    assert " KiB free (of 1 MiB), and the history needs about 3.9 MiB there: its" in line
    assert "full (" not in line and done.returncode == 1, line
    subprocess.run(["mount", "-o", "remount,size=16m", str(mounted)], check=True)
    done = mcpx("doctor", "--config", "c.toml", cwd=tmp_path)
    assert f"run history: {mounted / 'history.db'}\n" in done.stdout, done.stdout


def test_a_file_size_limit_never_stops_a_run(tmp_path: Path) -> None:
    """A full disk without root: the writer's process may not grow a file past 4 KiB."""
    config(tmp_path)
    limit = 4096

    def small() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    # (doctor, with no such limit, finds nothing wrong: the limit is the process's own.)
    _, said = _exec_with_fault(tmp_path, doctor=False, preexec_fn=small)
    assert "a write failed: is the disk full?" in said, said


async def test_an_mcp_session_is_a_stored_run(tmp_path: Path, marker: Marker) -> None:
    """`mcp` records each session as a run: `runs show` reads its calls after it closed."""
    from mcpface_parts import call_hook, stdio_session, through_mcpx, write_config

    where = tmp_path / marker
    config = write_config(where, marker, [call_hook("note", "suffix", {"advise": "seen"})])
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        await session.call_tool("words__shout", {"text": "hi"})
    state = {"XDG_STATE_HOME": str(where / "state")}
    listing = mcpx("runs", "list", "--json", cwd=where, **state)
    (run,) = json.loads(listing.stdout)
    assert run["argv"] == ["mcp", "test-agent"] and run["status"] == "result", run
    shown = mcpx("runs", "show", run["runId"], "--json", cwd=where, **state)
    frames = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [f["type"] for f in frames if f["type"] in ("start", "call", "result", "end")] == [
        "start", "call", "result", "end"
    ]  # fmt: skip
    assert [f["name"] for f in frames if f["type"] == "hook"] == ["note"]


def test_no_sandboxed_run_reads_the_history_even_in_its_workspace(tmp_path: Path) -> None:
    config(tmp_path)  # the history under the run's own working directory
    first = mcpx("exec", "--config", "c.toml", "--", "echo", "a secret line", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    for path in (tmp_path / "h", *(tmp_path / "h").rglob("*")):  # the sandbox keeps it out,
        path.chmod(0o777 if path.is_dir() else 0o666)  # not the mode bits
    probe = "cat h/history.db > /dev/null && echo READ; ls h/artifacts 2>/dev/null && echo LISTED"
    done = mcpx(
        "exec", "--config", "c.toml", "--json", "--sandbox", "workspace", "--",
        "sh", "-c", f"{probe}; echo done", cwd=tmp_path,
    )  # fmt: skip
    texts = [json.loads(line).get("text") for line in done.stdout.splitlines()]
    assert "done" in texts and "READ" not in texts and "LISTED" not in texts, texts


def test_runs_show_says_when_a_stored_run_has_not_ended(tmp_path: Path) -> None:
    """A run still running (in another process sharing the history) is shown as far as it
    is stored, and stderr says it has not ended: a view that stops is not read as an end."""
    from mcpx_hooks.supervisor.history.store import History, Written

    done = mcpx("exec", "--json", "--", "sh", "-c", "echo one; echo two", cwd=tmp_path)
    sent = [line.encode() for line in done.stdout.splitlines()]
    history = History.open(tmp_path / "state" / "mcpx-hooks" / "history.db")
    try:
        summary = {"runId": "r1", "argv": ["sh"], "status": "running"}
        history.write([Written("r1", 0, sent[:2], summary, 1.0, False)])
    finally:
        history.close()
    for flags in ((), ("--json",)):
        shown = mcpx("runs", "show", "r1", *flags, cwd=tmp_path)
        assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 2, shown  # start, one
        assert shown.stderr == (
            "mcpx-hooks runs show: run r1 has not ended: these are its frames stored so far"
            " (runs show RUN_ID --remote URL follows it on the server that runs it)\n"
        ), shown
    ended = mcpx("runs", "show", json.loads(sent[0])["runId"], cwd=tmp_path)
    assert ended.returncode == 0 and ended.stderr == "", ended


def test_a_run_whose_supervisor_was_killed_lists_its_duration_as_unknown(tmp_path: Path) -> None:
    """A run stored as far as its killed process got (2.5 s of frames): the next `exec`
    ends it, and it lists with its duration unknown, not as the span of its frames, which
    `runs show` gives as the least it ran."""
    from mcpx_hooks.supervisor.history.store import OWNER_MARK, History, Written

    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    start = (
        b'{"runId":"k1","seq":0,"at":"2026-12-05T05:00:00.000Z","type":"start","argv":["job"],'
        b'"cwd":"/","sandbox":"none"}'
    )
    out = b'{"runId":"k1","seq":1,"at":"2026-12-05T05:00:02.500Z","text":"x","type":"stdout"}'
    history = History.open(tmp_path / "state" / "mcpx-hooks" / "history.db")
    try:
        summary = {"runId": "k1", "argv": ["job"], "status": "running"}
        owner = {OWNER_MARK + "k1": int(gone.stdout)}  # (its pid, its process gone)
        kept = [Written("k1", 0, [start, out], summary, time.time() - 60, False)]
        history.write(kept, marks=owner)
    finally:
        history.close()
    assert mcpx("exec", "--", "true", cwd=tmp_path).returncode == 0  # it ends the run
    listed = mcpx("runs", "list", cwd=tmp_path).stdout.splitlines()
    assert listed[-1] == "k1  2026-12-05T05:00:00.000Z  error  exit -  duration unknown  job"
    shown = mcpx("runs", "show", "k1", cwd=tmp_path).stdout.splitlines()
    assert shown[-2].endswith("; it ran for at least 2500 ms (start to last frame)"), shown
    assert shown[-1] == "end: failed, exec exits 1, duration unknown", shown


def test_a_run_whose_supervisor_was_killed_never_lists_as_running(tmp_path: Path) -> None:
    """Before any process writes the history again (which ends the run there), `runs list`
    read a run whose process is gone as `running` (for ever, with no `serve` or `exec`
    after it; for a second or two after a restart): it lists as the next writer will store
    it, and `runs show` says no server runs it any more."""
    from mcpx_hooks.supervisor.history.store import OWNER_MARK, History, Written
    from mcpx_hooks.supervisor.run.interrupted import owner_token

    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    start = (
        b'{"runId":"k1","seq":0,"at":"2026-12-05T05:00:00.000Z","type":"start","argv":["job"],'
        b'"cwd":"/","sandbox":"none"}'
    )
    out = b'{"runId":"k1","seq":1,"at":"2026-12-05T05:00:02.500Z","text":"x","type":"stdout"}'
    mine = start.replace(b"k1", b"m1").replace(b"job", b"mine")
    db = tmp_path / "state" / "mcpx-hooks" / "history.db"
    history = History.open(db)
    try:
        owners = {OWNER_MARK + "k1": int(gone.stdout), OWNER_MARK + "m1": owner_token()}
        kept = [
            Written("k1", 0, [start, out], {"runId": "k1", "argv": ["job"], "status": "running"},
                    time.time() - 60, False),
            Written("m1", 0, [mine], {"runId": "m1", "argv": ["mine"], "status": "running"},
                    time.time() - 30, False),
        ]  # fmt: skip
        history.write(kept, marks=owners)
    finally:
        history.close()
    listed = mcpx("runs", "list", cwd=tmp_path).stdout.splitlines()
    assert listed[-1] == "k1  2026-12-05T05:00:00.000Z  error  exit -  duration unknown  job"
    assert listed[0] == "m1  -  running  exit -  -  mine"  # (its process, this one, runs it)
    as_json = json.loads(mcpx("runs", "list", "--json", cwd=tmp_path).stdout)
    assert [r["status"] for r in as_json] == ["running", "error"], as_json
    shown = mcpx("runs", "show", "k1", cwd=tmp_path)
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 2, shown
    assert shown.stderr == (
        "mcpx-hooks runs show: run k1 has not ended, and the process that ran it is gone"
        " (killed, or its machine went down): these are its frames stored so far; the next"
        " mcpx-hooks that writes this run history (a serve, an exec) ends it there\n"
    ), shown
    # So does a server's list (GET /v1/runs, the console's) while its seal is under way.
    from mcpx_hooks.supervisor.run.journals import Journals

    reader = History.open(db, writes=False)
    try:
        listed_by_server = Journals(256, history=reader).summaries()
    finally:
        reader.close()
    assert [(r["runId"], r["status"]) for r in listed_by_server] == [
        ("m1", "running"), ("k1", "error")
    ], listed_by_server  # fmt: skip
    con = sqlite3.connect(db)  # (read only: the history is as it was)
    try:
        assert con.execute("SELECT count(*) FROM runs WHERE finished").fetchone() == (0,)
    finally:
        con.close()


def test_runs_verify_catches_a_changed_byte_and_says_where(tmp_path: Path) -> None:
    done = mcpx("exec", "--json", "--", "sh", "-c", "echo one; echo two", cwd=tmp_path)
    sent = done.stdout.splitlines()
    end = json.loads(sent[-1])
    assert end["type"] == "end" and len(end["chain"]) == 64
    run_id = end["runId"]
    download = tmp_path / "run.ndjson"
    download.write_text(done.stdout)
    intact = mcpx("runs", "verify", str(download), cwd=tmp_path)
    assert intact.returncode == 0 and "intact (5 frames" in intact.stdout, intact
    stored = mcpx("runs", "verify", run_id, cwd=tmp_path)
    assert stored.returncode == 0 and f"run {run_id}: intact" in stored.stdout, stored
    download.write_text(done.stdout.replace('"two"', '"twO"'))
    changed = mcpx("runs", "verify", str(download), cwd=tmp_path)
    assert changed.returncode == 1, changed
    assert "CHANGED: frame seq 2 (line 3) differs from the stored run" in changed.stdout
    # Changed in the history itself: the chain of its end frame no longer matches.
    db = sqlite3.connect(tmp_path / "state" / "mcpx-hooks" / "history.db")
    with db:
        for first, packed, data in db.execute("SELECT first, packed, data FROM chunks").fetchall():
            text = zlib.decompress(data) if packed else data
            db.execute(
                "UPDATE chunks SET packed = 0, data = ? WHERE first = ?",
                (text.replace(b'"two"', b'"twO"'), first),
            )
    db.close()
    again = mcpx("runs", "verify", run_id, cwd=tmp_path)
    assert again.returncode == 1 and "CHANGED: the frames do not give the chain" in again.stdout
    gone = mcpx("runs", "verify", "no-such-run", cwd=tmp_path)
    assert gone.returncode == 1 and "neither a file nor a run" in gone.stderr
    # A pipe is a file too: `runs show --json ID | runs verify /dev/stdin`.
    piped = subprocess.run(
        [*CLI, "runs", "verify", "/dev/stdin"],
        input=done.stdout.encode(), cwd=tmp_path, capture_output=True, check=False, timeout=60,
        env={**ENV, "XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert piped.returncode == 0 and b"/dev/stdin: intact (5 frames" in piped.stdout, piped
    # The reference's table for the command says what its 1 means.
    from mcpx_hooks.supervisor.cli.common import COMMAND_EXIT_CODES

    assert [code for code, _ in COMMAND_EXIT_CODES["runs verify"]] == [1]
    # A file nested past Python's recursion, first line or later: not frames, said so.
    deep = tmp_path / "deep.ndjson"
    for lines in (["[" * 100_000], [sent[0], "[" * 100_000]):
        deep.write_text("\n".join(lines) + "\n")
        nested = mcpx("runs", "verify", str(deep), cwd=tmp_path)
        assert nested.returncode == 1 and "Traceback" not in nested.stderr, nested
        assert "is not a JSON frame" in nested.stdout, nested


def test_runs_verify_reads_no_more_than_the_history_keeps(tmp_path: Path) -> None:
    """`runs verify /dev/zero` (a line that never ends) held all it read: 3 GB in 7 s, and on.
    A file is read up to `[history] retainBytes`, and one longer is refused, named on one line
    as every file name is (`$'…'` for one with a line break)."""
    (tmp_path / "c.toml").write_text("[history]\nretainBytes = 100000\n")
    endless = mcpx("runs", "verify", "/dev/zero", "--config", "c.toml", cwd=tmp_path)
    assert endless.returncode == 1, endless
    assert endless.stderr == (
        "mcpx-hooks runs verify: /dev/zero: over 100000 bytes, more than the run history keeps"
        " in all ([history] retainBytes): not a run's frames; not read further\n"
    )
    odd = tmp_path / "a\nb.ndjson"
    odd.write_text("[" * 100_001)
    long = mcpx("runs", "verify", str(odd), "--config", "c.toml", cwd=tmp_path)
    assert long.returncode == 1 and long.stderr.startswith(
        f"mcpx-hooks runs verify: $'{tmp_path}/a\\nb.ndjson': over 100000 bytes"
    ), long
    odd.write_text("[" * 100_000)  # (as much as is kept: read, and not frames)
    kept = mcpx("runs", "verify", str(odd), "--config", "c.toml", cwd=tmp_path)
    assert kept.stdout == f"$'{tmp_path}/a\\nb.ndjson': CHANGED: line 1 is not a JSON frame\n"


def test_runs_list_and_show_name_the_history_on_one_line(tmp_path: Path) -> None:
    """The history's path (under an XDG_STATE_HOME holding ESC and a line break) went to the
    terminal raw from `runs list` and `runs show`: the ESC obeyed, the line cut."""
    state = tmp_path / "h\x1b[2J\nx"
    listed = mcpx("runs", "list", cwd=tmp_path, XDG_STATE_HOME=str(state))
    shown = f"$'{state}/mcpx-hooks/history.db'".replace("\x1b", "\\x1b").replace("\n", "\\n")
    assert listed.stdout == f"no runs are kept in the run history {shown}\n", listed
    assert mcpx("exec", "--", "true", cwd=tmp_path, XDG_STATE_HOME=str(state)).returncode == 0
    gone = mcpx("runs", "show", "nope", cwd=tmp_path, XDG_STATE_HOME=str(state))
    assert (
        gone.stderr == f"mcpx-hooks runs show: no run 'nope' is kept in the run history {shown}\n"
    )


def test_an_empty_history_file_holds_no_runs(tmp_path: Path) -> None:
    # A first run on a full disk leaves history.db empty (SQLite could not write its schema);
    # `runs list` then said "reading the run history: no such table: runs" (exit 1).
    db = tmp_path / "state" / "mcpx-hooks" / "history.db"
    db.parent.mkdir(parents=True)
    db.touch(mode=0o600)
    listed = mcpx("runs", "list", cwd=tmp_path)
    assert (listed.returncode, listed.stderr) == (0, ""), listed
    assert listed.stdout == f"no runs are kept in the run history {db}\n"
    assert mcpx("runs", "list", "--json", cwd=tmp_path).stdout == "[]\n"
    shown = mcpx("runs", "show", "0123456789abcdef", cwd=tmp_path)
    assert shown.returncode == 1 and "no run has been recorded there" in shown.stderr, shown
    ran = mcpx("exec", "--sandbox", "none", "--", "true", cwd=tmp_path)  # (room again: kept)
    assert ran.returncode == 0 and "not being kept" not in ran.stderr, ran
    assert len(json.loads(mcpx("runs", "list", "--json", cwd=tmp_path).stdout)) == 1


def test_a_server_records_its_runs_while_it_seals_a_killed_one(tmp_path: Path) -> None:
    """A server that starts after one was killed ends the killed runs in the history. It
    did so first, its writer waiting (about 2 s for a run of 400,000 lines, indexing them
    all for search under the write lock); a run started meanwhile was stored only after,
    and a second kill then (a crash loop) lost it from the history whole, not its last
    50 ms. Its lines are stored now while the killed run is still being sealed."""
    from mcpx_hooks.supervisor.history.store import OWNER_MARK, History, Written

    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    path = tmp_path / "state" / "mcpx-hooks" / "history.db"
    history = History.open(path)
    try:
        summary = {"runId": "k1", "argv": ["job"], "status": "running"}
        owner = {OWNER_MARK + "k1": int(gone.stdout)}  # (its pid, its process gone)
        for first in range(0, 400_000, 100_000):
            lines = [
                b'{"runId":"k1","seq":%d,"at":"2026-12-05T05:00:00.000Z","type":"%s"%s}'
                % (seq, b"stdout" if seq else b"start", b',"text":"x"' if seq else b"")
                for seq in range(first, first + 100_000)
            ]
            kept = Written("k1", first, lines, summary, time.time() - 60, False)
            history.write([kept], index=0, marks=owner)
    finally:
        history.close()
    server = start_server(tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "state")})

    async def started() -> str:
        ws = await open_ws(server, "/v1/exec")
        request = {"argv": ["sh", "-c", "echo one; sleep 60"], "cancelOnDisconnect": True}
        await ws.send(json.dumps(request))
        async for message in ws:
            frames = [json.loads(line) for line in message.splitlines()]
            if any(f.get("text") == "one" for f in frames):
                await ws.close()
                return str(frames[0]["runId"])
        raise AssertionError("the run ended")

    try:
        run_id = arun(started())
        reader = History.open(path, writes=False)
        try:
            deadline = time.monotonic() + 30
            while not (stored := {s["runId"]: s["status"] for s in reader.summaries(8)}).get(
                run_id
            ):
                assert time.monotonic() < deadline, stored
                time.sleep(0.01)
        finally:
            reader.close()
        assert stored["k1"] == "running", stored  # (stored before the killed run was sealed)
    finally:
        assert server.stop() == 0
