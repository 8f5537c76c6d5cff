"""`mcpx-hooks servers list` and `doctor` on tool servers: the real command, real servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
EXAMPLE = Path(__file__).parent.parent / "supervisor" / "examples" / "tools" / "wordtools.py"


def project(tmp_path: Path) -> Path:
    """A project declaring the example server (under strict, beside its config) and one
    that cannot start."""
    tmp_path.chmod(0o755)
    shutil.copy(EXAMPLE, tmp_path / "wordtools.py")
    (tmp_path / "tools.toml").write_text(
        f'[servers.words]\ncommand = ["{sys.executable}", "wordtools.py"]\n\n'
        f'[servers.broken]\ncommand = ["{sys.executable}", "-c", "raise SystemExit(\'no\')"]\n'
        'sandbox = "none"\n'
    )
    return tmp_path / "tools.toml"


def mcpx(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI in `cwd`, discovery off unless `env` (the whole environment) is given."""
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"} if env is None else env
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_servers_list_starts_each_server_and_shows_its_state_and_tools(tmp_path: Path) -> None:
    config = project(tmp_path)
    done = mcpx(tmp_path, "servers", "list", "--config", str(config), "--json")
    assert done.returncode == 1, done.stderr  # one of them fails
    words, broken = json.loads(done.stdout)
    assert words["state"] == "running" and words["server"]["name"] == "wordtools"
    tools = {t["name"]: t.get("annotations") for t in words["tools"]}
    assert tools["remove"] == {"destructiveHint": True}
    assert broken["state"] == "failing"
    assert broken["reason"] == "server broken exited with status 1; its stderr ends: no"
    text = mcpx(tmp_path, "servers", "list", "--config", str(config))
    assert "words (wordtools 1.0): running since" in text.stdout
    assert "  - remove  [destructiveHint=True]" in text.stdout
    assert "broken: failing: server broken exited with status 1" in text.stdout
    assert "Traceback" not in text.stdout + text.stderr


def test_servers_list_without_starting_and_with_none_declared(tmp_path: Path) -> None:
    config = project(tmp_path)
    done = mcpx(tmp_path, "servers", "list", "--config", str(config), "--no-start", "--json")
    assert done.returncode == 0
    assert [(s["name"], s["state"]) for s in json.loads(done.stdout)] == [
        ("words", "idle"),
        ("broken", "idle"),
    ]
    none = mcpx(tmp_path, "servers", "list")
    assert none.returncode == 0 and none.stdout.startswith("no tool servers declared")


def test_a_server_s_command_and_install_step_are_shown_as_a_shell_takes_them_back(
    tmp_path: Path,
) -> None:
    """An argument with a space, or an empty one (npx's `node -e ""`), is seen as one: the
    command line is quoted, not joined with spaces (`-c import time; …`, `node -e )`)."""
    tmp_path.chmod(0o755)
    (tmp_path / "t.toml").write_text(
        '[servers.n]\ncommand = ["npx", "-y", "some pkg"]\n'
        'install = ["sh", "-c", "echo failing >&2; exit 3", ""]\n'
    )
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(tmp_path)}
    done = mcpx(tmp_path, "servers", "list", "--config", "t.toml", env=env)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "n: failing: server n: its install step (sh -c 'echo failing >&2; exit 3' '') failed"
        " (status 3); its stderr ends: failing",
        "  command: npx -y 'some pkg'",
    ]


def test_doctor_names_the_servers_that_fail_to_start(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "tools.toml").rename(tmp_path / ".mcpx-hooks.toml")
    env = {**os.environ, "MCPX_HOOKS_TRUST": "all"}
    done = mcpx(tmp_path, "doctor", env=env)
    assert done.returncode == 1
    assert (
        "tool servers that fail to start:\n  broken: failing: server broken exited" in done.stdout
    )
    assert "words:" not in done.stdout.split("tool servers that fail to start:")[1]


def test_a_failing_server_s_words_reach_the_terminal_without_control_characters(
    tmp_path: Path,
) -> None:
    # `trust --servers` and `servers diff` said a server's stderr tail as it came: ESC went
    # to the terminal, and a line break started a line that read as ours.
    script = "printf 'oops\\033[2J\\nend: exit code 0\\n' >&2; exit 3"
    config = tmp_path / "bad.toml"
    config.write_text(f"[servers.bad]\ncommand = {json.dumps(['sh', '-c', script])}\n")
    shown = "its stderr ends: oops\\x1b[2J\n    end: exit code 0"
    for args in (["trust", "--servers"], ["servers", "diff", "bad"]):
        done = mcpx(tmp_path, *args, "--config", str(config))
        assert done.returncode == 1, done.stderr
        assert "\x1b" not in done.stderr and shown in done.stderr, done.stderr
    # The reference's table for `trust` says what that 1 means.
    from mcpx_hooks.supervisor.cli.common import COMMAND_EXIT_CODES

    assert "with `--servers`, a server that cannot be" in dict(COMMAND_EXIT_CODES["trust"])[1]


def test_a_failing_server_s_stderr_is_shown_as_lines_from_a_line_s_start(tmp_path: Path) -> None:
    # `servers list` showed it on one line with literal "\n", from mid-line ("rong here\n
    # line 26: …"): the last 500 bytes, wherever they began.
    script = 'for i in $(seq 0 39); do echo "line $i: something went wrong here" >&2; done; exit 3'
    config = tmp_path / "bad.toml"
    config.write_text(f"[servers.bad]\ncommand = {json.dumps(['sh', '-c', script])}\n")
    kept = [f"line {i}: something went wrong here" for i in range(26, 40)]  # (within 500 bytes)
    said = "failing: server bad exited with status 3; its stderr ends: "
    done = mcpx(tmp_path, "servers", "list", "--config", str(config))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[:14] == [
        f"bad: {said}{kept[0]}",
        *(f"    {line}" for line in kept[1:]),
    ], done.stdout
    done = mcpx(tmp_path, "doctor", "--config", str(config))
    assert f"  bad: {said}{kept[0]}\n      {kept[1]}\n" in done.stdout, done.stdout


def test_a_server_s_secret_in_its_version_or_tools_is_never_written_out(tmp_path: Path) -> None:
    # A server given a secret that names it in its `initialize` (version) or in a tool's
    # description had it shown by `servers list` (readable and --json), and written into
    # the trust state by `trust --servers` (the pinned tool list): only its failures were
    # redacted.
    hostile = Path(__file__).parent / "mcpservers" / "hostile.py"
    tmp_path.chmod(0o755)
    command = [sys.executable, str(hostile), "leak"]
    config = tmp_path / "leak.toml"
    config.write_text(
        f'[servers.h]\ncommand = {json.dumps(command)}\nsandbox = "none"\n'
        'secrets = ["MCPX_TEST_TOKEN"]\n'
    )
    token = "hunter2-is-the-password"
    env = {
        **os.environ,
        "MCPX_HOOKS_NO_DISCOVERY": "1",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "MCPX_TEST_TOKEN": token,
    }
    said = []
    for args in (["servers", "list"], ["servers", "list", "--json"], ["trust", "--servers"]):
        done = mcpx(tmp_path, *args, "--config", str(config), env=env)
        assert done.returncode == 0, done.stderr
        said.append(done.stdout + done.stderr)
    assert "h (hostile leak [secret MCPX_TEST_TOKEN]): running since" in said[0]
    (shown,) = json.loads(said[1])
    assert shown["server"]["version"] == "leak [secret MCPX_TEST_TOKEN]"
    assert {t["description"] for t in shown["tools"]} == {"uses [secret MCPX_TEST_TOKEN]"}
    assert token not in "".join(said)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    assert written == []


def test_the_server_settings_are_documented_from_the_table() -> None:
    from mcpx_hooks.supervisor.core.servers import SERVER_SETTINGS

    page = (Path(__file__).parent.parent / "docs" / "tool-servers.md").read_text()
    for setting in SERVER_SETTINGS:
        assert f"| `{setting.key}` | {setting.default} |" in page.replace("`strict`", "strict")


async def test_servers_list_remote_shows_a_running_service_s_servers_as_they_are(
    tmp_path: Path, no_leaks: None
) -> None:
    import trio

    from mcpx_hooks.supervisor.config.loading import load_config
    from mcpx_hooks.supervisor.run.runtime import open_runtime
    from mcpx_hooks.supervisor.service.options import Listening, ServiceOptions
    from mcpx_hooks.supervisor.service.server import Service

    config = load_config([project(tmp_path)], cwd=tmp_path, environ=os.environ, discover=False)
    words = config.servers["words"]
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        service = Service(runtime, ServiceOptions(host="127.0.0.1", port=0, token=None))
        listening: Listening = await nursery.start(service.serve)
        argv = [*CLI, "servers", "list", "--remote", listening.url, "--json"]
        before = await trio.run_process(argv, capture_stdout=True, check=False)
        assert runtime.servers is not None
        await runtime.servers.call(words, "count", {"text": "x"})
        after = await trio.run_process(argv, capture_stdout=True, check=False)
        service.stop()
    assert before.returncode == 0
    assert [(s["name"], s["state"]) for s in json.loads(before.stdout)] == [
        ("words", "idle"),
        ("broken", "idle"),
    ]
    running = json.loads(after.stdout)[0]
    assert running["state"] == "running" and "since" in running and running["tools"]


@pytest.mark.parametrize(
    ("table", "pointer", "words"),
    [
        ('[servers.s]\ncommand = "python3 srv.py"\n', "/servers/s/command", "array"),
        ('[servers."a.b"]\ncommand = ["x"]\n', "/servers/a.b", '"a.b"'),
        ('[servers.s]\ncommand = ["x"]\nidleMs = 0\n', "/servers/s/idleMs", "≥ 1"),
        ('[servers.s]\ncommand = ["x"]\nsandbox = "loose"\n', "/servers/s/sandbox", "loose"),
        ('[servers.s]\ncommand = ["x"]\nport = 1\n', "/servers/s/port", "one of: command"),
        ("[servers.s]\nidleMs = 5\n", "/servers/s", "command"),
        (
            '[servers.s]\ncommand = ["x"]\nenv = { T = "${TOKEN}" }\n',
            "/servers/s/env/T",
            'passEnv = ["TOKEN"]',
        ),
    ],
)
def test_a_bad_server_table_is_refused_with_its_pointer(
    tmp_path: Path, table: str, pointer: str, words: str
) -> None:
    from mcpx_hooks.supervisor.config.loading import validate_files

    path = tmp_path / "c.toml"
    path.write_text(table)
    (problem,) = validate_files([path])
    assert (problem.file, problem.pointer) == (str(path), pointer), problem
    assert words in problem.message


def test_doctor_still_reports_the_sandbox_when_the_config_does_not_load(tmp_path: Path) -> None:
    (tmp_path / ".mcpx-hooks.toml").write_text('[servers.s]\ncommand = "x"\n')
    env = {**os.environ, "MCPX_HOOKS_TRUST": "all"}
    done = mcpx(tmp_path, "doctor", env=env)
    assert "profiles:" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert "tool servers: the config does not load (1 problem(s);" in done.stdout
