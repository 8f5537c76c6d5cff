"""Artifacts and the run list against a real `mcpx-hooks serve` and real `exec` processes:
`GET /v1/runs`, `GET /v1/runs/{runId}/artifacts/{id}` (its bytes, its mime, HEAD, the
token, no way out of the store), the budget and `[runs] retain` over HTTP, `exec --artifacts
DIR` in process and with `--remote`, `runs list` and `runs show`, exit code by exit code."""

from __future__ import annotations

import hashlib
import http.client
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_client import CLI, ENV, Server, arun, run_remote, served, start_server

from mcpx_hooks.supervisor.core.order import check_order

WRITE = (
    'mkdir -p "$MCPX_ARTIFACTS_DIR/sub"; printf "<b>hi</b>" > "$MCPX_ARTIFACTS_DIR/page.html";'
    ' printf report > "$MCPX_ARTIFACTS_DIR/sub/report.txt"; echo done'
)


def mcpx(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def get(
    server: Server, path: str, method: str = "GET", token: bool = True
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=server.headers() if token else {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from served(tmp_path_factory.mktemp("serve"))


def _run(server: Server, script: str) -> list[dict[str, Any]]:
    stream = arun(run_remote(server, {"argv": ["sh", "-c", script], "sandbox": "workspace"}))
    assert stream.code == 1000, stream
    return stream.frames


def test_an_artifact_is_served_with_its_mime_by_id(server: Server) -> None:
    frames = _run(server, WRITE)
    run_id = frames[0]["runId"]
    artifacts = {f["name"]: f for f in frames if f["type"] == "artifact"}
    assert set(artifacts) == {"page.html", "sub/report.txt"}
    page = artifacts["page.html"]
    status, headers, body = get(server, f"/v1/runs/{run_id}/artifacts/{page['id']}")
    assert (status, body) == (200, b"<b>hi</b>")
    assert hashlib.sha256(body).hexdigest() == page["sha256"]
    assert headers["Content-Type"] == "text/html" == page["mime"]
    # Its own origin's page, but never run as one: no script of it can use the token.
    assert headers["Content-Security-Policy"] == "sandbox; frame-ancestors 'none'"
    assert headers["X-Content-Type-Options"] == "nosniff"
    report = artifacts["sub/report.txt"]
    status, headers, body = get(server, f"/v1/runs/{run_id}/artifacts/{report['id']}", "HEAD")
    assert (status, headers["Content-Length"], body) == (200, "6", b"")
    assert get(server, f"/v1/runs/{run_id}/artifacts/{report['id']}", token=False)[0] == 401


def test_a_sandboxed_run_s_symlinks_and_fifos_are_named_not_framed(server: Server) -> None:
    # Under a sandbox the directory is a tmpfs copied back: its other entries were dropped
    # from the copy without a word, where the same run under `none` is told of them.
    script = 'cd "$MCPX_ARTIFACTS_DIR" && ln -s /etc/passwd link && mkfifo ff && echo a > r.txt'
    frames = _run(server, script)
    assert [f["name"] for f in frames if f["type"] == "artifact"] == ["r.txt"]
    (warned,) = [f["message"] for f in frames if f["type"] == "warning"]
    assert warned.endswith("are not artifacts: ff, link"), warned


def test_an_artifact_named_in_no_encoding_is_kept_and_the_server_goes_on(tmp_path: Path) -> None:
    # A name of bytes that are not UTF-8 (a script's to choose): framed as text (U+FFFD),
    # and stored so; it took the whole server down when the history wrote it, a second on.
    own = start_server(tmp_path)
    try:
        script = 'printf x > "$MCPX_ARTIFACTS_DIR/$(printf "bad\\377name")"'
        frames = _run(own, script)
        (artifact,) = [f for f in frames if f["type"] == "artifact"]
        assert artifact["name"] == "bad\ufffdname"
        assert _run(own, "true")[-1]["type"] == "end"  # it serves on
    finally:
        assert own.stop() == 0  # (its history written: what a stop waits for)
    assert "Traceback" not in own.log() and "failed" not in own.log(), own.log()
    shown = mcpx("runs", "show", frames[0]["runId"], cwd=tmp_path)
    assert "bad\ufffdname" in shown.stdout, shown


@pytest.mark.parametrize(
    "tail",
    ["..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "a9", "../a0", "a0/..", "page.html"],
)
def test_no_path_leaves_the_store(server: Server, tail: str) -> None:
    run_id = _run(server, WRITE)[0]["runId"]
    status, headers, body = get(server, f"/v1/runs/{run_id}/artifacts/{tail}")
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["code"] == 404
    assert b"root:" not in body


def test_the_run_list_is_the_retained_runs_newest_first(server: Server) -> None:
    first = _run(server, "exit 3")[0]["runId"]
    second = _run(server, "echo ok")[0]["runId"]
    status, headers, body = get(server, "/v1/runs")
    assert status == 200 and headers["Content-Type"] == "application/json"
    runs = json.loads(body)
    ids = [r["runId"] for r in runs]
    assert ids.index(second) < ids.index(first)
    listed = {r["runId"]: r for r in runs}
    assert listed[first]["status"] == "error" and listed[first]["exitCode"] == 3
    assert listed[second]["status"] == "result" and listed[second]["exitCode"] == 0
    assert set(listed[first]) == {
        "runId",
        "argv",
        "argvCut",
        "cwd",
        "startedAt",
        "status",
        "exitCode",
        "durationMs",
        "refused",
        "failed",
    }
    assert listed[first]["refused"] == [] and listed[first]["failed"] == []
    assert listed[first]["argv"] == ["sh", "-c", "exit 3"]
    assert listed[first]["cwd"] == str(server.cwd)
    assert isinstance(listed[first]["durationMs"], int)
    assert get(server, "/v1/runs", token=False)[0] == 401


def test_runs_list_and_show_through_the_cli(server: Server) -> None:
    run_id = _run(server, "echo shown")[0]["runId"]
    token = server.token or ""
    listed = mcpx("runs", "list", "--remote", server.url, "--json", cwd=server.cwd,
                  MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert run_id in [r["runId"] for r in json.loads(listed.stdout)]
    readable = mcpx("runs", "list", "--remote", server.url, cwd=server.cwd, MCPX_HOOKS_TOKEN=token)
    assert readable.returncode == 0 and run_id in readable.stdout
    assert "None" not in readable.stdout
    shown = mcpx("runs", "show", run_id, "--remote", server.url, "--json", cwd=server.cwd,
                 MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    frames = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [f["seq"] for f in frames] == list(range(len(frames)))
    assert frames[-1]["type"] == "end" and {"type": "stdout"}.items() <= frames[1].items()
    view = mcpx("runs", "show", run_id, "--remote", server.url, cwd=server.cwd,
                MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert view.returncode == 0 and "shown" in view.stdout
    unknown = mcpx("runs", "show", "nope", "--remote", server.url, cwd=server.cwd,
                   MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert unknown.returncode == 1 and "no run 'nope' is retained" in unknown.stderr
    refused = mcpx("runs", "list", "--remote", server.url, cwd=server.cwd, MCPX_HOOKS_TOKEN="x")
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    for out in (listed, readable, shown, view, unknown, refused):
        assert "Traceback" not in out.stderr


def test_runs_show_remote_json_prints_the_lines_as_sent(server: Server, tmp_path: Path) -> None:
    """`runs show --remote --json` prints each frame's line as the server sent and stored it
    (compact, its key order, UTF-8): the same bytes as `frames.ndjson`, so `runs verify` of
    the file finds the chain its `end` frame holds."""
    run_id = _run(server, "printf 'caf\\303\\251 \\033[1mbold\\n'")[0]["runId"]
    token = server.token or ""
    shown = mcpx("runs", "show", run_id, "--remote", server.url, "--json", cwd=server.cwd,
                 MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    status, _, sent = get(server, f"/v1/runs/{run_id}/frames.ndjson")
    assert status == 200 and "café".encode() in sent
    assert shown.stdout.encode() == sent
    saved = tmp_path / "run.ndjson"
    saved.write_text(shown.stdout)
    verified = mcpx("runs", "verify", str(saved), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "intact" in verified.stdout


def test_exec_remote_copies_the_artifacts_out(server: Server, tmp_path: Path) -> None:
    token = server.token or ""
    out = tmp_path / "out"
    done = mcpx("exec", "--remote", server.url, "--artifacts", str(out), "--", "sh", "-c", WRITE,
                cwd=server.cwd, MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "page.html").read_bytes() == b"<b>hi</b>"
    assert (out / "sub" / "report.txt").read_text() == "report"
    assert "2 artifact(s) copied" in done.stderr
    failed = mcpx("exec", "--remote", server.url, "--artifacts", str(out), "--", "sh", "-c",
                  WRITE + "; exit 4", cwd=server.cwd, MCPX_HOOKS_TOKEN=token)  # fmt: skip
    assert failed.returncode == 4  # the script's own code, artifacts copied all the same
    assert "2 artifact(s) copied" in failed.stderr


def test_exec_copies_the_artifacts_out_in_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = mcpx("exec", "--artifacts", str(out), "--", "sh", "-c", WRITE, cwd=tmp_path,
                TMPDIR=str(temp))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list(temp.iterdir()) == []  # the run's store went with exec
    assert (out / "page.html").read_bytes() == b"<b>hi</b>"
    assert (out / "sub" / "report.txt").read_text() == "report"
    none = mcpx("exec", "--artifacts", str(out), "--", "true", cwd=tmp_path)
    assert none.returncode == 0 and "copied" not in none.stderr
    (tmp_path / "file").write_text("")
    usage = mcpx("exec", "--artifacts", str(tmp_path / "file"), "--", "true", cwd=tmp_path)
    assert usage.returncode == 2 and "is not a directory" in usage.stderr
    assert usage.stdout == ""  # nothing ran
    # DIR is made before the run, artifacts or none; one that cannot be is said before it.
    made = mcpx("exec", "--artifacts", str(tmp_path / "made"), "--", "true", cwd=tmp_path)
    assert made.returncode == 0 and (tmp_path / "made").is_dir(), made.stderr
    under = mcpx("exec", "--artifacts", str(tmp_path / "file" / "d"), "--", "true", cwd=tmp_path)
    assert (under.returncode, under.stdout) == (2, "")
    assert under.stderr == (
        f"mcpx-hooks exec: --artifacts {tmp_path}/file/d: cannot make it: Not a directory\n"
    )


def test_the_budget_drops_the_oldest_runs_artifacts_and_says_so(tmp_path: Path) -> None:
    # The memory's budgets alone: with a history, a run forgotten from memory keeps its
    # artifacts on disk (tests/test_history.py).
    (tmp_path / "c.toml").write_text(
        "[runs]\nartifactBytes = 100\nretain = 2\n[history]\nenabled = false\n"
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    srv = start_server(tmp_path, "--config", "c.toml", env={"TMPDIR": str(temp)})
    try:
        write = 'head -c 60 /dev/zero > "$MCPX_ARTIFACTS_DIR/blob"'
        old = _run(srv, write)
        new = _run(srv, write)
        check_order(new)  # a warning may stand anywhere after start
        (warning,) = [f for f in new if f["type"] == "warning"]
        assert old[0]["runId"] in warning["message"]
        assert "[runs] artifactBytes (100 bytes)" in warning["message"]
        status, _, body = get(srv, f"/v1/runs/{old[0]['runId']}/artifacts/a0")
        assert status == 404 and b"dropped to keep" in body
        assert get(srv, f"/v1/runs/{new[0]['runId']}/artifacts/a0")[0] == 200
        too_big = _run(srv, 'head -c 101 /dev/zero > "$MCPX_ARTIFACTS_DIR/big"')
        assert any("is not kept" in f.get("message", "") for f in too_big)
        assert [f["size"] for f in too_big if f["type"] == "artifact"] == [101]
        _run(srv, "true")  # retain = 2: the second run is forgotten, its artifact with it
        status, _, body = get(srv, f"/v1/runs/{new[0]['runId']}/artifacts/a0")
        assert status == 404 and b"is retained" in body
        assert len(json.loads(get(srv, "/v1/runs")[2])) == 2
        (store,) = temp.glob("mcpx-hooks-artifacts-*")  # on disk, in the temporary directory
        # The forgotten run's file went with it; the 101 bytes were never kept.
        assert list(store.iterdir()) == []
    finally:
        assert srv.stop() == 0
    assert list(temp.iterdir()) == []  # removed when the server stops
    assert "Traceback" not in srv.log()


def test_a_large_artifact_comes_whole_in_pieces(server: Server) -> None:
    # Over ten of the server's read pieces: what arrives is the file, byte for byte.
    frames = _run(server, 'head -c 3000000 /dev/urandom > "$MCPX_ARTIFACTS_DIR/blob.bin"')
    (blob,) = [f for f in frames if f["type"] == "artifact"]
    status, headers, body = get(server, f"/v1/runs/{blob['runId']}/artifacts/{blob['id']}")
    assert (status, headers["Content-Type"], len(body)) == (
        200,
        "application/octet-stream",
        blob["size"],
    )
    assert hashlib.sha256(body).hexdigest() == blob["sha256"]


def test_exec_exits_1_when_a_result_s_artifacts_could_not_all_be_copied(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[runs]\nartifactBytes = 0\n")
    out = tmp_path / "out"
    done = mcpx("exec", "--config", "c.toml", "--json", "--artifacts", str(out), "--", "sh",
                "-c", WRITE, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert frames[-2]["type"] == "result"  # the run itself succeeded
    assert [f["type"] for f in frames].count("warning") == 2  # each artifact not kept, said
    assert "--artifacts: page.html:" in done.stderr and "is not kept" in done.stderr
    assert "copied" not in done.stderr and not (out / "page.html").exists()
    failed = mcpx("exec", "--config", "c.toml", "--artifacts", str(out), "--", "sh", "-c",
                  WRITE + "; exit 5", cwd=tmp_path)  # fmt: skip
    assert failed.returncode == 5  # a failed run keeps its own code


def test_what_a_server_says_of_an_artifact_is_checked_before_it_is_kept(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import trio

    from mcpx_hooks.supervisor.cli.artifacts import copy_remote
    from mcpx_hooks.supervisor.service.remote import Remote

    frames = _run(server, WRITE)
    page, report = [f for f in frames if f["type"] == "artifact"]
    hostile = [
        {**page, "sha256": "0" * 64},  # not the bytes it serves
        {**report, "name": "../../escaped.txt"},  # a name out of the directory
        {**report, "id": "a7"},  # one the server does not have
    ]
    out = tmp_path / "out"
    assert trio.run(copy_remote, Remote(server.url, server.token), hostile, str(out)) is False
    said = capsys.readouterr().err
    assert "page.html: 9 bytes with sha256" in said and "not what its frame says" in said
    assert "'../../escaped.txt': not a plain relative name" in said
    assert "HTTP 404" in said and "no artifact 'a7'" in said
    assert not (tmp_path / "escaped.txt").exists()
    assert not (out / "page.html").exists()  # never kept unverified under its name
