"""Following a run that only the run history holds (`/v1/runs/{id}?from=N` after a restart):
its frames come as they were sent, from any `from`, read from the history a stored chunk at a
time as they are sent, never restored whole, so a server holds one chunk per follower however
big the run. A real `serve` and a stock WebSocket client; `StoredRun.batches(start)` and
`length` on their own."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import orjson
from service_client import Server, restarted_with_a_big_run, start_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from mcpx_hooks.supervisor.core.chain import check
from mcpx_hooks.supervisor.core.frames import EndFrame, FrameType, ResultFrame, StartFrame, blank
from mcpx_hooks.supervisor.history.store import (
    CHUNK_BYTES,
    CHUNK_LINES,
    DB_NAME,
    History,
    Written,
)
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.storedrun import StoredRun

LINES = 2 * CHUNK_LINES + 100


def _store(history: History, run_id: str, finished: bool, outcome: bool = True) -> list[bytes]:
    """A run of `LINES` output lines written to `history` as a recorder writes it (without its
    `end`, and its outcome unless `outcome`, when not `finished`); its lines."""
    j = RunJournal(run_id)
    j.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
    j.offer_output(FrameType.STDOUT, [f"line {i}\n" for i in range(LINES)])
    if finished or outcome:
        j.append(blank(ResultFrame, value=None))
    if finished:
        j.append(blank(EndFrame, exit_code=0, duration_ms=1))
    history.write([Written(run_id, 0, list(j.lines), j.summary(), time.time(), finished)])
    return list(j.lines)


def test_a_stored_run_is_read_from_any_seq(tmp_path: Path) -> None:
    history = History.open(tmp_path / "h.db")
    try:
        stored_lines = {
            "done": _store(history, "done", True),
            "open": _store(history, "open", False),
            "bare": _store(history, "bare", False, outcome=False),
        }
        for run_id in ("done", "open", "bare"):
            stored = StoredRun(history, run_id)
            whole = [line for batch in stored.batches() for line in batch]
            assert check(whole) is None
            assert stored.length() == len(whole)
            edges = (1, 2, CHUNK_LINES - 1, CHUNK_LINES, CHUNK_LINES + 1, len(whole) - 1)
            for start in (*edges, len(whole), len(whole) + 1):
                batches = list(stored.batches(start))
                assert all(0 < len(b) <= CHUNK_LINES for b in batches)
                read = [line for b in batches for line in b]
                assert _unstamped(read) == _unstamped(whole[start:]), (run_id, start)
            # What `from` is checked against: what is stored, or, for a run still to be sealed
            # with fewer lines stored than asked for, all a reader would get.
            assert stored.length(enough=5) == len(stored_lines[run_id])
    finally:
        history.close()


def _follow(server: Server, run_id: str, start: int, **options: int) -> ClientConnection:
    url = f"{server.url}/v1/runs/{run_id}?from={start}"
    return connect(url, additional_headers=server.headers(), proxy=None, **options)


def _read(ws: ClientConnection) -> tuple[list[bytes], int | None, str]:
    """Every line of every message to the close: the lines, the close code and reason."""
    lines: list[bytes] = []
    with ws, contextlib.suppress(ConnectionClosed):
        while True:
            lines += str(ws.recv(timeout=30)).encode().split(b"\n")
    return lines, ws.close_code, ws.close_reason or ""


def _unstamped(lines: list[bytes]) -> list[bytes]:
    """The lines with a seal's made at read time taken to its type and seq (its `at`, and the
    chain and message that cover it, are of the time it is read)."""

    def unstamped(x: bytes) -> bytes:
        frame = orjson.loads(x)
        return orjson.dumps([frame["type"], frame["seq"]])

    return [unstamped(x) if b'"type":"end"' in x or b'"type":"error"' in x else x for x in lines]


def test_a_stored_run_is_followed_from_any_seq_after_a_restart(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    history = History.open(tmp_path / "state" / DB_NAME)
    try:
        sent = {"done": _store(history, "done", True), "open": _store(history, "open", False)}
        sealed = [line for batch in StoredRun(history, "open").batches() for line in batch]
    finally:
        history.close()
    server = start_server(tmp_path, env=env)
    try:
        done = sent["done"]
        for start in (0, CHUNK_LINES + 7, len(done) - 1):
            assert _read(_follow(server, "done", start)) == (done[start:], 1000, "complete")
        lines, code, _ = _read(_follow(server, "done", len(done)))  # caught up: nothing
        assert (lines, code) == ([], 1000)
        lines, code, _ = _read(_follow(server, "done", len(done) + 1))
        assert (len(lines), code) == (1, 4416)
        assert (
            f"it has {len(done)}; from may be 0..{len(done)}" in orjson.loads(lines[0])["message"]
        )
        # A run stored without its end (its supervisor killed) is sealed as it is read: an
        # `end` whose chain covers every line, from any seq, the seal's own too.
        assert len(sealed) == len(sent["open"]) + 1
        assert orjson.loads(sealed[-1])["type"] == "end" and check(sealed) is None
        for start in (0, CHUNK_LINES, len(sealed) - 1):
            lines, code, _ = _read(_follow(server, "open", start))
            assert (_unstamped(lines), code) == (_unstamped(sealed[start:]), 1000)
        lines, code, _ = _read(_follow(server, "open", len(sealed) + 1))
        assert (code, f"it has {len(sealed)};" in orjson.loads(lines[0])["message"]) == (4416, True)
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_a_stored_run_is_followed_as_it_is_read_from_the_history(tmp_path: Path) -> None:
    # A follower of a stored run holds the server to a chunk in flight, not to the run made
    # whole: the run dropped from the history meanwhile, the rest is not there to send, and
    # the follower is told so (1011) rather than given an `end`.
    again, run_id, sent = restarted_with_a_big_run(tmp_path)
    try:
        sock = socket.create_connection(("127.0.0.1", again.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        url = f"{again.url}/v1/runs/{run_id}?from=0"
        with connect(
            url, sock=sock, additional_headers=again.headers(), proxy=None, max_queue=1
        ) as ws:
            first = str(ws.recv(timeout=30)).encode().split(b"\n")
            assert orjson.loads(first[0])["type"] == "start"
            history = History.open(tmp_path / "state" / DB_NAME)
            try:
                history.drop([run_id])
            finally:
                history.close()
            lines, code, reason = _read(ws)
        assert code == 1011 and "dropped from the history meanwhile" in reason
        assert len(first) + len(lines) < sent
        assert b'"type":"end"' not in b"".join(lines)
    finally:
        assert again.stop() == 0
    assert "Traceback" not in again.log()


def test_a_stored_chunk_is_bounded_in_bytes(tmp_path: Path) -> None:
    # A reader of a stored run (a follower, a download) holds one chunk at a time: 4,096
    # lines of 60 KB were one chunk of the run's whole 54 MB, for each slow reader.
    history = History.open(tmp_path / "h.db")
    try:
        j = RunJournal("long")
        j.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
        j.offer_output(FrameType.STDOUT, [f"{i:05} {'x' * 60_000}\n" for i in range(100)])
        j.append(blank(ResultFrame, value=None))
        j.append(blank(EndFrame, exit_code=0, duration_ms=1))
        history.write([Written("long", 0, list(j.lines), j.summary(), time.time(), True)])
        batches = list(StoredRun(history, "long").batches())
        assert [line for b in batches for line in b] == list(j.lines)
        assert len(batches) > 1
        assert all(sum(len(x) + 1 for x in b) <= CHUNK_BYTES for b in batches)
    finally:
        history.close()
