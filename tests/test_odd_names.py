"""Names that are not UTF-8 on the way to the spawner, through real `mcpx-hooks` processes:
a config file, a declaring directory, a `[sandbox] read` and `write` under it. Each is
granted (or kept read-only) byte for byte; the request's JSON carries each byte that is not
UTF-8 as the surrogate Python reads it as, which the spawner takes in a path only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def mcpx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MCPX_HOOKS_NO_DISCOVERY"}
    env.update(HOME=str(cwd / "home"), XDG_STATE_HOME=str(cwd / "home" / "state"))
    out = subprocess.run(
        [*CLI, *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in out.stderr and "bad spawn request" not in out.stdout, out.stdout
    return out


def test_a_config_file_whose_name_is_not_utf8_is_kept_read_only(readable_tmp: Path) -> None:
    # It was "bad spawn request: sandbox.readOnly[0]: holds a lone surrogate", the run failed.
    (readable_tmp / "home").mkdir()
    name = os.fsdecode(b"g\xff.toml")
    (readable_tmp / name).write_text("")
    (readable_tmp / name).chmod(0o666)  # (so only the view can stop a write)
    write = 'printf x >> "$(printf "g\\377.toml")"'
    out = mcpx("exec", "--config", name, "--", "sh", "-c", write, cwd=readable_tmp)
    assert out.returncode == 2, out.stdout  # the script's own failure: read-only
    assert "Read-only file system" in out.stdout
    assert (readable_tmp / name).read_text() == ""
    out = mcpx("exec", "--config", name, "--", "true", cwd=readable_tmp)
    assert out.returncode == 0, out.stdout


def test_grants_under_a_directory_whose_name_is_not_utf8(readable_tmp: Path) -> None:
    (readable_tmp / "home").mkdir()
    odd = readable_tmp / os.fsdecode(b"p\xfe")
    (odd / "in").mkdir(parents=True)
    (odd / "out").mkdir()
    (odd / "in" / "data").write_text("read me")
    (odd / "c.toml").write_text('[sandbox]\nread = ["in"]\nwrite = ["out"]\n')
    script = 'd="p$(printf "\\376")"; cat "$d/in/data" > "$d/out/copy"'
    config = str(odd / "c.toml")
    out = mcpx("exec", "--sandbox", "strict", "--config", config, "--", "sh", "-c", script,
               cwd=readable_tmp)  # fmt: skip
    assert out.returncode == 0, out.stdout
    assert (odd / "out" / "copy").read_text() == "read me"


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", ""],
        ["runs", "show", " ", "--remote", "ws://127.0.0.1:9"],
        ["runs", "search", "x", "--run", ""],
        ["runs", "verify", ""],
    ],
)
def test_an_empty_run_id_is_a_usage_error(argv: list[str]) -> None:
    # `runs show ""` said "no run '' is kept" (exit 1); `runs search x --run ""` found nothing.
    from mcpx_hooks.supervisor.cli.parser import parser

    with pytest.raises(SystemExit) as exited:
        parser().parse_args(argv)
    assert exited.value.code == 2


def test_hook_test_refuses_a_key_given_twice(tmp_path: Path) -> None:
    # `--event` and `--hook` kept the last of two keys without a word (a config file's JSON
    # refuses it at its pointer): the hook was tested against what was not written.
    (tmp_path / "home").mkdir()
    (tmp_path / "ev.json").write_text('{"input": {"a": 1, "a": 2}}')
    hook = '{"run": ["cat"], "sandbox": "none"}'
    out = mcpx("hook", "test", "--hook", hook, "--phase", "before", "--event", "ev.json",
               cwd=tmp_path)  # fmt: skip
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        'mcpx-hooks hook test: ev.json:/input/a: the key "a" is given more than once\n'
    )
    twice = '{"run": ["true"], "run": ["false"], "sandbox": "none"}'
    out = mcpx("hook", "test", "--hook", twice, "--phase", "before", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (2, "")
    assert '--hook #1:/run: the key "run" is given more than once' in out.stderr


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_exec_input_refuses_a_key_given_twice(tmp_path: Path, remote: bool) -> None:
    # `exec --input '{"a":1,"a":2}'` ran the script with {"a": 2} without a word, where a
    # config file's JSON and `hook test --event` refuse the key at its pointer. Refused
    # before anything runs or connects (the remote is a port nothing listens on).
    (tmp_path / "home").mkdir()
    far = ["--remote", "ws://127.0.0.1:9"] if remote else []
    twice = '{"a": 1, "b": {"c": 1, "c": 2}, "a": 2}'
    out = mcpx("exec", *far, "--input", twice, "--", "touch", "ran", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        'mcpx-hooks exec: --input:/b/c: the key "c" is given more than once (and 1 more)\n'
    )
    assert not (tmp_path / "ran").exists()


def test_an_argument_that_is_not_utf8_is_named_as_bash_quotes_it(readable_tmp: Path) -> None:
    # It was "argv[0]: holds a lone surrogate (not valid Unicode)", naming nothing a person
    # could find: the argument is now named, with why and what to do.
    (readable_tmp / "home").mkdir()
    name = os.fsdecode(b"./j\xff.py")
    why = " is not UTF-8 (a run's command line is sent as text); give it in UTF-8"
    out = mcpx("exec", "--", name, "a", cwd=readable_tmp)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith(f"mcpx-hooks exec: argv[0]: $'./j\\xff.py'{why}")
    out = mcpx("exec", "--python", name, cwd=readable_tmp)
    assert out.stderr.startswith(f"mcpx-hooks exec: --python: $'./j\\xff.py'{why}")
