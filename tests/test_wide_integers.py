"""Integers past 64 bits in a run's frames: written exactly (`jsontext.dumps`), and read back
exactly wherever the supervisor reads its own lines (`jsontext.wire_loads`). orjson reads such
an integer as a float, and refuses one past a float's range: a script returning `10 ** 400`
once took the readable `exec` down with a traceback, and `runs verify` called its run's
`result` line "not a JSON frame"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.core.frames import (
    STREAM_ENDS,
    STREAM_TYPES,
    EmitFrame,
    LogFrame,
    OutputFrame,
    WarningFrame,
    blank,
)
from mcpx_hooks.supervisor.core.jsontext import dumps, wire_loads
from mcpx_hooks.supervisor.run.journal import RunJournal

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
WIDE = [10**400, -(10**400), 2**64, 2**70, -(2**63) - 1, 12345678901234567890123]


@pytest.mark.parametrize("value", WIDE)
def test_a_wide_integer_comes_back_exact(value: int) -> None:
    line = dumps({"type": "result", "value": [value, {"n": value}], "text": "x" * 40})
    assert wire_loads(line) == {"type": "result", "value": [value, {"n": value}], "text": "x" * 40}
    assert wire_loads(line.decode()) == wire_loads(line)


def test_the_fast_path_and_its_fallbacks() -> None:
    assert wire_loads(b'{"seq":1,"n":9223372036854775807}') == {"seq": 1, "n": 2**63 - 1}
    # Nineteen digits inside a string take the slow path, and read the same.
    assert wire_loads(b'{"text":"1234567890123456789012"}') == {"text": "1234567890123456789012"}
    # What orjson refuses and the standard library reads: an escaped lone surrogate.
    assert wire_loads(b'{"text":"\\ud800"}') == {"text": "\ud800"}
    for broken in (b"", b"{", b"[1,]", b"NaN", b'{"a":1}{'):
        with pytest.raises(ValueError):
            wire_loads(broken)


def _cli(args: list[str], state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [*CLI, *args], check=False, capture_output=True, text=True, env=env, cwd=state, timeout=120
    )


@pytest.mark.parametrize(("power", "value"), [("10 ** 400", 10**400), ("2 ** 70", 2**70)])
def test_a_script_returning_one_is_shown_stored_and_verified(
    tmp_path: Path, power: str, value: int
) -> None:
    code = f"def main():\n    return {power}\n"
    shown = _cli(["exec", "--sandbox", "none", "-c", code], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr + shown.stdout
    assert f"RESULT {str(value)[:20]}" in shown.stdout  # (a long value is shown cut)

    printed = _cli(["exec", "--sandbox", "none", "--json", "-c", code], tmp_path)
    assert printed.returncode == 0, printed.stderr
    frames = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [f["value"] for f in frames if f["type"] == "result"] == [value]
    run_id = frames[0]["runId"]

    stored = _cli(["runs", "show", run_id], tmp_path)
    assert stored.returncode == 0, stored.stderr
    assert f"RESULT {str(value)[:20]}" in stored.stdout
    verified = _cli(["runs", "verify", run_id], tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_script_emitting_one_keeps_its_artifacts(tmp_path: Path) -> None:
    """`exec --artifacts` reads the run's frames back whole: an `emit` line ends with its type
    as an output line does, and is still read exactly."""
    code = "import mcpx\n\ndef main():\n    mcpx.emit(10 ** 400)\n    return 1\n"
    kept = tmp_path / "kept"
    shown = _cli(["exec", "--sandbox", "none", "--artifacts", str(kept), "-c", code], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr + shown.stdout
    assert "RESULT 1" in shown.stdout


@pytest.mark.parametrize("value", [2**70, 10**400])
def test_an_emitted_or_logged_one_is_read_back_from_the_journal(value: int) -> None:
    """A log or emit frame's line may end with its type as a stream frame's does: only the
    lines of `STREAM_ENDS` are read by orjson alone."""
    journal = RunJournal("r")
    journal.offer(blank(EmitFrame, value=value))
    journal.offer(blank(LogFrame, level="info", message="m", attributes={"n": value}))
    restored = RunJournal.restored("r", journal.lines, finished=False)
    for frames in (journal.frames, restored.frames[:2]):
        assert [f.get("value", f.get("attrs")) for f in frames] == [value, {"n": value}]


def test_a_stream_line_ends_as_the_table_says_and_no_other_line_does() -> None:
    journal = RunJournal("r")
    for kind in STREAM_TYPES:
        journal.offer_output(kind, ["batched"])
        journal.offer(blank(OutputFrame, text="single", type=kind))
        assert [line.endswith(STREAM_ENDS[kind]) for line in journal.lines[-2:]] == [True, True]
    journal.offer(blank(EmitFrame, value=1))
    journal.offer(blank(LogFrame, level="info", message="m"))
    journal.append(blank(WarningFrame, message="w"))
    assert not any(line.endswith(tuple(STREAM_ENDS.values())) for line in journal.lines[-3:])


def test_a_hook_s_stdin_is_json_even_when_the_input_read_as_infinity(tmp_path: Path) -> None:
    """`--input '{"a": 1e400}'` reads as infinity; the hook's stdin was written with
    json.dumps, as `Infinity`, which no strict JSON parser takes (the hook's own `cat` then
    failed as "Infinity is not JSON"). Written as every outgoing line is: `null`, and a wide
    integer exact."""
    strict = (
        "import json, sys\n"
        "def no(word): raise SystemExit(f'not JSON: {word}')\n"
        "d = json.loads(sys.stdin.read(), parse_constant=no)['input']\n"
        "print(json.dumps({'advise': repr(d)}))\n"
    )
    hook = {
        "on": "script",
        "phase": "before",
        "sandbox": "none",
        "run": [sys.executable, "-c", strict],
    }
    given = '{"a": 1e400, "b": 123456789012345678901234567890}'
    args = ["exec", "--json", "--sandbox", "none", "--hook", json.dumps(hook), "--input", given]
    done = subprocess.run(
        [*CLI, *args, "--", "true"],
        cwd=tmp_path,
        env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    (frame,) = [f for f in map(json.loads, done.stdout.splitlines()) if f["type"] == "hook"]
    assert frame["status"] == "ok", frame
    assert frame["advice"] == ["{'a': None, 'b': 123456789012345678901234567890}"]
