"""Artifacts kept with their run, without a server: the store's budget (older runs' artifacts
dropped first, each drop said in a `warning`), its removal of a forgotten run's files, what
is not a regular file, the routes that serve them, and the names `exec --artifacts` refuses
to write. (A real `serve` and real `exec` processes: tests/test_artifacts_served.py.)"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.cli.artifacts import target
from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import EndFrame, ErrorFrame, StartFrame, blank
from mcpx_hooks.supervisor.run.artifacts import ArtifactGone, ArtifactStore
from mcpx_hooks.supervisor.run.journals import Journals
from mcpx_hooks.supervisor.service.protocolevents import Request
from mcpx_hooks.supervisor.service.routes import Answer, FileAnswer, answer, match

AUTH = ((b"authorization", b"Bearer t0k"),)
OWN = frozenset({"http://127.0.0.1:8765"})


def _dir(root: Path, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


def _wire(frames: list[object]) -> list[dict[str, object]]:
    return [to_json(f) for f in frames]  # type: ignore[arg-type]


@pytest.fixture
def store() -> ArtifactStore:
    s = ArtifactStore(100)
    yield s  # type: ignore[misc]
    s.close()


def test_each_regular_file_is_framed_and_kept(tmp_path: Path, store: ArtifactStore) -> None:
    source = _dir(tmp_path / "a", {"b.txt": b"bee", "sub/c.json": b"{}"})
    frames = _wire(store.keep("r1", source))
    assert [(f["id"], f["name"], f["mime"], f["size"]) for f in frames] == [
        ("a0", "b.txt", "text/plain", 3),
        ("a1", "sub/c.json", "application/json", 2),
    ]
    assert frames[0]["sha256"] == hashlib.sha256(b"bee").hexdigest()
    kept = store.find("r1", "a0")
    assert Path(kept.path).read_bytes() == b"bee" and kept.mime == "text/plain"
    assert not kept.path.startswith(source)  # a copy: the scratch goes with the run
    assert store.held == 5


def test_past_the_budget_the_oldest_runs_artifacts_go_first_and_a_warning_says_so(
    tmp_path: Path, store: ArtifactStore
) -> None:
    store.keep("old", _dir(tmp_path / "1", {"x": b"x" * 40}))
    store.keep("mid", _dir(tmp_path / "2", {"y": b"y" * 40}))
    frames = _wire(store.keep("new", _dir(tmp_path / "3", {"z": b"z" * 40})))
    assert [f["type"] for f in frames] == ["artifact", "warning"]
    message = str(frames[1]["message"])
    assert "1 older run(s)" in message and "old (40 bytes)" in message
    assert "[runs] artifactBytes (100 bytes)" in message
    with pytest.raises(ArtifactGone, match="no longer kept: it was dropped to keep"):
        store.find("old", "a0")
    assert store.find("mid", "a0").size == 40 and store.find("new", "a0").size == 40
    assert store.held == 80


def test_an_artifact_that_cannot_fit_is_framed_not_kept_and_said(
    tmp_path: Path, store: ArtifactStore
) -> None:
    frames = _wire(store.keep("r", _dir(tmp_path, {"a": b"a" * 60, "b": b"b" * 60})))
    assert [f["type"] for f in frames] == ["artifact", "artifact", "warning"]
    assert frames[1]["size"] == 60 and frames[1]["sha256"] == hashlib.sha256(b"b" * 60).hexdigest()
    assert "artifact a1 (b, 60 bytes) of run r is not kept" in str(frames[2]["message"])
    with pytest.raises(ArtifactGone, match="is not kept"):
        store.find("r", "a1")
    assert store.held == 60  # never past the budget
    assert len(os.listdir(Path(store.find("r", "a0").path).parent)) == 1


def test_symlinks_and_other_entries_are_not_followed_and_are_said(
    tmp_path: Path, store: ArtifactStore
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("do not serve")
    source = tmp_path / "art"
    source.mkdir()
    (source / "link").symlink_to(secret)
    (source / "dirlink").symlink_to(tmp_path)
    os.mkfifo(source / "fifo")
    (source / "ok").write_text("ok")
    frames = _wire(store.keep("r", str(source)))
    assert [f.get("name") for f in frames if f["type"] == "artifact"] == ["ok"]
    (warning,) = [f for f in frames if f["type"] == "warning"]
    assert "3 entries" in str(warning["message"]) and "dirlink, fifo, link" in str(
        warning["message"]
    )
    # One is said as one ("1 entries … are not" read so).
    (source / "dirlink").unlink()
    (source / "fifo").unlink()
    (warning,) = [f for f in _wire(store.keep("r2", str(source))) if f["type"] == "warning"]
    assert warning["message"] == (
        "1 entry under the artifacts directory is not a regular file (a symlink, a device…)"
        " and is not an artifact: link"
    )


def test_a_forgotten_run_takes_its_artifacts_with_it(tmp_path: Path) -> None:
    store = ArtifactStore(1000)
    journals = Journals(1, artifacts=store)
    try:
        paths = []
        for run_id in ("r1", "r2"):
            journal = journals.open(run_id)
            journal.append(blank(StartFrame, argv=("true",), cwd="/", sandbox="none"))
            store.keep(run_id, _dir(tmp_path / run_id, {"f": b"data"}))
            paths.append(store.find(run_id, "a0").path)
            journal.append(blank(ErrorFrame, message="x"))
            journal.append(blank(EndFrame, exit_code=1, duration_ms=5))
        old, path = paths
        assert not os.path.exists(old) and os.path.exists(path)  # retain = 1
        assert store.held == 4
        with pytest.raises(ArtifactGone, match="no run 'r1' is retained"):
            journals.find_artifact("r1", "a0")
        assert journals.find_artifact("r2", "a0").path == path
        (summary,) = journals.summaries()
        assert summary == {
            "runId": "r2",
            "argv": ["true"],
            "argvCut": 0,
            "cwd": "/",
            "startedAt": summary["startedAt"],
            "status": "error",
            "exitCode": 1,
            "durationMs": 5,
            "refused": [],
            "failed": [],
        }
    finally:
        store.close()
    assert not os.path.exists(path)


def test_a_running_run_is_listed_as_running_newest_first() -> None:
    journals = Journals(10)
    for run_id in ("a", "b"):
        journals.open(run_id).append(blank(StartFrame, argv=("x",), cwd="/w", sandbox="none"))
    listed = journals.summaries()
    assert [r["runId"] for r in listed] == ["b", "a"]
    assert (listed[0]["status"], listed[0]["exitCode"], listed[0]["durationMs"]) == (
        "running",
        None,
        None,
    )


def _get(target: str, state: Journals, headers: tuple[tuple[bytes, bytes], ...] = AUTH) -> object:
    request = Request("GET", target, ((b"host", b"x"), *headers), websocket=False)
    return answer(request, token="t0k", origins=OWN, stopping=False, state=state)


@pytest.mark.parametrize(
    "target",
    [
        "/v1/runs/r/artifacts/..%2F..%2Fetc%2Fpasswd",
        "/v1/runs/r/artifacts/%2Fetc%2Fpasswd",
        "/v1/runs/..%2Fr/artifacts/a0",
        "/v1/runs/r/artifacts/a0%00",
        "/v1/runs/r/artifacts/../../../etc/passwd",
        "/v1/runs/r/artifacts/a0/..",
        "/v1/runs/r/artifacts/",
        "/v1/runs/r/artifacts/0",
    ],
)
def test_no_artifact_path_reaches_a_file_by_its_name(tmp_path: Path, target: str) -> None:
    store = ArtifactStore(1000)
    journals = Journals(10, artifacts=store)
    try:
        journals.open("r")
        store.keep("r", _dir(tmp_path, {"a.txt": b"kept"}))
        got = _get(target, journals)
        assert isinstance(got, Answer) and got.status == 404, got
        found = _get("/v1/runs/r/artifacts/a0", journals)
        assert isinstance(found, FileAnswer) and found.artifact.name == "a.txt"
        assert (b"Content-Security-Policy", b"sandbox; frame-ancestors 'none'") in found.headers
    finally:
        store.close()


def test_the_run_list_and_artifacts_ask_for_the_token() -> None:
    journals = Journals(10)
    for path in ("/v1/runs", "/v1/runs/r/artifacts/a0"):
        got = _get(path, journals, headers=())
        assert isinstance(got, Answer) and got.status == 401
    listed = _get("/v1/runs", journals)
    assert isinstance(listed, Answer) and (listed.status, json.loads(listed.body)) == (200, [])
    browser = _get("/v1/runs?token=t0k", journals, headers=())  # a browser's way to the token
    assert isinstance(browser, Answer) and browser.status == 200
    assert match("/v1/runs/a/artifacts/b%2Fc") is not None
    assert match("/v1/runs/a/artifacts/b/c") is None


@pytest.mark.parametrize(
    "name", ["../evil", "/etc/passwd", "a/../../b", "", "a//b", "./a", "a/.", "nul\0", 7]
)
def test_exec_copies_no_artifact_outside_its_directory(tmp_path: Path, name: object) -> None:
    assert target(str(tmp_path / "out"), name) is None


def test_exec_copies_through_no_symlink_in_its_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").symlink_to(tmp_path)
    assert target(str(out), "sub/x") is None
    assert target(str(out), "new/deeper/x") == str(out / "new" / "deeper" / "x")
    assert (out / "new" / "deeper").is_dir()


def test_a_store_left_by_a_killed_supervisor_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          check=True, capture_output=True, text=True)  # fmt: skip
    uid = os.getuid()
    orphan = tmp_path / f"mcpx-hooks-artifacts-{uid}-{gone.stdout.strip()}-x"
    alive = tmp_path / f"mcpx-hooks-artifacts-{uid}-1-x"  # pid 1 exists: kept
    other = tmp_path / "mcpx-hooks-artifacts-nope"
    for d in (orphan, alive, other):
        d.mkdir()
        (d / "0").write_text("left over")
    store = ArtifactStore(100)
    try:
        store.keep("r", _dir(tmp_path / "src", {"f": b"x"}))
        assert not orphan.exists() and alive.exists() and other.exists()
        assert Path(store.find("r", "a0").path).parent.name.startswith(
            f"mcpx-hooks-artifacts-{uid}-{os.getpid()}-"
        )
    finally:
        store.close()


def test_exec_says_which_artifact_file_a_full_disk_kept_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A write that finds the disk full fails without a file name: the line said
    # "--artifacts: big.bin: [Errno 28] No space left on device", neither where it was
    # going nor in words alone. (/dev/full stands for the full disk.)
    from types import SimpleNamespace

    from mcpx_hooks.supervisor.cli import artifacts

    source = tmp_path / "kept"
    source.write_bytes(b"x" * 100)
    out = tmp_path / "out"
    frame = {"type": "artifact", "id": "a1", "name": "big.bin", "size": 100}
    found = SimpleNamespace(path=str(source))
    journal = SimpleNamespace(
        run_id="r1", frames=[frame], artifacts=SimpleNamespace(find=lambda run, id: found)
    )
    monkeypatch.setattr(artifacts, "_opener", lambda path, flags: os.open("/dev/full", os.O_WRONLY))
    assert artifacts.copy_local(journal, str(out)) is False  # type: ignore[arg-type]
    assert capsys.readouterr().err == (
        f"mcpx-hooks exec: --artifacts: big.bin: cannot write {out / 'big.bin'}:"
        " No space left on device\n"
    )
