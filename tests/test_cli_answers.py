"""What a hook answers, seen through `mcpx-hooks exec` as a user runs it: plain text is advice,
output that cannot be read shows its start (`stdoutHead`), and an `onError` hook sees the end
of the script's stdout (`error.stdoutTail`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli import mcpx


def hook(**fields: Any) -> str:
    return json.dumps({"on": "script", "sandbox": "none", **fields})


def frames_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_a_text_gate_passes_and_its_text_is_advice(tmp_path: Path) -> None:
    gate = hook(phase="before", run=["sh", "-c", "command -v sh || exit 1"])
    out = mcpx("exec", "--json", "--hook", gate, "--", "true", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    frames = frames_of(out.stdout)
    (frame,) = [f for f in frames if f["type"] == "hook"]
    assert frame["status"] == "ok"
    assert frame["advice"][0].endswith("/sh")
    (result,) = [f for f in frames if f["type"] == "result"]
    assert result["advice"] == frame["advice"]


def test_a_text_gate_that_exits_1_fails(tmp_path: Path) -> None:
    gate = hook(phase="before", run=["sh", "-c", "command -v no-such-tool-15a || exit 1"])
    out = mcpx("exec", "--json", "--hook", gate, "--", "true", cwd=tmp_path)
    (frame,) = [f for f in frames_of(out.stdout) if f["type"] == "hook"]
    assert frame["status"] == "failed" and frame["exitCode"] == 1
    assert out.returncode == 0  # failure is open by default: the run carried on


def test_invalid_output_shows_what_the_hook_printed(tmp_path: Path) -> None:
    broken = hook(phase="before", run=["sh", "-c", "echo '{oops, not json'; echo second"])
    out = mcpx("exec", "--json", "--hook", broken, "--", "true", cwd=tmp_path)
    (frame,) = [f for f in frames_of(out.stdout) if f["type"] == "hook"]
    assert frame["status"] == "invalid-output"
    assert frame["stdoutHead"] == "{oops, not json\nsecond\n"
    view = mcpx("exec", "--hook", broken, "--", "true", cwd=tmp_path)
    assert "  stdout (first lines):\n    | {oops, not json\n    | second\n" in view.stdout


def test_on_error_sees_the_end_of_the_scripts_stdout(tmp_path: Path) -> None:
    (tmp_path / "advice.py").write_text(
        "def hook(p):\n"
        "    e = p['error']\n"
        "    t = e['stdoutTail']\n"
        "    return {'advise': [t.splitlines()[-1], e['stderrTail'].strip(), str(len(t))]}\n"
    )
    advise = hook(phase="onError", module="advice.py")
    script = "seq 1 5000; echo 'FAILED tests/test_x.py::test_y'; echo boom >&2; exit 1"
    out = mcpx("exec", "--json", "--hook", advise, "--", "sh", "-c", script, cwd=tmp_path)
    frames = frames_of(out.stdout)
    (error,) = [f for f in frames if f["type"] == "error"]
    # The end of 5000 lines and more: the last 8 KiB, cut at a line's start or inside one.
    assert error["advice"][:2] == ["FAILED tests/test_x.py::test_y", "boom"]
    assert int(error["advice"][2]) == 8192
    assert out.returncode == 1  # the script's own


def test_secrets_are_redacted_in_stdout_head_and_stdout_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-15a-value"
    monkeypatch.setenv("TOKEN_15A", secret)
    (tmp_path / "advice.py").write_text(
        "def hook(p):\n    return {'advise': p['error']['stdoutTail'].strip()}\n"
    )
    leaks = hook(phase="before", secrets=["TOKEN_15A"], run=["sh", "-c", 'echo "{ $TOKEN_15A"'])
    advise = hook(phase="onError", module="advice.py")
    script = 'echo "token is $TOKEN_15A"; exit 1'
    out = mcpx(
        "exec", "--json", "--secret", "TOKEN_15A", "--hook", leaks, "--hook", advise,
        "--", "sh", "-c", script, cwd=tmp_path,
    )  # fmt: skip
    assert secret not in out.stdout + out.stderr
    frames = frames_of(out.stdout)
    head = next(f for f in frames if f["type"] == "hook" and f["phase"] == "before")
    assert head["stdoutHead"] == "{ [secret TOKEN_15A]\n"
    (error,) = [f for f in frames if f["type"] == "error"]
    assert error["advice"] == ["token is [secret TOKEN_15A]"]


#: The tutorial's gate (docs/hooks.md), for a tool no machine has: it says why on stdout.
GATE = (
    'command -v no-such-tool-25 >/dev/null || { echo "jq is missing: apt-get install jq"; exit 1; }'
)


def test_a_failed_hook_keeps_what_it_said_on_stdout_and_stderr(tmp_path: Path) -> None:
    gate = hook(phase="before", run=["sh", "-c", GATE + "; echo never"])
    out = mcpx("exec", "--json", "--hook", gate, "--", "true", cwd=tmp_path)
    (frame,) = [f for f in frames_of(out.stdout) if f["type"] == "hook"]
    assert (frame["status"], frame["exitCode"]) == ("failed", 1)
    assert frame["stdoutTail"] == "jq is missing: apt-get install jq\n"
    assert "stderrTail" not in frame  # it wrote nothing there
    view = mcpx("exec", "--hook", gate, "--", "true", cwd=tmp_path)
    assert (
        "  why: exited with status 1\n  failure is open: the run carries on\n"
        "  stdout (last lines):\n    | jq is missing: apt-get install jq\n"
    ) in view.stdout


def test_the_tails_of_a_failed_hook_are_its_last_4_kib_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-25-tail-Q7Z9X"
    monkeypatch.setenv("TOKEN_25", secret)
    # On stdout the secret straddles the 4 KiB cut (4091 bytes follow it): cut before it is
    # redacted, its last 5 characters would be left. On stderr it ends the stream.
    said = (
        'seq 1 3000; printf "%s%4090s\\n" "$TOKEN_25" ""; '
        'seq 1 3000 >&2; echo "err $TOKEN_25" >&2; exit 3'
    )
    loud = hook(phase="before", secrets=["TOKEN_25"], run=["sh", "-c", said])
    quiet = hook(phase="onSuccess", secrets=["TOKEN_25"], run=["sh", "-c", "seq 1 3000 >&2"])
    out = mcpx("exec", "--json", "--hook", loud, "--hook", quiet, "--", "true", cwd=tmp_path)
    assert "Q7Z9X" not in out.stdout + out.stderr
    frames = [f for f in frames_of(out.stdout) if f["type"] == "hook"]
    failed = next(f for f in frames if f["phase"] == "before")
    assert (failed["status"], failed["exitCode"]) == ("failed", 3)
    assert failed["stdoutTail"].endswith("]" + " " * 4090 + "\n")  # the mark's end, then the rest
    assert failed["stderrTail"].endswith("\n2999\n3000\nerr [secret TOKEN_25]\n")
    for tail in (failed["stdoutTail"], failed["stderrTail"]):
        assert 4000 < len(tail.encode()) <= 4096
    ok = next(f for f in frames if f["phase"] == "onSuccess")
    assert ok["status"] == "ok" and "stdoutTail" not in ok
    assert len(ok["stderrTail"].encode()) > 4096  # a hook that did not fail keeps more of it
