"""A run's downloads, `GET /v1/runs/{runId}/output.txt` and `/frames.ndjson`: every line the
run kept (not what a console drew), the same from a live run's journal and, after a restart,
from the run history; the token asked for as on every `/v1` path; a clear 404 for a run that
is not kept. A real `serve` and real runs; the pure parts (`downloads.py`) on their own."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sys
from pathlib import Path

import orjson
import pytest
from service_client import Server, arun, restarted_with_a_big_run, run_remote, start_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mcpx_hooks.supervisor.core.chain import check
from mcpx_hooks.supervisor.core.frames import EndFrame, FrameType, ResultFrame, StartFrame, blank
from mcpx_hooks.supervisor.history.store import CHUNK_LINES, DB_NAME, History, Written
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.storedrun import RunGone, StoredRun
from mcpx_hooks.supervisor.service import downloads

SCRIPT = """import sys, json
for i in range(3):
    print(f'\\x1b[32mout {i}\\x1b[0m')
print('to stderr', file=sys.stderr)
"""


def get(server: Server, path: str, token: bool = True) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", path, headers=server.headers() if token else {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def raw_lines(server: Server, run_id: str) -> list[bytes]:
    lines: list[bytes] = []
    url = f"{server.url}/v1/runs/{run_id}?from=0"
    ws = connect(url, additional_headers=server.headers(), proxy=None, max_size=None)
    with ws, contextlib.suppress(ConnectionClosed):
        while True:
            lines += str(ws.recv(timeout=30)).encode().split(b"\n")
    return lines


def test_downloads_are_whole_live_and_after_a_restart(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # the script's sandbox reads its working directory as another user
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    server = start_server(tmp_path, env=env)
    try:
        stream = arun(run_remote(server, {"argv": [sys.executable, "-c", SCRIPT]}))
        run_id = stream.frames[0]["runId"]
        status, headers, text = get(server, f"/v1/runs/{run_id}/output.txt")
        assert status == 200
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["Cache-Control"] == "no-store"
        assert headers["Content-Disposition"] == f'attachment; filename="run-{run_id}-output.txt"'
        # The script's lines as it wrote them, colour codes and all, stderr among them.
        want = [f"\x1b[32mout {i}\x1b[0m" for i in range(3)]
        assert sorted(text.decode().split("\n")) == sorted([*want, "to stderr", ""])
        said = [f["text"] for f in stream.frames if f["type"] in ("stdout", "stderr")]
        assert text.decode().split("\n") == [*said, ""]  # in the frames' order
        status, headers, ndjson = get(server, f"/v1/runs/{run_id}/frames.ndjson")
        assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
        live = raw_lines(server, run_id)
        assert ndjson.split(b"\n") == [*live, b""]
        assert [json.loads(x)["seq"] for x in live] == list(range(len(live)))
        # The token, as on every /v1 path; a run not kept: 404, said.
        assert get(server, f"/v1/runs/{run_id}/output.txt", token=False)[0] == 401
        status, _, body = get(server, "/v1/runs/0000000000000000/frames.ndjson")
        assert status == 404 and b"is kept here to download" in body
    finally:
        assert server.stop() == 0
    # Another server on the same history: the same bytes, from the store.
    again = start_server(tmp_path, env=env)
    try:
        assert get(again, f"/v1/runs/{run_id}/frames.ndjson")[2] == ndjson
        assert get(again, f"/v1/runs/{run_id}/output.txt")[2] == text
    finally:
        assert again.stop() == 0
    assert "Traceback" not in again.log()


def test_output_lines_of_each_output_frame_and_nothing_else() -> None:
    frames = [
        {"type": "start", "seq": 0, "argv": ["x"]},
        {"type": "stdout", "seq": 1, "text": "plain"},
        {"type": "log", "seq": 2, "level": "info", "message": "two\nlines", "attrs": {"k": 1}},
        {"type": "emit", "seq": 3, "value": {"a": [1, 2]}},
        {"type": "stderr", "seq": 4, "text": ""},
        {"type": "hook", "seq": 5, "name": "h"},
        {"type": "log", "seq": 6, "level": "warn", "message": "bare"},
        {"type": "end", "seq": 7},
    ]
    lines = [orjson.dumps(f) for f in frames]
    text = b"".join(downloads.download("output.txt", [lines])).decode()
    assert text == 'plain\n[info] two\nlines {"k":1}\n{"a":[1,2]}\n\n[warn] bare\n'
    ndjson = b"".join(downloads.download("frames.ndjson", [lines]))
    assert ndjson == b"".join(line + b"\n" for line in lines)
    # Many lines: in pieces of a bounded number of lines, none lost.
    many = [orjson.dumps({"type": "stdout", "seq": i, "text": str(i)}) for i in range(10_000)]
    pieces = list(downloads.download("output.txt", downloads.in_pieces(many)))
    assert len(pieces) == 3
    assert b"".join(pieces).decode().split("\n") == [*map(str, range(10_000)), ""]
    assert list(downloads.download("frames.ndjson", [])) == []


def test_a_piece_of_a_download_is_bounded_in_bytes_not_only_in_lines() -> None:
    # A client that reads slowly holds its download's piece in the server: 4,096 lines of a
    # run that printed lines of 60 KB made a piece of the whole run (54 MB for 900 of them,
    # and its chunk's copy), and ten slow downloads grew the server by 1.3 GB.
    line = orjson.dumps({"type": "stdout", "seq": 1, "text": "y" * 60_000})
    lines = [line] * 900
    for kind in downloads.KINDS:
        pieces = list(downloads.download(kind, downloads.in_pieces(lines)))
        assert max(map(len, pieces)) <= downloads.PIECE_BYTES + len(line) + 1, kind
        whole = b"".join(pieces)
        assert whole == b"".join(downloads.download(kind, [[li] for li in lines])), kind
    # A batch as the history gives it is cut the same way; a line longer than a piece is a
    # piece by itself.
    huge = orjson.dumps({"type": "stdout", "seq": 2, "text": "z" * (downloads.PIECE_BYTES * 2)})
    pieces = list(downloads.download("frames.ndjson", [[line] * 10 + [huge, line]]))
    assert [len(p) for p in pieces][-2:] == [len(huge) + 1, len(line) + 1]
    assert max(len(p) for p in pieces[:-2]) <= downloads.PIECE_BYTES


def test_a_stored_run_is_read_a_chunk_at_a_time_and_sealed_as_restored(tmp_path: Path) -> None:
    # A run only the history holds is read for its download one stored chunk at a time,
    # never whole; one stored without its `end` ends as `RunJournal.restored` ends it, and
    # its lines verify.
    history = History.open(tmp_path / "h.db")
    try:
        for run_id, finished in (("done", True), ("open", False)):
            j = RunJournal(run_id)
            j.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
            j.offer_output(FrameType.STDOUT, [f"line {i}\n" for i in range(3 * CHUNK_LINES)])
            if finished:
                j.append(blank(ResultFrame, value=None))
                j.append(blank(EndFrame, exit_code=0, duration_ms=1))
            history.write([Written(run_id, 0, list(j.lines), j.summary(), 1.0, finished)])
            batches = list(StoredRun(history, run_id).batches())
            read = [line for batch in batches for line in batch]
            assert max(map(len, batches)) <= CHUNK_LINES and len(batches) >= 3
            whole = RunJournal.restored(run_id, *(history.lines(run_id) or ([], False))).lines
            assert read[: len(j.lines)] == j.lines and check(read) is None
            types = [orjson.loads(line)["type"] for line in read[len(j.lines) :]]
            assert types == ([] if finished else ["error", "end"])
            assert [orjson.loads(x)["seq"] for x in read] == list(range(len(whole)))
        # A run dropped from the history while it is read: the rest is a fault, not an end.
        batches = StoredRun(history, "done").batches()
        next(batches)
        history.drop(["done"])
        with pytest.raises(RunGone):
            list(batches)
    finally:
        history.close()


def test_a_download_is_sent_as_it_is_read_from_the_history(tmp_path: Path) -> None:
    # A client that holds a download of a stored run holds the server to what is in flight,
    # not to the run made whole: the run dropped from the history meanwhile, the rest of the
    # download is not there to send, and the client sees it cut short (chunked, no end).
    again, run_id, _ = restarted_with_a_big_run(tmp_path)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", again.port, timeout=30)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)
        conn.request("GET", f"/v1/runs/{run_id}/frames.ndjson", headers=again.headers())
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
        first = response.read(1 << 16)
        assert first.startswith(b'{"runId":')
        history = History.open(tmp_path / "state" / DB_NAME)
        try:
            history.drop([run_id])
        finally:
            history.close()
        with pytest.raises(http.client.IncompleteRead):
            response.read()
        conn.close()
        # A run in memory is sent chunked as well, whole.
        stream = arun(run_remote(again, {"argv": [sys.executable, "-c", SCRIPT]}))
        status, headers, _ = get(again, f"/v1/runs/{stream.frames[0]['runId']}/output.txt")
        assert status == 200 and headers["Transfer-Encoding"] == "chunked"
    finally:
        assert again.stop() == 0
    assert "Traceback" not in again.log()


def test_a_download_s_file_name_is_safe() -> None:
    assert downloads.filename('a"b/../c', "output.txt") == (
        b'attachment; filename="run-abc-output.txt"'
    )
