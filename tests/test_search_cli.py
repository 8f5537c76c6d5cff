"""Search with real processes: `exec` records a 100,000-line run and `runs search` finds its
line at its seq; a real `serve` answers `GET /v1/search` only with the token, and `runs search
--remote` reads it; hostile queries on both are text, never an error."""

from __future__ import annotations

import http.client
import json
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from service_client import CLI, ENV, Server, arun, open_ws, start_server

NEEDLE_AT = 61_234
# The line is made by the script, so that its argv (searched too) does not hold it.
SCRIPT = (
    "import sys\nneedle = 'build step needle-' + str(40 + 2) + ' done'\n"
    f"sys.stdout.write(''.join((needle if i == {NEEDLE_AT} else f'line {{i}}') + '\\n'"
    " for i in range(100_000)))\n"
)


@pytest.fixture(autouse=True)
def _readable(readable_tmp: Path) -> None:
    """Each test's directory is the runs' cwd: open to a sandboxed hook's own user."""


def mcpx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env={**ENV, "XDG_STATE_HOME": str(cwd / "state")},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_runs_search_finds_a_line_in_a_100000_line_run(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[runs]\nrunBytes = 1073741824\n\n[history]\n")
    done = mcpx(
        "exec", "--config", "c.toml", "--json", "--", sys.executable, "-c", SCRIPT, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    sent = done.stdout.splitlines()
    run_id = json.loads(sent[0])["runId"]
    assert len(sent) > 100_000
    found = mcpx("runs", "search", "needle-42", "--config", "c.toml", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    (match,) = json.loads(found.stdout)
    assert match["runId"] == run_id and match["type"] == "stdout"
    assert match["snippet"] == "build step needle-42 done"
    # The seq is the frame that holds the line, as the run sent it.
    assert json.loads(sent[match["seq"]])["text"] == "build step needle-42 done"
    shown = mcpx("runs", "search", '"needle-42 done"', "--config", "c.toml", cwd=tmp_path)
    assert shown.stdout.strip() == (f"{run_id}@{match['seq']}  stdout  build step needle-42 done")
    # The argv is searched too; the limit bounds what is shown.
    argv = mcpx(
        "runs", "search", "sys", "--limit", "1", "--config", "c.toml", "--json", cwd=tmp_path
    )
    assert [m["seq"] for m in json.loads(argv.stdout)] == [0]
    for typed in ('"', "OR", "NEAR(", "*", ":", "needle-42 AND", "-"):
        odd = mcpx("runs", "search", typed, "--config", "c.toml", "--json", cwd=tmp_path)
        assert odd.returncode == 0, (typed, odd.stderr)
        assert isinstance(json.loads(odd.stdout), list)
    none = mcpx("runs", "search", "absent-word", "--config", "c.toml", cwd=tmp_path)
    assert none.returncode == 0 and none.stdout.strip() == "no stored frame matches"
    bad = mcpx("runs", "search", "x", "--limit", "0", "--config", "c.toml", cwd=tmp_path)
    assert bad.returncode == 2 and "--limit" in bad.stderr and "Traceback" not in bad.stderr


def test_a_disk_that_takes_no_write_still_searches_what_is_indexed(tmp_path: Path) -> None:
    """The search first indexes what ended processes left behind; when the disk takes no
    more writes (full: here a file size limit), it searches what is indexed already and
    says that the rest is not, rather than failing every search."""
    (tmp_path / "c.toml").write_text(f'[history]\npath = "{tmp_path / "h" / "history.db"}"\n')
    first = mcpx("exec", "--config", "c.toml", "--", "echo", "needle-1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert mcpx("runs", "search", "needle", "--config", "c.toml", cwd=tmp_path).returncode == 0
    lagging = mcpx("exec", "--config", "c.toml", "--", "sh", "-c", "seq 1 20000", cwd=tmp_path)
    assert lagging.returncode == 0, lagging.stderr
    db = sqlite3.connect(tmp_path / "h" / "history.db")
    with db:  # (as an ended `exec` leaves a long run: its lines not indexed yet)
        db.execute("UPDATE runs SET indexed = 0 WHERE frames > 20000")
    db.close()

    def small() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    done = subprocess.run(
        [*CLI, "runs", "search", "needle-1", "--config", "c.toml", "--json"],
        check=False, cwd=tmp_path, env={**ENV, "XDG_STATE_HOME": str(tmp_path / "state")},
        capture_output=True, text=True, timeout=120, preexec_fn=small,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [m["snippet"] for m in json.loads(done.stdout)] == ["needle-1", "echo needle-1"]
    assert "indexing the run history: " in done.stderr and "a write failed" in done.stderr
    assert "searched what was indexed before" in done.stderr and "Traceback" not in done.stderr


def test_a_disk_too_full_for_the_index_of_shared_memory_still_reads_the_runs(
    tmp_path: Path,
) -> None:
    """A disk so full that SQLite cannot make the history's `-shm` file (here a file size
    limit of 4 KiB): `runs list`, `runs show` and `runs search` failed with "opening the run
    history …: disk I/O error", every stored run out of reach until room was made; they read
    the history as it is, and the search says what it could not index."""
    (tmp_path / "c.toml").write_text(f'[history]\npath = "{tmp_path / "h" / "history.db"}"\n')
    ran = mcpx("exec", "--config", "c.toml", "--json", "--", "echo", "needle-7", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout.splitlines()[0])["runId"]
    db = sqlite3.connect(tmp_path / "h" / "history.db")
    with db:  # (marked as an ended `exec` leaves a long run: its lines not indexed yet)
        db.execute("UPDATE runs SET indexed = 0")
    db.close()

    def full() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    def read(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args, "--config", "c.toml"],
            check=False, cwd=tmp_path, env={**ENV, "XDG_STATE_HOME": str(tmp_path / "state")},
            capture_output=True, text=True, timeout=60, preexec_fn=full,
        )  # fmt: skip

    listed = read("runs", "list")
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
    shown = read("runs", "show", run_id)
    assert shown.returncode == 0 and "| needle-7" in shown.stdout, shown.stderr
    found = read("runs", "search", "needle-7")
    assert found.returncode == 0 and f"{run_id}@1  stdout  needle-7" in found.stdout, found
    assert "a write failed: is the disk full?" in found.stderr, found.stderr
    assert "searched what was indexed before" in found.stderr, found.stderr
    assert "Traceback" not in listed.stderr + shown.stderr + found.stderr


def get(server: Server, target: str, token: bool = True) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", target, headers=server.headers() if token else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


async def exec_run(server: Server, argv: list[str]) -> list[dict[str, object]]:
    async with open_ws(server, "/v1/exec") as ws:
        await ws.send(json.dumps({"argv": argv, "sandbox": "workspace"}))
        frames = []
        async for text in ws:
            frames += [json.loads(line) for line in str(text).splitlines()]
        return frames


def test_v1_search_on_a_real_serve_needs_the_token(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(f'[history]\npath = "{tmp_path / "h.db"}"\n')
    server = start_server(tmp_path, "--config", "c.toml", env={"XDG_STATE_HOME": str(tmp_path)})
    try:
        first = arun(exec_run(server, ["sh", "-c", "echo alpha one; echo other"]))
        second = arun(exec_run(server, ["sh", "-c", "echo alpha two"]))
        ids = [first[0]["runId"], second[0]["runId"]]
        # The writer commits within its batch time: a search waits for what the runs have
        # sent to be stored, so it finds their lines at once, "however soon they came".
        target = "/v1/search?q=alpha"
        status, body = get(server, target, token=False)
        assert status == 401 and b"alpha" not in body
        status, body = get(server, target)
        found = json.loads(body)
        # Newest run first, a run's later frames first: each run's line, then its argv.
        assert [(m["runId"], m["type"]) for m in found] == [
            (ids[1], "stdout"),
            (ids[1], "start"),
            (ids[0], "stdout"),
            (ids[0], "start"),
        ]
        assert [m["snippet"] for m in found][::2] == ["alpha two", "alpha one"]
        assert found[1]["seq"] == found[3]["seq"] == 0
        by_seq = {f["seq"]: f for f in first}
        assert by_seq[found[2]["seq"]]["text"] == "alpha one"
        status, body = get(server, f"/v1/search?q=alpha&run={ids[0]}&limit=1")
        assert status == 200 and json.loads(body) == [found[2]]
        for typed in ('"', 'alpha "', "OR", "NEAR", "*", ":", "\x00", "a" * 5000):
            status, body = get(server, f"/v1/search?q={quote(typed)}")
            assert status == 200 and isinstance(json.loads(body), list), typed
        status, body = get(server, "/v1/search?q=alpha&limit=nope")
        assert status == 400 and b"limit" in body
        for typo in ("qq=alpha", "q=alpha&limt=1"):  # a typo is said, never searched around
            status, body = get(server, f"/v1/search?{typo}")
            name = typo.split("&")[-1].split("=")[0]
            assert status == 400, (typo, body)
            assert json.loads(body)["message"].startswith(f"unknown query parameter {name!r}")
        # `runs search --remote` asks the server with its token file.
        url = f"ws://127.0.0.1:{server.port}"
        token = ["--token-file", str(tmp_path / "token")]
        remote = mcpx("runs", "search", "alpha", "--remote", url, *token, "--json", cwd=tmp_path)
        assert remote.returncode == 0, remote.stderr
        assert json.loads(remote.stdout) == found
        shown = mcpx("runs", "search", "alpha two", "--remote", url, *token, cwd=tmp_path)
        assert shown.stdout.splitlines()[0].split("  ")[0] == f"{ids[1]}@{found[0]['seq']}"
        refused = mcpx("runs", "search", "alpha", "--remote", url, cwd=tmp_path)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()


@pytest.mark.parametrize("typed", ["", "   ", "\t\n"])
def test_runs_search_of_nothing_is_a_usage_error(tmp_path: Path, typed: str) -> None:
    """`runs search ""` answered "no stored frame matches", as if the history had been
    searched for something; it asks for nothing, and says so (exit 2, nothing on stdout),
    locally and before any server is asked."""
    for where in ([], ["--remote", "ws://127.0.0.1:9"]):
        for json_flag in ([], ["--json"]):
            said = mcpx("runs", "search", typed, *where, *json_flag, cwd=tmp_path)
            assert said.returncode == 2, said
            assert said.stdout == ""
            assert said.stderr == (
                'mcpx-hooks runs search: nothing to search for: give words or "quoted phrases"'
                " to find\n"
            )
    # Punctuation alone is text, as ever: it matches nothing, and is not an error.
    assert mcpx("runs", "search", "*", cwd=tmp_path).stdout == "no stored frame matches\n"


def test_runs_search_in_a_run_not_kept_says_so(tmp_path: Path) -> None:
    """`runs search WORD --run MISTYPED` answered "no stored frame matches" (exit 0), as if the
    run had been searched and held no such word; it names no run kept, and says so as `runs
    show` does (exit 1), whether the history exists yet or not."""
    db = tmp_path / "state" / "mcpx-hooks" / "history.db"
    for _ in range(2):
        said = mcpx("runs", "search", "hello", "--run", "0123456789abcdef", cwd=tmp_path)
        assert (said.returncode, said.stdout) == (1, "")
        assert said.stderr == (
            f"mcpx-hooks runs search: no run '0123456789abcdef' is kept in the run history {db}\n"
        )
        ran = mcpx("exec", "--json", "--", "/bin/echo", "hello", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout.splitlines()[0])["runId"]
    # A run kept, with no match or with one: no error.
    kept = mcpx("runs", "search", "absent", "--run", run_id, cwd=tmp_path)
    assert (kept.returncode, kept.stdout) == (0, "no stored frame matches\n")
    found = mcpx("runs", "search", "hello", "--run", run_id, "--json", cwd=tmp_path)
    assert found.returncode == 0 and [m["runId"] for m in json.loads(found.stdout)] == [run_id] * 2


# Printed by the script (its argv holds `print(…)`, never the lines themselves).
PRINTED = (
    "import sys\nout = sys.stdout\n"
    "def main():\n"
    "    out.write('two ' + ' spaces' + chr(9) + 'a tab  then   more' + chr(10))\n"
    "    out.write(chr(27) + '[31mred ' + ' word' + chr(27) + '[0m' + chr(10))\n"
    "    out.write('x' * 60000 + ' far ' + 'word' + ' y' + chr(10))\n"
    "main()\n"
)


def test_a_snippet_is_the_line_as_printed_and_a_command_line_as_runs_list_shows_it(
    tmp_path: Path,
) -> None:
    """A snippet keeps a line's spaces and tabs (it squeezed them into one space each), its
    colour codes left out; a 60,000-character line is cut around the match with `…`; the
    argv's snippet is the command line `runs list` shows, quoted (it was its words, unquoted,
    on one line)."""
    (tmp_path / "c.toml").write_text("[history]\n")
    done = mcpx("exec", "--config", "c.toml", "--json", "--", sys.executable, "-c", PRINTED,
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[0])["runId"]

    def found(typed: str) -> list[dict[str, object]]:
        got = mcpx("runs", "search", typed, "--config", "c.toml", "--json", cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        return [m for m in json.loads(got.stdout) if m["seq"] != 0]

    assert [m["snippet"] for m in found("spaces")] == ["two  spaces\ta tab  then   more"]
    assert [m["snippet"] for m in found('"red word"')] == ["red  word"]
    (far,) = found("far")
    assert isinstance(snip := far["snippet"], str)
    assert snip.startswith("…x") and snip.endswith("x far word y") and len(snip) <= 162
    # The CLI prints the tab as a tab, as `runs show` does; the spaces as they are.
    shown = mcpx("runs", "search", "tab", "--config", "c.toml", cwd=tmp_path)
    assert f"{run_id}@1  stdout  two  spaces\ta tab  then   more" in shown.stdout.splitlines()
    listed = mcpx("runs", "list", "--config", "c.toml", cwd=tmp_path).stdout.strip()
    command = listed.split("  ", 5)[-1]  # (its id, start, status, exit, duration, command)
    argv = mcpx("runs", "search", "main", "--config", "c.toml", "--json", cwd=tmp_path)
    (start,) = json.loads(argv.stdout)
    # (cut around the match where the command line is longer than a snippet: where it
    # begins depends on how long the interpreter's path is)
    assert start["seq"] == 0 and "main" in start["snippet"] and len(start["snippet"]) <= 162
    assert start["snippet"].strip("…") in command and "$'import sys\\nout" in command
    again = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, text=True, check=True
    )
    assert again.stdout.split("\0")[:-1] == [sys.executable, "-c", PRINTED]


def test_a_word_after_a_line_break_in_an_argument_is_found(tmp_path: Path) -> None:
    """An argument's words after a line break or a tab are found (the index held the argv's
    JSON, where `x=1\\nzebra` is one word `nzebra`: `runs search zebra` found nothing)."""
    (tmp_path / "c.toml").write_text("[history]\n")
    code = "x = 1\nzebra_words = 2\ny = 3;\tcolumn_after_tab = 4\n"
    done = mcpx("exec", "--config", "c.toml", "--json", "--", sys.executable, "-c", code,
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for typed in ("zebra", "column", '"zebra words"', "x"):
        got = mcpx("runs", "search", typed, "--config", "c.toml", "--json", cwd=tmp_path)
        assert [m["seq"] for m in json.loads(got.stdout)] == [0], (typed, got.stdout)


def test_a_query_that_begins_with_a_dash_is_given_after_two_dashes(tmp_path: Path) -> None:
    """`runs search -x` said only "the following arguments are required: QUERY": `-x` was
    taken for an option, and nothing said how to give it as text. It says so now, and
    `runs search -- -x` searches for it."""
    said = mcpx("runs", "search", "-x", cwd=tmp_path)
    assert said.returncode == 2 and said.stdout == ""
    assert said.stderr.splitlines()[-1] == (
        "mcpx-hooks runs search: error: the following arguments are required: QUERY; -x is no"
        " option of runs search: to give it as text, put -- before it"
        " (mcpx-hooks runs search -- -x)"
    )
    searched = mcpx("runs", "search", "--", "-x", cwd=tmp_path)
    assert searched.returncode in (0, 1) and "Traceback" not in searched.stderr, searched


LONG = (
    "import sys\n"
    "sys.stdout.write('short line before' + chr(10))\n"
    "sys.stdout.write('a' * 65530 + ' first ' + 'b' * 70000 + ' second end' + chr(10))\n"
    "sys.stderr.write('an error meanwhile' + chr(10))\n"
    "sys.stdout.write('short line after' + chr(10))\n"
)


def test_a_match_in_a_piece_of_a_line_over_64_kib_says_which_frames_hold_the_line(
    tmp_path: Path,
) -> None:
    """A script's line over 64 KiB is stored as several frames, each indexed alone: a match
    in one showed only that piece, as if it were a line of its own (its snippet ending at the
    cut with no `…`), and nothing said it was part of a longer line. Now the match carries
    `line` (its first and last pieces' seqs, which piece it is, of how many) and the CLI
    says so; a short line's match has none."""
    (tmp_path / "c.toml").write_text("[history]\n")
    done = mcpx("exec", "--config", "c.toml", "--json", "--", sys.executable, "-c", LONG,
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line) for line in done.stdout.splitlines()]
    run_id = sent[0]["runId"]
    pieces = [f["seq"] for f in sent if f["type"] == "stdout" and len(f["text"]) > 1000]
    assert len(pieces) == 3

    def found(typed: str) -> dict[str, object]:
        got = mcpx("runs", "search", typed, "--config", "c.toml", "--json", cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        (match,) = [m for m in json.loads(got.stdout) if m["seq"] != 0]
        return dict(match)

    line = {"from": pieces[0], "to": pieces[-1], "pieces": 3}
    first = found("first")
    assert first["seq"] == pieces[0] and first["line"] == {**line, "piece": 1}
    assert isinstance(snip := first["snippet"], str) and snip.endswith("a first…")
    last = found('"second end"')
    assert last["seq"] == pieces[2] and last["line"] == {**line, "piece": 3}
    assert isinstance(snip := last["snippet"], str)
    assert snip.startswith("…b") and snip.endswith("b second end")
    assert "line" not in found('"short line after"')
    assert "line" not in found("meanwhile")
    # Joined, the frames the match names are the line as written.
    joined = "".join(
        f["text"] for f in sent if f["type"] == "stdout" and pieces[0] <= f["seq"] <= pieces[-1]
    )
    assert joined == "a" * 65530 + " first " + "b" * 70000 + " second end"
    shown = mcpx("runs", "search", "second", "--config", "c.toml", cwd=tmp_path)
    (printed,) = [s for s in shown.stdout.splitlines() if not s.startswith(f"{run_id}@0 ")]
    assert printed.startswith(f"{run_id}@{pieces[2]}  stdout  …b")
    assert printed.endswith(
        f"b second end  [piece 3 of 3 of a line over 64 KiB: the stdout frames {pieces[0]}"
        f" to {pieces[2]} joined]"
    )
