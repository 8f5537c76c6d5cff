"""What the readable views print of data holds no control character: a run's argv (in `exec`,
`runs list`, `runs show`), a hook's name and advice (`exec`, `hook test`, `hooks list`,
`exec --explain`), search snippets. Text of several lines goes on as indented continuation
lines, never at column 0. A script's own output lines are printed as they are."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.cli.printable import command as command_line

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
#: A control character: C0 (ESC, BEL, line breaks), DEL, C1 (CSI as one character).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

ESC = "\x1b"
OSC52 = f"{ESC}]52;c;ZXZpbA==\x07"
CLEAR = f"{ESC}[2J"
NAME = f"adv{ESC}[31mred"
ARG = f"arg{ESC}[31mRED\nsecond line\x9b"
#: A hook that says multi-line advice, the second line a fake end of the run.
HOOK_CODE = (
    f"import sys; sys.stdin.read(); print({f'first{CLEAR}{OSC52}'!r}); print('end: exit code 0')"
)
#: A script whose own output holds escapes (colours): they are its to print.
SCRIPT = f"print({f'probe-7f3 {ESC}[32mgreen{ESC}[0m {OSC52}'!r})"


def mcpx(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}  # (now: this test's own history)
    done = subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def data_lines(out: str) -> list[str]:
    """The lines of a readable view but the script's own output (`| ` and `! `)."""
    return [line for line in out.splitlines() if not line.startswith(("| ", "! "))]


def test_the_views_escape_what_they_show_of_data(tmp_path: Path) -> None:
    hook = {"name": NAME, "on": "script", "phase": "before", "sandbox": "none"}
    config = {"hooks": [{**hook, "run": [sys.executable, "-c", HOOK_CODE]}]}
    (tmp_path / "c.json").write_text(json.dumps(config))
    argv = ["--config", "c.json", "--sandbox", "none", "--", sys.executable, "-c", SCRIPT, ARG]
    done = mcpx(tmp_path, "exec", *argv)
    assert done.returncode == 0, done.stderr
    views = {"exec": done.stdout}
    # The script's own line as it printed it; its colours are expected.
    assert f"| probe-7f3 {ESC}[32mgreen{ESC}[0m {OSC52}" in done.stdout.splitlines()
    run_id = json.loads(mcpx(tmp_path, "runs", "list", "--json").stdout)[0]["runId"]
    for args in (
        ("hook", "test", "--config", "c.json", NAME),
        ("hooks", "list", "--config", "c.json"),
        ("exec", "--explain", *argv),
        ("runs", "show", run_id),
        ("runs", "search", "probe-7f3"),
        ("runs", "list"),
    ):
        views[" ".join(args[:2])] = mcpx(tmp_path, *args).stdout
    for view, out in views.items():
        for line in data_lines(out):
            assert CONTROL.search(line) is None, (view, line)
        # Nothing a hook said starts a line of its own: only the run's own `end` does.
        ends = [line for line in out.splitlines() if line.startswith("end:")]
        assert ends == (out.splitlines()[-1:] if view in ("exec", "runs show") else []), view
    # The same view, stored (but the live view's line for a hook slower than a second).
    live = [line for line in done.stdout.splitlines() if "still running after" not in line]
    assert views["runs show"].splitlines() == live
    readable = views["runs show"].splitlines()
    # (the command line as `runs list` shows it: quoted as a shell takes it back)
    shown = command_line([sys.executable, "-c", SCRIPT, ARG])
    assert readable[0] == f"run {run_id}: {shown}  (sandbox none)"
    assert readable[0].endswith(" $'arg\\x1b[31mRED\\nsecond line\\u009b'  (sandbox none)")
    assert readable[1].startswith("hook adv\\x1b[31mred (script.before, run, sandbox none): ok")
    at = readable.index("  advice: first\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07")
    assert readable[at + 1] == "      end: exit code 0"
    # `runs list`: one line a run, its argv as a shell takes it back.
    (listed,) = views["runs list"].splitlines()
    assert listed.startswith(run_id)
    command = listed.split("  ")[-1]
    again = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, text=True, check=True
    )
    assert again.stdout.split("\0")[:-1] == [sys.executable, "-c", SCRIPT, ARG]
    (match, *_) = views["runs search"].splitlines()
    # (a snippet is the text as a terminal shows it: the colour and the clipboard's OSC 52
    # left out, never obeyed; the space printed before the OSC 52 kept)
    assert match == f"{run_id}@2  stdout  probe-7f3 green "


def test_a_command_line_is_one_line_a_shell_takes_back() -> None:

    argv = ["it's", "a\\b", "tab\there", "é\u202e", "", "$(x) `y`", "\x1b'\\\n\r\x7f\x85", "ok"]
    line = command_line(argv)
    assert CONTROL.search(line) is None and "\u202e" not in line
    again = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True
    )
    assert again.stdout.decode().split("\0")[:-1] == argv  # (bytes: \r kept as it is)


def test_a_byte_no_utf8_holds_is_given_back_as_that_byte() -> None:
    """A directory named with a byte that is not UTF-8 (`d\\xff`) is kept by Python as the
    escape `\\udcff`; trust's advice wrote it `$'/d\\udcff/…'`, which bash takes as three
    other bytes, so the command it said to run named no file."""
    argv = ["/tmp/d\udcff/.mcpx-hooks.toml", "\udc80\x1b"]
    again = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command_line(argv)}"], capture_output=True, check=True
    )
    assert again.stdout.split(b"\0")[:-1] == [os.fsencode(a) for a in argv]


@given(st.text())
def test_an_argument_is_quoted_as_shlex_quotes_it(arg: str) -> None:
    # (written out in `core/shellwords.py`, so that `exec` imports no `shlex`)
    import shlex

    from mcpx_hooks.supervisor.core.shellwords import quote

    assert quote(arg) == shlex.quote(arg)


def test_servers_list_escapes_what_a_server_says(tmp_path: Path) -> None:
    hostile = Path(__file__).parent / "mcpservers" / "hostile.py"
    said = f"x{CLEAR}\nend: exit code 0"  # (its serverInfo's version: the mode it is given)
    server = {"command": [sys.executable, str(hostile), said], "sandbox": "none"}
    (tmp_path / "s.json").write_text(json.dumps({"servers": {"h": server}}))
    done = mcpx(tmp_path, "servers", "list", "--config", "s.json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("h (hostile x\\x1b[2J\\nend: exit code 0): running since ")
    assert all(CONTROL.search(line) is None for line in lines), lines
    assert not any(line.startswith("end:") for line in lines)


def test_a_project_path_is_escaped_wherever_a_command_names_it(tmp_path: Path) -> None:
    # A cloned project can name its directories: one named to print a fake line of ours (or
    # to colour the screen) is escaped by `trust`, `trust --list`, `validate`, the warning that
    # a project file was skipped, and `runs verify`.
    project = tmp_path / f"p{ESC}[31mRED\nend: exit code 0"
    project.mkdir()
    config = project / ".mcpx-hooks.toml"
    config.write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n')
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("MCPX_HOOKS_NO_DISCOVERY", None)

    def run(*args: str) -> str:
        done = subprocess.run(
            [*CLI, *args], cwd=project, env=env, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout + done.stderr

    said = {"skipped": run("exec", "--", "true")}
    said["trust"] = run("trust")
    said["trust --list"] = run("trust", "--list")
    config.write_text('[[hooks]]\non = "scrip"\n')
    said["validate"] = run("validate", str(config))
    for what, out in said.items():
        assert ESC not in out, (what, out)
        assert "end: exit code 0" not in out.splitlines(), (what, out)  # (ours: ", N ms")
    assert (
        f"trusted $'{tmp_path}/p\\x1b[31mRED\\nend: exit code 0/.mcpx-hooks.toml'" in said["trust"]
    )
    # The command the warning suggests is one line, and a shell takes it back as the path.
    suggested = f"mcpx-hooks trust $'{tmp_path}/p\\x1b[31mRED\\nend: exit code 0/.mcpx-hooks.toml'"
    assert suggested in said["skipped"], said["skipped"]


def test_exec_explain_shows_a_hook_name_with_a_line_break_on_its_own_line() -> None:
    # A hook's name is the config's data: `exec --explain` put its line break through as a
    # continuation line (the rest of the name, then "(run, advise): …", on a line of its
    # own), where `hooks list` writes it escaped on one line.
    from mcpx_hooks.supervisor.cli.explain import explain_lines

    name = f"we\nird{ESC}[2J"
    hook = {"phase": "before", "name": name, "source": {"file": "c.toml", "index": 0}}
    plan = {
        "argv": ["true"],
        "cwd": "/w",
        "hooks": [
            {**hook, "runs": True, "action": "run", "effect": "advise", "at": "before the script"},
            {**hook, "runs": False, "why": "its when.argv does not match"},
        ],
        "script": {},
        "skippedFiles": [],
    }
    assert explain_lines(plan) == [
        "a run of true in /w",
        "would run, in order:",
        "  1. before we\\nird\\x1b[2J (run, advise): before the script  [c.toml:/hooks/0]",
        "will not run:",
        "  before we\\nird\\x1b[2J: its when.argv does not match  [c.toml:/hooks/0]",
    ]
