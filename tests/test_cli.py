"""The command line as a user runs it: a real `python -m mcpx_hooks.supervisor` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from importset import imported_by

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def mcpx(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    return subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


CONFIG = """
[defaults]
sandbox = "none"

[[hooks]]
name = "ok"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"advise\\": \\"fine\\"}'"]

[[hooks]]
name = "double"
on = "script"
phase = "onSuccess"
module = "double.py"
effect = "apply"

[[hooks]]
name = "hangs"
on = "script"
phase = "before"
run = ["sleep", "30"]
timeoutMs = 200
killGraceMs = 50

[[hooks]]
name = "off"
on = "script"
phase = "before"
run = ["true"]
enabled = false
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hooks.toml").write_text(CONFIG)
    (tmp_path / "double.py").write_text(
        "def hook(p):\n    return {'apply': {'value': p['result']['value'] * 2}}\n"
    )
    return tmp_path


def test_version(tmp_path: Path) -> None:
    out = mcpx("--version", cwd=tmp_path)
    assert out.returncode == 0
    # The package's `__version__`, read instead of the (slow) installed metadata, is that.
    assert out.stdout == f"mcpx-hooks {metadata.version('mcpx-hooks')}\n"


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_heavy_dependency(tmp_path: Path, args: list[str]) -> None:
    heavy = {"trio", "attrs", "attr", "cattrs", "jsonschema", "trio_websocket", "wsproto"}
    assert not imported_by(args, tmp_path) & heavy


def test_hook_test_imports_no_server_or_websocket(tmp_path: Path) -> None:
    hook = json.dumps({"run": ["true"], "sandbox": "none"})
    modules = imported_by(["hook", "test", "--hook", hook, "--phase", "before"], tmp_path)
    assert "mcpx_hooks.supervisor.run.hookrun" in modules  # it did run the hook
    unneeded = {"trio_websocket", "wsproto"} | {
        f"mcpx_hooks.supervisor.{name}"
        for name in ("service.server", "service.remote", "run.runtime", "config.docgen")
    }
    assert not modules & unneeded


def test_validate_ok_and_every_problem(project: Path) -> None:
    assert mcpx("validate", "hooks.toml", cwd=project).returncode == 0
    (project / "bad.toml").write_text(
        '[[hooks]]\nname = "x"\non = "script"\nphase = "before"\nrun = "echo hi"\n'
        'timeoutMS = 5\n\n[[hooks]]\non = "script"\nphase = "sometime"\nrun = ["true"]\n'
    )
    out = mcpx("validate", "bad.toml", cwd=project)
    assert out.returncode == 2
    assert "bad.toml:/hooks/0/run:" in out.stdout and "never a shell string" in out.stdout
    assert "bad.toml:/hooks/0/timeoutMS:" in out.stdout and "timeoutMs" in out.stdout
    assert "bad.toml:/hooks/1/phase:" in out.stdout


def test_hooks_list_shows_provenance(project: Path) -> None:
    out = mcpx("hooks", "list", "--config", "hooks.toml", "--json", cwd=project)
    assert out.returncode == 0, out.stderr
    hooks = json.loads(out.stdout)
    assert [h["name"] for h in hooks] == ["ok", "double", "hangs", "off"]
    assert hooks[2]["source"] == {"file": str(project / "hooks.toml"), "index": 2}
    assert hooks[3]["enabled"] is False
    assert hooks[0]["timeoutMs"] == 10000  # the default
    human = mcpx("hooks", "list", "--config", "hooks.toml", cwd=project)
    assert "off (disabled)" in human.stdout and "hooks.toml:/hooks/2" in human.stdout


def test_schema_prints_each_schema(tmp_path: Path) -> None:
    names = mcpx("schema", cwd=tmp_path).stdout.split()
    assert names == ["config", "hook-input", "hook-output"]
    for name in names:
        doc = json.loads(mcpx("schema", name, cwd=tmp_path).stdout)
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_hook_test_ok_prints_frame(project: Path) -> None:
    out = mcpx(
        "hook", "test", "ok", "--phase", "before", "--config", "hooks.toml", "--json", cwd=project
    )
    assert out.returncode == 0, out.stderr
    frame = json.loads(out.stdout)
    assert frame["type"] == "hook" and frame["status"] == "ok"
    assert frame["advice"] == ["fine"]


def test_hook_test_event_file_is_merged(project: Path) -> None:
    (project / "event.json").write_text(json.dumps({"result": {"value": 41}}))
    out = mcpx(
        "hook",
        "test",
        "double",
        "--phase",
        "onSuccess",
        "--event",
        "event.json",
        "--config",
        "hooks.toml",
        "--json",
        cwd=project,
    )
    assert out.returncode == 0, out.stderr
    frame = json.loads(out.stdout)
    assert (frame["changed"], frame["original"], frame["value"]) == (True, 41, 82)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["exec", "--stdin", "/dev/zero", "--", "true"], "--stdin /dev/zero: over 67108864 bytes"),
        (["exec", "--stdin", "-", "--", "true"], "--stdin -: over 67108864 bytes"),
        (
            ["hook", "test", "double", "--config", "hooks.toml", "--event", "/dev/zero"],
            "--event /dev/zero: over 16777216 bytes",
        ),
    ],
    ids=["stdin-file", "stdin-stream", "event"],
)
def test_an_input_that_never_ends_is_refused_not_held(
    project: Path, args: list[str], said: str
) -> None:
    # Read no further than the bound (the machine's memory was the only one before).
    with open("/dev/zero", "rb") as zero:
        out = subprocess.run(
            [*CLI, *args],
            check=False, cwd=project, stdin=zero, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out


def test_hook_test_timeout_exits_1_with_readable_view(project: Path) -> None:
    out = mcpx("hook", "test", "hangs", "--phase", "before", "--config", "hooks.toml", cwd=project)
    assert out.returncode == 1
    assert "FAILED [timeout]" in out.stdout
    assert "failure is open" in out.stdout


def test_hook_test_inline_hook(tmp_path: Path) -> None:
    hook = {"run": ["sh", "-c", 'echo \'{"apply": {"value": 1}}\''], "sandbox": "none"}
    out = mcpx(
        "hook", "test", "--hook", json.dumps(hook), "--phase", "before", "--json", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    frame = json.loads(out.stdout)
    assert frame["dropped"] == [{"key": "apply", "reason": "needs effect apply; in force: advise"}]


def test_hook_test_unknown_name_and_bad_hook_exit_2(project: Path) -> None:
    out = mcpx("hook", "test", "nope", "--phase", "before", "--config", "hooks.toml", cwd=project)
    assert out.returncode == 2 and "no hook named 'nope'" in out.stderr
    out = mcpx("hook", "test", "--hook", '{"run": "ls -l"}', "--phase", "before", cwd=project)
    assert out.returncode == 2 and "--hook #1:/run" in out.stderr


def test_demo_runs_and_ends(tmp_path: Path) -> None:
    out = mcpx("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for expected in (
        "FAILED [timeout]",
        "dropped: apply",
        "applies:",
        "effect off",
        "refused by check-input",
        'ws> RESULT "HELLO, WEBSOCKET"',
    ):
        assert expected in out.stdout


def test_exec_json_frames_in_order_and_exit_code(project: Path) -> None:
    from mcpx_hooks.supervisor.core.order import check_order

    out = mcpx(
        "exec", "--config", "hooks.toml", "--json", "--", "sh", "-c", "echo 5; exit 4", cwd=project
    )
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    check_order(frames)
    assert out.returncode == 4  # the script's exit code
    assert [f["name"] for f in frames if f["type"] == "hook"] == ["ok", "hangs"]
    ok = mcpx("exec", "--config", "hooks.toml", "-c", "def main():\n    return 3", cwd=project)
    assert ok.returncode == 0, ok.stderr
    assert "RESULT 6" in ok.stdout  # `double` applied on success
    refused = mcpx(
        "exec",
        "--hook",
        json.dumps(
            {
                "on": "script",
                "phase": "before",
                "run": ["sh", "-c", 'echo \'{"refuse": "no"}\''],
                "effect": "ask",
                "sandbox": "none",
            }
        ),
        "--",
        "true",
        cwd=project,
    )
    assert refused.returncode == 3  # refused by a hook
    assert "refused by script.before.0" in refused.stdout


def test_exec_sandbox_sets_the_runs_profile_only(tmp_path: Path) -> None:
    hook = json.dumps({"on": "script", "phase": "before", "run": ["true"]})
    frames = {}
    for flags in ([], ["--sandbox", "strict"], ["--sandbox", "none"]):
        out = mcpx("exec", "--json", *flags, "--hook", hook, "--", "true", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        got = [json.loads(line) for line in out.stdout.splitlines()]
        frames[tuple(flags)] = got
        (h,) = [f for f in got if f["type"] == "hook"]
        assert h["sandbox"] == "strict"  # the hook's profile is not the run's
    starts = {k: [f["sandbox"] for f in v if f["type"] == "start"] for k, v in frames.items()}
    assert starts == {
        (): ["workspace"],
        ("--sandbox", "strict"): ["strict"],
        ("--sandbox", "none"): ["none"],
    }
    bad = mcpx("exec", "--sandbox", "loose", "--", "true", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'loose'" in bad.stderr


def test_exec_remote_sends_the_sandbox(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.cli import exec as cli_exec
    from mcpx_hooks.supervisor.cli.parser import parser

    args = parser().parse_args(["exec", "--sandbox", "strict", "--", "true"])
    assert cli_exec.remote_request(args)["sandbox"] == "strict"
    args = parser().parse_args(["exec", "--", "true"])
    assert "sandbox" not in cli_exec.remote_request(args)


def test_exec_has_a_source_flag_per_source_phase() -> None:
    from mcpx_hooks.supervisor.cli import exec as cli_exec
    from mcpx_hooks.supervisor.cli.parser import parser

    flags = ["--before", "--prefix", "--on-success", "--on-error", "--suffix"]
    given = [arg for i, flag in enumerate(flags) for arg in (flag, f"x = {i}")]
    args = parser().parse_args(["exec", *given, "--", "true"])
    assert cli_exec.remote_request(args)["script"] == {
        "before": [None, "x = 0"],
        "prefix": [None, "x = 1"],
        "onSuccess": [None, "x = 2"],
        "onError": [None, "x = 3"],
        "suffix": [None, "x = 4"],
    }


def test_exec_source_flags(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[defaults]\nsandbox = "none"\n[script]\nbefore = ["x = 1"]\n')
    out = mcpx(
        "exec",
        "--config",
        "c.toml",
        "--before",
        "y = x + 1",
        "--on-success",
        "print('ok', y, result)",
        "-c",
        "def main():\n    return 'r'",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "| ok 2 r" in out.stdout


def test_exec_ctrl_c_cancels_runs_suffix_and_leaves_nothing(tmp_path: Path) -> None:
    import signal

    import psutil

    from mcpx_hooks.supervisor.core.order import check_order

    marker = f"mcpx-ctrl-c-{os.getpid()}"
    (tmp_path / "c.toml").write_text(
        '[defaults]\nsandbox = "none"\n[[hooks]]\nname = "fin"\non = "script"\n'
        'phase = "suffix"\nrun = ["sh", "-c", "echo \'{\\"advise\\": \\"cleaned\\"}\'"]\n'
    )
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    with subprocess.Popen(
        [
            *CLI,
            "exec",
            "--config",
            "c.toml",
            "--json",
            "--",
            "sh",
            "-c",
            f"echo ready; exec {sys.executable} -c 'import time; time.sleep(60)' {marker}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        frames = []
        for line in proc.stdout:
            frames.append(json.loads(line))
            if frames[-1].get("text") == "ready":
                proc.send_signal(signal.SIGINT)
                break
        frames.extend(json.loads(line) for line in proc.stdout)
        assert proc.wait(timeout=30) == 130  # cancelled
    check_order(frames)
    error = next(f for f in frames if f["type"] == "error")
    assert error["message"] == "cancelled"
    assert [f["advice"] for f in frames if f["type"] == "hook"] == [["cleaned"]]
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []


def test_doctor_reports_each_profile(tmp_path: Path) -> None:
    out = mcpx("doctor", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for profile in ("strict", "net", "none"):
        assert f"\n  {profile} " in out.stdout


def test_doctor_prints_a_config_s_paths_without_their_control_characters(tmp_path: Path) -> None:
    # A path from a config (the history's, a never-granted one) holding a line break and ESC
    # could start a line that reads as doctor's own, or move the cursor: both are escaped, the
    # path written whole as bash quotes it.
    bad = "x\nprofiles:\n  strict    enforceable: \x1b[2Jfake"
    history = tmp_path / f"h{bad}" / "history.db"
    deny = tmp_path / f"d{bad}"
    (tmp_path / "c.toml").write_text(
        f"[history]\npath = {json.dumps(str(history))}\n"
        f"[sandbox]\ndeny = [{json.dumps(str(deny))}]\n"
    )
    (tmp_path / ".mcpx-hooks.toml").write_text(f"[sandbox]\ndeny = [{json.dumps(str(deny))}]\n")
    env = {**os.environ, "MCPX_HOOKS_TRUST": "all"}
    out = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "doctor", "--config", "c.toml"],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    assert "\x1b" not in out.stdout, out.stdout
    assert out.stdout.splitlines().count("profiles:") == 1, out.stdout
    escaped = "x\\nprofiles:\\n  strict    enforceable: \\x1b[2Jfake"
    history_line = next(x for x in out.stdout.splitlines() if x.startswith("run history:"))
    assert escaped in history_line, history_line
    assert f"run history: $'{tmp_path}/h{escaped}/history.db'" in history_line
    assert any(x.startswith(f"  $'{tmp_path}/d{escaped}'") for x in out.stdout.splitlines()), (
        out.stdout
    )


@pytest.mark.parametrize(
    "command",
    [
        *([], ["hook"], ["hook", "test"], ["exec"], ["hooks"], ["hooks", "list"], ["serve"]),
        *(["events"], ["validate"], ["schema"], ["init"], ["demo"], ["doctor"]),
    ],
)
def test_help_never_mentions_the_spec(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from mcpx_hooks.supervisor.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert "usage: mcpx-hooks" in shown
    assert "SPEC" not in shown and "§" not in shown
