"""`mcpx-hooks exec` as a CI job meets it: each exit code of the table, one by one, through a
real process (local and `--remote`); a closed pipe ends it quietly; the readable view says
which hook is still running and never shows a Python `None`; observe hooks hold it up at most
`[observe] drainMs`, and what they left undone is said on stderr."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from service_client import Server, start_server
from test_cli import CLI, mcpx

from mcpx_hooks.supervisor.cli.common import EXEC_EXIT_CODES
from mcpx_hooks.supervisor.core.order import check_order

ENV = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}


def hook(**fields: Any) -> str:
    return json.dumps({"on": "script", "sandbox": "none", **fields})


REFUSE = hook(phase="before", effect="ask", run=["sh", "-c", 'echo \'{"refuse": "not today"}\''])
FAIL_CLOSED = hook(phase="before", effect="ask", failure="closed", run=["false"])

#: (the table's code, or None for the script's own; exec's arguments; the code expected;
#: the error frame's `cause`, None for a result or nothing run).
CASES: list[tuple[int | None, list[str], int, str | None]] = [
    (0, ["--", "true"], 0, None),
    (None, ["--", "sh", "-c", "exit 7"], 7, "script"),
    (1, ["--", "no-such-program-15a"], 1, "failed"),
    (2, ["--timeout", "-1", "--", "true"], 2, None),
    (3, ["--hook", REFUSE, "--", "true"], 3, "refused"),
    (3, ["--hook", FAIL_CLOSED, "--", "true"], 3, "refused"),
    (124, ["--timeout", "0.2", "--", "sleep", "30"], 124, "timeout"),
]


@pytest.mark.parametrize(
    ("row", "argv", "expected", "cause"), CASES, ids=[" ".join(c[1][-3:]) for c in CASES]
)
def test_each_exit_code(
    tmp_path: Path, row: int | None, argv: list[str], expected: int, cause: str | None
) -> None:
    out = mcpx("exec", "--sandbox", "none", "--json", *argv, cwd=tmp_path)
    assert out.returncode == expected, out.stderr
    assert "Traceback" not in out.stderr
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    if expected == 2:
        assert frames == [] and out.stderr.startswith("mcpx-hooks exec: --timeout")
        return
    check_order(frames)
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["cause"] for e in errors] == ([cause] if cause else [])


def test_a_config_error_is_2_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = "ls"\n')
    out = mcpx("exec", "--config", "bad.toml", "--json", "--", "touch", "ran", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert "bad.toml:/hooks/0/run" in out.stderr
    assert not (tmp_path / "ran").exists()
    # A key given twice in a JSON file: refused, not the last one silently applied.
    (tmp_path / "dup.json").write_text(
        '{"hooks": [{"on": "script", "phase": "before", "sandbox": "none",'
        ' "run": ["true"], "run": ["touch", "surprise"]}]}'
    )
    out = mcpx("exec", "--config", "dup.json", "--json", "--", "touch", "ran", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert 'dup.json:/hooks/0/run: the key "run" is given more than once' in out.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "surprise").exists()
    out = mcpx("validate", "dup.json", cwd=tmp_path)
    assert out.returncode == 2 and "dup.json:/hooks/0/run" in out.stdout + out.stderr


@pytest.mark.parametrize(
    "command", [["exec", "--json", "--", "touch", "ran"], ["serve", "--port", "0", "--no-auth"]]
)
def test_a_spawn_mode_that_is_none_is_2_in_one_line(tmp_path: Path, command: list[str]) -> None:
    out = subprocess.run(
        [*CLI, *command],
        cwd=tmp_path,
        env={**ENV, "MCPX_HOOKS_SPAWN": "bogus"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "mcpx-hooks: MCPX_HOOKS_SPAWN='bogus': expected one of pidns, keeper, auto\n"
    )
    assert not (tmp_path / "ran").exists()


SLEEPER = "echo ready; exec sleep 60"


def test_ctrl_c_is_130(tmp_path: Path) -> None:
    with subprocess.Popen(
        [*CLI, "exec", "--sandbox", "none", "--json", "--", "sh", "-c", SLEEPER],
        cwd=tmp_path,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        frames = []
        for line in proc.stdout:
            frames.append(json.loads(line))
            if frames[-1].get("text") == "ready":
                proc.send_signal(signal.SIGINT)
                break
        frames.extend(json.loads(line) for line in proc.stdout)
        assert proc.wait(timeout=30) == 130
        assert proc.stderr.read() == ""
    check_order(frames)
    (error,) = [f for f in frames if f["type"] == "error"]
    assert (error["message"], error["cause"]) == ("cancelled", "cancelled")


def test_a_second_ctrl_c_says_which_suffix_hook_it_waits_for_and_a_third_kills_it(
    tmp_path: Path, marker: Any
) -> None:
    """After the second Ctrl-C, `exec` printed nothing while a suffix hook that ignores
    SIGTERM ran on to its timeout (here 120 s). It now names the hook and how long it may
    still take, and a third Ctrl-C kills it (its tree with it) at once. After the first,
    it said nothing either (as with a CI runner's one SIGTERM): it names the hook as it
    starts. The killed hook's frame keeps what it wrote, as any failed hook's (it kept
    none)."""
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    stubborn = f"trap '' INT TERM; echo cleaning >&2; echo started > {fifo.name}; sleep 1000; : $0"
    slow = hook(name="slow", phase="suffix", timeoutMs=120_000, run=["sh", "-c", stubborn, marker])
    with subprocess.Popen(
        [*CLI, "exec", "--sandbox", "none", "--json", "--hook", slow, "--", "sh", "-c", SLEEPER],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = json.loads(proc.stdout.readline())
        while json.loads(proc.stdout.readline()).get("text") != "ready":
            pass
        proc.send_signal(signal.SIGINT)
        assert fifo.read_text() == "started\n"  # the suffix hook runs, the run cancelled
        # (said at once: a CI job its runner cancelled says why it has not ended)
        assert select.select([proc.stderr], [], [], 30)[0], "nothing said after the first"
        said = proc.stderr.readline()
        assert said.startswith("mcpx-hooks exec: cancelling; hook slow (script.suffix, at most")
        assert said.endswith(" s more) runs first\n"), said
        proc.send_signal(signal.SIGINT)
        said = proc.stderr.readline()
        assert said.startswith("mcpx-hooks exec: stopping; still waiting for hook slow"), said
        assert "(script.suffix, at most 1" in said and "Ctrl-C again to kill it now" in said
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130  # long before the hook's 120 s
        assert proc.stderr.read() == "mcpx-hooks exec: killing slow now\n"
    assert marker.alive() == []
    shown = subprocess.run(
        [*CLI, "runs", "show", first["runId"], "--json"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    (killed,) = [f for f in map(json.loads, shown.stdout.splitlines()) if f["type"] == "hook"]
    assert (killed["status"], killed.get("stderrTail")) == ("killed", "cleaning\n")


def test_the_cases_cover_the_table() -> None:
    covered = {row for row, *_ in CASES} | {130}  # 130: test_ctrl_c_is_130, and remote below
    assert covered == {code for code, _ in EXEC_EXIT_CODES}


# ---- a closed pipe ----------------------------------------------------------------------------


@pytest.mark.parametrize("view", [["--json"], []], ids=["json", "readable"])
def test_a_closed_pipe_ends_exec_quietly(tmp_path: Path, view: list[str]) -> None:
    marker = f"mcpx-pipe-{os.getpid()}-{len(view)}"
    with subprocess.Popen(
        [*CLI, "exec", "--sandbox", "none", *view, "--", "sh", "-c", "exec yes", marker],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()  # what `| head -1` reads, then it leaves
        proc.stdout.close()
        code = proc.wait(timeout=30)
        stderr = proc.stderr.read().decode()
    assert first.startswith(b"{" if view else b"run ")
    assert stderr == ""  # no BrokenPipeError, no traceback, no "Exception ignored"
    assert code == 130  # the run was cancelled: nobody reads it any more
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


def _first_line_then_gone(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """`argv | head -1`: its exit code and stderr."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        return proc.wait(timeout=30), proc.stderr.read().decode()


def test_a_closed_pipe_ends_the_history_s_commands_quietly(tmp_path: Path) -> None:
    env = {**ENV, "XDG_STATE_HOME": str(tmp_path / "state")}
    ran = subprocess.run(
        [*CLI, "exec", "--sandbox", "none", "--json", "--", "seq", "1", "30000"],
        cwd=tmp_path, env=env, capture_output=True, check=True,
    )  # fmt: skip
    run_id = json.loads(ran.stdout.splitlines()[0])["runId"]
    argv = [*CLI, "runs", "show", run_id]  # (its 30,000 lines: more than a pipe holds)
    assert _first_line_then_gone(argv, tmp_path, env) == (130, "")


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "--sandbox", "none", "--", "echo", "hi"],
        ["exec", "--sandbox", "none", "--json", "--", "seq", "1", "30000"],
        ["runs", "list"],
        ["validate"],
        ["schema", "config"],
        ["trust", "--list"],
        ["doctor"],
    ],
    ids=lambda argv: " ".join(argv[:3]),
)
def test_output_to_a_full_disk_is_said_in_one_line(tmp_path: Path, argv: list[str]) -> None:
    # `mcpx-hooks … > out.txt` on a full disk (here /dev/full) ended in a traceback, through
    # Trio's exception groups for exec; now one line on stderr and exit 1.
    env = {**ENV, "XDG_STATE_HOME": str(tmp_path / "state")}
    with open("/dev/full", "wb") as full:
        out = subprocess.run(
            [*CLI, *argv], cwd=tmp_path, env=env, stdout=full, stderr=subprocess.PIPE,
            text=True, check=False, timeout=60,
        )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert out.stderr.endswith(
        f"mcpx-hooks {argv[0]}: cannot write the output: No space left on device\n"
    ), out.stderr
    assert "Traceback" not in out.stderr


# ---- the readable view -------------------------------------------------------------------------


def test_the_view_says_which_hook_is_still_running(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "go")
    waits = hook(name="waits", phase="before", run=["sh", "-c", "cat go >/dev/null"])
    with subprocess.Popen(
        [*CLI, "exec", "--sandbox", "none", "--hook", waits, "--", "true"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "still running" in line:
                (tmp_path / "go").write_text("")  # the hook ends only once the line came
                break
        seen.extend(proc.stdout)
        assert proc.wait(timeout=30) == 0
    assert seen[1] == "hook waits (script.before): still running after 1 s...\n"
    assert seen[2].startswith("hook waits (script.before, run, sandbox none): ok in ")


@pytest.mark.parametrize(
    "argv",
    [
        ["--hook", hook(phase="before", run=["sleep", "30"], timeoutMs=200), "--", "true"],
        ["--hook", REFUSE, "--", "true"],
        ["--timeout", "0.2", "--", "sleep", "30"],
        ["--", "no-such-program-15a"],
        ["--hook", hook(phase="onError", run=["sh", "-c", "exit 5"]), "--", "false"],
    ],
    ids=["hook-timeout", "refused", "timeout", "not-found", "failing-onError"],
)
def test_the_view_has_no_python_none(tmp_path: Path, argv: list[str]) -> None:
    out = mcpx("exec", "--sandbox", "none", *argv, cwd=tmp_path)
    assert "None" not in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    if "sleep" in argv[1]:
        assert "  killed by signal " in out.stdout  # its timeout killed it


# ---- observe drain -----------------------------------------------------------------------------

OBSERVERS = """
[defaults]
sandbox = "none"

[observe]
drainMs = 300

[[hooks]]
name = "slow"
on = "run.finished"
phase = "observe"
run = ["sh", "-c", "exec cat go {marker}"]

[[hooks]]
name = "three"
on = "run.finished"
phase = "observe"
run = ["sh", "-c", "echo broken >&2; exit 3"]
"""


def test_observe_hooks_are_drained_and_what_they_left_is_said(tmp_path: Path) -> None:
    marker = f"mcpx-drain-{os.getpid()}"
    os.mkfifo(tmp_path / "go")  # nobody writes: `slow` waits until it is killed
    (tmp_path / "c.toml").write_text(OBSERVERS.format(marker=marker))
    out = mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path, timeout=10)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("end: exit code 0")
    assert out.stderr.splitlines() == [
        "mcpx-hooks exec: observe hook three (on run.finished) failed [failed]: exited with"
        " status 3",
        "mcpx-hooks exec: observe hook slow (on run.finished) was cut short: it was still"
        " running when [observe] drainMs (300 ms) passed after the run's end; it was killed",
    ]
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


def test_observe_hooks_that_finish_in_time_say_nothing(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[defaults]\nsandbox = "none"\n[[hooks]]\nname = "quick"\non = "run.finished"\n'
        'phase = "observe"\nrun = ["sh", "-c", "cat > seen.json"]\n'
    )
    out = mcpx("exec", "--config", "c.toml", "--", "true", cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == ""
    assert json.loads((tmp_path / "seen.json").read_text())["event"]["kind"] == "run.finished"


# ---- the same through --remote -----------------------------------------------------------------

SERVED = (
    '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n[service]\nsandboxes = ["none"]\n'
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    cwd = tmp_path_factory.mktemp("serve15a")
    (cwd / "c.toml").write_text(SERVED)
    srv = start_server(cwd, "--config", "c.toml")
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--", "true"], 0),
        (["--", "sh", "-c", "exit 7"], 7),
        (["--hook", REFUSE, "--", "true"], 3),
        (["--timeout", "0.2", "--", "sleep", "30"], 124),
    ],
    ids=["result", "script", "refused", "timeout"],
)
def test_remote_exit_codes_are_the_same(server: Server, argv: list[str], expected: int) -> None:
    remote = ["--remote", server.url, "--token-file", "token"]
    out = mcpx("exec", *remote, *argv, cwd=server.cwd)
    assert out.returncode == expected, out.stderr
    assert "None" not in out.stdout


def test_remote_ctrl_c_is_130_and_a_closed_pipe_is_quiet(server: Server) -> None:
    remote = ["--remote", server.url, "--token-file", "token"]
    argv = [*CLI, "exec", *remote, "--json", "--", "sh", "-c", "echo ready; exec yes"]
    for how in ("signal", "pipe"):
        with subprocess.Popen(
            argv, cwd=server.cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            while json.loads(proc.stdout.readline()).get("text") != "ready":
                pass
            if how == "signal":
                proc.send_signal(signal.SIGINT)
                rest = [json.loads(line) for line in proc.stdout]
                assert [f["cause"] for f in rest if f["type"] == "error"] == ["cancelled"]
            else:
                proc.stdout.close()
            assert proc.wait(timeout=30) == 130, how
            assert proc.stderr.read() == b"", how


def test_a_closed_pipe_ends_a_remote_history_command_quietly(server: Server) -> None:
    remote = ["--remote", server.url, "--token-file", "token"]
    ran = mcpx("exec", *remote, "--json", "--", "seq", "1", "30000", cwd=server.cwd)
    run_id = json.loads(ran.stdout.splitlines()[0])["runId"]
    argv = [*CLI, "runs", "show", run_id, *remote]
    assert _first_line_then_gone(argv, server.cwd, ENV) == (130, "")


def test_remote_view_says_which_hook_is_still_running(server: Server) -> None:
    fifo = server.cwd / "go-remote"
    os.mkfifo(fifo)
    waits = hook(name="waits", phase="before", run=["sh", "-c", f"cat {fifo.name} >/dev/null"])
    remote = ["--remote", server.url, "--token-file", "token"]
    with subprocess.Popen(
        [*CLI, "exec", *remote, "--hook", waits, "--", "true"],
        cwd=server.cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "still running" in line:
                fifo.write_text("")
                break
        seen.extend(proc.stdout)
        assert proc.wait(timeout=30) == 0
    assert seen[1] == "hook waits (script.before): still running after 1 s...\n"
    assert seen[2].startswith("hook waits (script.before, run, sandbox none): ok in ")


def test_remote_second_ctrl_c_names_the_hook_the_server_still_runs_and_a_third_leaves(
    server: Server, marker: Any
) -> None:
    """The second Ctrl-C of `exec --remote` used to leave at once, silently, while the
    server ran the cancelled run's suffix hook on to its timeout. It now stops printing and
    names the hook the server still runs; a third leaves (exit 130), saying the server runs
    it to its end and where the run's end will be. (The wire cannot kill it: it ends here
    when the test lets it.)"""
    started, go = server.cwd / "started-2c", server.cwd / "go-2c"
    os.mkfifo(started)
    os.mkfifo(go)
    stubborn = f"trap '' INT TERM; echo up > {started.name}; cat {go.name} >/dev/null; : $0"
    slow = hook(name="slow", phase="suffix", timeoutMs=120_000, run=["sh", "-c", stubborn, marker])
    remote = ["--remote", server.url, "--token-file", "token"]
    with subprocess.Popen(
        [*CLI, "exec", *remote, "--hook", slow, "--", "sh", "-c", SLEEPER],
        cwd=server.cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        while "ready" not in proc.stdout.readline():
            pass
        proc.send_signal(signal.SIGINT)
        assert started.read_text() == "up\n"
        while "hook slow (script.suffix): still running" not in proc.stdout.readline():
            pass  # (the view has heard the hook start from the server's events)
        proc.send_signal(signal.SIGINT)
        said = proc.stderr.readline()
        assert said == (
            "mcpx-hooks exec: stopping; the server still runs hook slow (script.suffix), killed"
            " at its timeoutMs; Ctrl-C again to leave now (the server runs it to the end all the"
            " same)\n"
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        left = proc.stderr.read()
        assert left.startswith(
            "mcpx-hooks exec: leaving; the server runs hook slow (script.suffix) to its end all"
            " the same (the run's end is in its history: mcpx-hooks runs show "
        ), left
        assert proc.stdout.read() == ""  # nothing printed after the second Ctrl-C
    go.write_text("")  # the hook ends; the server's run with it
    psutil.wait_procs(marker.alive(), timeout=30)
    # What the line says to run shows the run's end there: cancelled, its suffix hook done.
    shown = left.split("history: ", 1)[1].removesuffix(")\n").split()
    assert shown[:3] == ["mcpx-hooks", "runs", "show"] and shown[4:6] == ["--remote", server.url]
    done = subprocess.run(
        [*CLI, *shown[1:], "--token-file", "token", "--json"],
        cwd=server.cwd, env=ENV, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr  # (it showed the run)
    assert [f.get("cause") for f in frames if f["type"] == "error"] == ["cancelled"]
    assert [f["name"] for f in frames if f["type"] == "hook"] == ["slow"]
    assert frames[-1]["type"] == "end"


def test_remote_json_second_ctrl_c_waits_for_the_end_and_prints_no_more(
    server: Server, marker: Any
) -> None:
    """With --json the view follows no events, so the second Ctrl-C says it waits for the
    run's end; it prints no more frames, and exits 130 once the server's run has ended."""
    started, go = server.cwd / "started-2j", server.cwd / "go-2j"
    os.mkfifo(started)
    os.mkfifo(go)
    stubborn = f"trap '' INT TERM; echo up > {started.name}; cat {go.name} >/dev/null; : $0"
    slow = hook(name="slow", phase="suffix", timeoutMs=120_000, run=["sh", "-c", stubborn, marker])
    remote = ["--remote", server.url, "--token-file", "token", "--json"]
    with subprocess.Popen(
        [*CLI, "exec", *remote, "--hook", slow, "--", "sh", "-c", SLEEPER],
        cwd=server.cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        while json.loads(proc.stdout.readline()).get("text") != "ready":
            pass
        proc.send_signal(signal.SIGINT)
        assert started.read_text() == "up\n"
        while json.loads(proc.stdout.readline()).get("type") != "error":
            pass  # (the cancel has reached the server and come back)
        proc.send_signal(signal.SIGINT)
        assert proc.stderr.readline() == (
            "mcpx-hooks exec: stopping; waiting for the run's end on the server (its suffix"
            " hooks run there, each until its timeoutMs); Ctrl-C again to leave now\n"
        )
        go.write_text("")  # the hook ends, then the run
        assert proc.wait(timeout=30) == 130
        assert proc.stdout.read() == "" and proc.stderr.read() == ""
    psutil.wait_procs(marker.alive(), timeout=30)


def test_remote_view_of_a_server_that_dies_mid_run_ends_without_a_traceback(
    tmp_path: Path,
) -> None:
    """The server is killed while a hook runs: the run's stream and the events the view
    follows (for its "still running" line) both break. `exec` says so and exits 1; no
    traceback reaches the person."""
    server = start_server(tmp_path)
    try:
        fifo = tmp_path / "never"
        os.mkfifo(fifo)
        waits = hook(
            name="waits", phase="before", sandbox="strict", run=["sh", "-c", f"cat {fifo.name}"]
        )
        remote = ["--remote", server.url, "--token-file", "token"]
        with subprocess.Popen(
            [*CLI, "exec", *remote, "--hook", waits, "--", "true"],
            cwd=tmp_path,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            for line in proc.stdout:
                if "still running" in line:  # both streams are open now
                    server.proc.send_signal(signal.SIGKILL)
                    break
            rest, err = proc.communicate(timeout=30)
    finally:
        server.stop(signal=None if server.proc.poll() is not None else signal.SIGTERM)
    assert proc.returncode == 1, (rest, err)
    assert "Traceback" not in err and "Exception Group" not in err, err
    assert err.startswith("mcpx-hooks exec: "), err


@pytest.mark.parametrize(
    "command",
    [
        ["exec", "--", "true"],
        ["exec", "--json", "--", "true"],
        ["hooks", "list"],
        ["runs", "list"],
    ],
    ids=["exec", "exec-json", "hooks-list", "runs-list"],
)
def test_a_remote_command_closes_its_sockets(server: Server, command: list[str]) -> None:
    """Under `-X dev` every socket and generator left to the garbage collector is said on
    stderr (ResourceWarning): a remote command closes what it opened, whoever closed first."""
    where = ["--remote", server.url, "--token-file", "token"]
    split = 1 if command[0] == "exec" else 2  # (exec's argv after --)
    argv = [sys.executable, "-X", "dev", *CLI[1:], *command[:split], *where, *command[split:]]
    done = subprocess.run(
        argv, cwd=server.cwd, env=ENV, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "command",
    [["validate"], ["hooks", "list"], ["exec", "--", "true"], ["trust"], ["runs", "list"]],
)
def test_a_working_directory_removed_under_the_shell_is_said_not_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    """A CI checkout cleaned while a shell sat in it: every command that finds its configs
    from the working directory died with a FileNotFoundError traceback."""
    gone = tmp_path / "checkout"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    done = subprocess.run(
        ["sh", "-c", script, "sh", str(gone), sys.executable, "-m", "mcpx_hooks.supervisor",
         *command],
        check=False, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "MCPX_HOOKS_NO_DISCOVERY"},
    )  # fmt: skip
    assert done.returncode == 2, done
    assert done.stderr == (
        f"mcpx-hooks {command[0]}: the working directory no longer exists (it was removed after"
        " this shell entered it): cd to one that exists, then run the command again\n"
    )
