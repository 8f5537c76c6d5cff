"""What the readable views print of a field of data is bounded: however much a hook says (a
200 KB advice, a refusal of 5,000 lines, a huge question, key, command line or stderr line),
`hook test`, `exec`, `runs show` and the terminal's prompt show at most `FIELD_LINES` lines of
at most `LINE_CHARS` characters of it, then how much was left out and where all of it is;
`--json` keeps all of it. Real hooks, the installed command."""

from __future__ import annotations

import json
import os
import pty
import selectors
import subprocess
import sys
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.cli.printable import FIELD_LINES, LINE_CHARS, MESSAGE_CHARS

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
#: A long line (one field of 200,000 characters) and many lines (5,000 short ones).
BIG = "w" * 200_000
MANY = "\n".join(f"line {i}" for i in range(5_000))
#: How long a line of a view may be: a field's `LINE_CHARS` and the view's own words.
WIDEST = LINE_CHARS + 120
#: The answers a hook gives, each with (in the `--json` frame) where all of it is kept.
ANSWERS = {
    "advice": ({"advise": BIG}, lambda f: f["advice"][0]),
    "refusal": ({"refuse": {"reason": MANY}}, lambda f: f["refused"]["reason"]),
    "question": (
        {"ask": {"question": BIG, "default": "no", "deadlineMs": 50}},
        lambda f: f["asked"]["question"],
    ),
    "dropped key": ({BIG: 1}, lambda f: f["dropped"][0]["key"]),
    "run answer": ({"run": {"argv": ["/bin/true", BIG]}}, lambda f: f["ran"]["argv"][1]),
}


def mcpx(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    done = subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, input=stdin, stdin=None if stdin else subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done


def answering(
    tmp_path: Path, said: object, *, effect: str = "run", stderr: str = "", code: int = 0
) -> dict:
    """A hook (no sandbox) that prints `said` as its JSON answer, `stderr` on stderr, and
    exits `code` (all of it from a file: an argument is at most 128 KiB)."""
    answer = tmp_path / f"answer-{len(list(tmp_path.glob('answer-*')))}.json"
    answer.write_text(json.dumps({"said": said, "stderr": stderr, "code": code}))
    program = (
        "import json, sys; sys.stdin.read(); a = json.load(open(sys.argv[1]));"
        " print(json.dumps(a['said'])); sys.stderr.write(a['stderr']); sys.exit(a['code'])"
    )
    argv = [sys.executable, "-c", program, str(answer)]
    return {"on": "script", "phase": "before", "effect": effect, "sandbox": "none", "run": argv}


def assert_bounded(out: str) -> None:
    lines = out.splitlines()
    # (a warning and the `ERROR` line are mcpx-hooks' own words: cut at `MESSAGE_CHARS`)
    own = [line for line in lines if line.startswith(("ERROR ", "warning: "))]
    assert all(len(line) <= MESSAGE_CHARS + 120 for line in own), max(map(len, own))
    lines = [line for line in lines if line not in own]
    assert max(map(len, lines)) <= WIDEST, max(map(len, lines))
    assert len(lines) <= 2 * FIELD_LINES + 10, len(lines)
    assert "(all of it: --json)" in out, out


@pytest.mark.parametrize("what", ANSWERS)
def test_hook_test_shows_a_bounded_share_of_what_a_hook_said(tmp_path: Path, what: str) -> None:
    # A 200 KB answer was printed whole: 200,099 bytes for one advice.
    said, kept = ANSWERS[what]
    hook = json.dumps(answering(tmp_path, said))
    shown = mcpx(tmp_path, "hook", "test", "--hook", hook)
    assert_bounded(shown.stdout)
    assert len(shown.stdout) < 12_000, len(shown.stdout)
    frame = json.loads(mcpx(tmp_path, "hook", "test", "--json", "--hook", hook).stdout)
    assert kept(frame) in (BIG, MANY)


def test_a_failed_hook_s_long_stderr_line_is_cut(tmp_path: Path) -> None:
    hook = json.dumps(answering(tmp_path, {}, stderr="e" * 50_000, code=1))
    shown = mcpx(tmp_path, "hook", "test", "--hook", hook).stdout
    assert_bounded(shown)
    assert "  stderr (last lines):" in shown and "more characters (all of it: --json)" in shown
    frame = json.loads(mcpx(tmp_path, "hook", "test", "--json", "--hook", hook).stdout)
    assert len(frame["stderrTail"]) == 4096  # (the tail a frame keeps, whole in --json)


def test_exec_and_runs_show_bound_a_refusal_its_question_and_the_error(tmp_path: Path) -> None:
    # A question of 200 KB, refused: the `ask` line, the hook's `asked` and `REFUSES` lines
    # and the `ERROR` line each printed it whole (800 KB), `--yes` on stderr too.
    ask = {"ask": {"question": BIG, "default": "no", "deadlineMs": 50}}
    hook = json.dumps({**answering(tmp_path, ask, effect="ask"), "name": "gate"})
    done = mcpx(tmp_path, "exec", "--sandbox", "none", "--hook", hook, "--", "true")
    assert done.returncode == 3, done.stderr
    assert_bounded(done.stdout)
    assert len(done.stdout) < 6_000, len(done.stdout)
    for line in ("ask from gate: w", "  asked: w", "  REFUSES the run", "ERROR refused by gate"):
        assert any(shown.startswith(line) for shown in done.stdout.splitlines()), line
    run_id = json.loads(mcpx(tmp_path, "runs", "list", "--json").stdout)[0]["runId"]
    assert mcpx(tmp_path, "runs", "show", run_id).stdout == done.stdout
    frames = map(json.loads, mcpx(tmp_path, "runs", "show", run_id, "--json").stdout.splitlines())
    assert next(f for f in frames if f["type"] == "ask")["question"] == BIG
    flags = ("--json", "--yes", "--sandbox", "none", "--hook", hook)
    yes = mcpx(tmp_path, "exec", *flags, "--", "true")
    assert len(yes.stderr) < 2_000 and "gate asks: w" in yes.stderr, len(yes.stderr)


def test_the_terminal_s_prompt_bounds_the_question(tmp_path: Path) -> None:
    ask = {"ask": {"question": MANY, "default": "no", "deadlineMs": 60_000}}
    hook = json.dumps({**answering(tmp_path, ask, effect="ask"), "name": "gate"})
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    master, slave = pty.openpty()
    with subprocess.Popen(
        [*CLI, "exec", "--json", "--sandbox", "none", "--hook", hook, "--", "true"],
        cwd=tmp_path, env=env, stdin=slave, stderr=slave, stdout=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        os.close(slave)
        seen = bytearray()
        with selectors.DefaultSelector() as sel:
            sel.register(master, selectors.EVENT_READ)
            while b"[y/n; Enter or 60 s answers no] " not in seen:
                assert sel.select(60), bytes(seen[-400:])
                seen += os.read(master, 65536)
        os.write(master, b"y\n")
        proc.communicate(timeout=60)
    os.close(master)
    prompt = seen.decode()
    assert "gate asks: line 0\r\n" in prompt and f"line {FIELD_LINES - 1}\r\n" in prompt
    assert f"line {FIELD_LINES}\r\n" not in prompt
    assert f"... and {5_000 - FIELD_LINES} more lines (all of it: --json)" in prompt, prompt
