"""The operator's commands through real `mcpx-hooks` processes: `validate` in one pass (with
no FILE: the layers found here, with trust; `--json`), `hook test` and its exit status,
`init`, the token file across restarts and a busy port, and `exec --remote` carrying the
caller's directory and hooks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from service_client import start_server

from mcpx_hooks.supervisor.core.order import check_order

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def environment(tmp_path: Path) -> dict[str, str]:
    """Discovery on, with a home of the test's own (its user config, its trust store)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MCPX_HOOKS_NO_DISCOVERY", "MCPX_HOOKS_TRUST", "MCPX_HOOKS_TOKEN")
    }
    home = tmp_path / "home"
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
    )
    return env


def mcpx(
    *args: str, cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [*CLI, *args],
        check=False,
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in out.stderr and "Exceptions from Trio" not in out.stderr
    return out


# ---- validate --------------------------------------------------------------------------------

#: A schema problem (`/autonomy/max`), a shell string (`/hooks/1/run`), and two rule problems
#: among the sound hooks: `failure = "closed"` below `ask`, a name declared twice.
BROKEN = """
[autonomy]
max = "bogus"

[[hooks]]
name = "gate"
on = "script"
phase = "before"
run = ["true"]
failure = "closed"

[[hooks]]
name = "shell"
on = "script"
phase = "before"
run = "echo hi"

[[hooks]]
name = "gate"
on = "script"
phase = "suffix"
run = ["true"]
"""


def test_validate_reports_schema_and_rule_problems_in_one_pass(tmp_path: Path) -> None:
    env = environment(tmp_path)
    (tmp_path / "c.toml").write_text(BROKEN)
    out = mcpx("validate", "c.toml", cwd=tmp_path, env=env)
    assert out.returncode == 2
    pointers = [line.split(": ")[0] for line in out.stdout.splitlines()]
    assert pointers == [
        "c.toml:/autonomy/max",
        "c.toml:/hooks/0/failure",
        "c.toml:/hooks/1/run",
        "c.toml:/hooks/2/name",
    ]
    assert out.stderr == "4 problem(s)\n"
    as_json = mcpx("validate", "--json", "c.toml", cwd=tmp_path, env=env)
    assert as_json.returncode == 2
    problems = json.loads(as_json.stdout)
    assert [(p["file"], p["pointer"]) for p in problems] == [
        tuple(p.split(":", 1)) for p in pointers
    ]
    assert all(set(p) == {"file", "pointer", "message"} for p in problems)
    assert 'failure "closed" needs an effect that may refuse' in problems[1]["message"]
    assert 'expected a unique hook name, found "gate" again' in problems[3]["message"]
    (tmp_path / "ok.toml").write_text('[autonomy]\nmax = "ask"\n')
    good = mcpx("validate", "--json", "ok.toml", cwd=tmp_path, env=env)
    assert (good.returncode, json.loads(good.stdout)) == (0, [])


#: The user's config locks a gate; the project disables it and has a schema problem too.
USER = """
[[hooks]]
name = "org-gate"
on = "script"
phase = "before"
run = ["true"]
locked = true
"""
PROJECT = """
[autonomy]
max = "bogus"

[[hooks]]
name = "org-gate"
on = "script"
phase = "before"
run = ["true"]
locked = true
enabled = false
"""


def test_validate_with_no_file_checks_the_layers_found_here_with_trust(tmp_path: Path) -> None:
    env = environment(tmp_path)
    user = tmp_path / "home" / ".config" / "mcpx-hooks" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER)
    project = tmp_path / "repo"
    project.mkdir()
    local = project / ".mcpx-hooks.toml"
    local.write_text(PROJECT)

    # Not trusted, and still checked (validating is not applying): its schema problem and the
    # rule it breaks across the layers, in one pass; said to be not trusted, as every command
    # says it.
    for args in (("validate",), ("validate", "--json")):
        found = mcpx(*args, cwd=project, env=env)
        assert found.returncode == 2, found.stdout
        problems = (
            json.loads(found.stdout)
            if "--json" in args
            else [
                dict(zip(("file", "pointer", "message"), line.split(":", 2), strict=True))
                for line in found.stdout.splitlines()
            ]
        )
        assert [(p["file"], p["pointer"]) for p in problems] == [
            (str(local), "/autonomy/max"),
            (str(local), "/hooks/0/enabled"),
        ], problems
        assert str(user) in problems[1]["message"]  # the file that locked it
        assert f"skipped {local}: a project config file is applied only once trusted" in (
            found.stderr
        )

    # `trust` refuses it, naming the file and the pointer; nothing is trusted.
    refused = mcpx("trust", str(local), cwd=project, env=env)
    assert refused.returncode == 2, refused.stdout
    assert f"{local}:/autonomy/max: " in refused.stderr
    assert f"mcpx-hooks trust: {local} does not validate (1 problem(s), above)" in refused.stderr
    assert refused.stdout == ""
    assert str(local) not in mcpx("trust", "--list", cwd=project, env=env).stdout

    # Fixed: valid, and said to be not trusted yet; then trusted, and applied.
    local.write_text('[autonomy]\nmax = "advise"\n')
    out = mcpx("validate", cwd=project, env=env)
    assert out.returncode == 0, out.stdout
    assert out.stdout == (
        "ok: 2 file(s) valid (1 not trusted yet: `mcpx-hooks trust` applies it)\n"
    )
    assert mcpx("trust", str(local), cwd=project, env=env).returncode == 0
    assert mcpx("validate", cwd=project, env=env).stdout == "ok: 2 file(s) valid\n"


def test_validate_with_no_file_refuses_a_project_file_it_cannot_read(tmp_path: Path) -> None:
    # A `.mcpx-hooks.toml` that is a directory (as one its user may not read, or a loop):
    # `exec` skips it, with a warning; `validate` said "ok: 0 file(s) valid" and exited 0,
    # as though it had checked it.
    env = environment(tmp_path)
    project = tmp_path / "repo"
    (project / ".mcpx-hooks.toml").mkdir(parents=True)
    local = project / ".mcpx-hooks.toml"
    out = mcpx("validate", cwd=project, env=env)
    assert out.returncode == 2, out.stdout
    assert out.stdout == f"{local}:/: expected a config file, found a directory\n"
    assert (
        f"warning: skipped {local}: expected a config file, found a directory, so it cannot be"
        " trusted; remove it, or make it a regular file you can read\n"
    ) in out.stderr
    ran = mcpx("exec", "--", "true", cwd=project, env=env)
    assert ran.returncode == 0, ran.stderr
    assert f"skipped {local}: expected a config file, found a directory" in ran.stdout


# ---- hook test -------------------------------------------------------------------------------

HOOKS = """
[defaults]
sandbox = "none"

[[hooks]]
name = "no"
on = "script"
phase = "before"
effect = "ask"
run = ["sh", "-c", "cat >/dev/null; echo '{\\"refuse\\": \\"not today\\"}'"]

[[hooks]]
name = "echo-error"
on = "script"
phase = "onError"
run = ["python3", "hint.py"]

[[hooks]]
name = "broken"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; exit 4"]

[[hooks]]
name = "closed"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; exit 4"]
effect = "ask"
failure = "closed"
"""


def _frame(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(out.stdout)
    return frame


def test_hook_test_exit_status_is_the_hooks_outcome(tmp_path: Path) -> None:
    env = {**environment(tmp_path), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    (tmp_path / "h.toml").write_text(HOOKS)
    (tmp_path / "hint.py").write_text(
        "import json, sys\n"
        "print(json.dumps({'advise': json.load(sys.stdin)['error']['message']}))\n"
    )
    cfg = ("--config", "h.toml")

    refused = mcpx("hook", "test", "no", *cfg, "--json", cwd=tmp_path, env=env)
    assert refused.returncode == 3, refused.stderr
    frame = _frame(refused)
    assert (frame["status"], frame["phase"], frame["refused"]["reason"]) == (
        "ok",
        "before",
        "not today",
    )
    failed = mcpx("hook", "test", "broken", *cfg, "--json", cwd=tmp_path, env=env)
    assert (failed.returncode, _frame(failed)["status"]) == (1, "failed")
    closed = mcpx("hook", "test", "closed", *cfg, "--json", cwd=tmp_path, env=env)
    assert closed.returncode == 3  # a fail-closed failure refuses
    assert _frame(closed)["status"] == "failed" and _frame(closed)["refused"] is not None

    # Its own phase without --phase; the event from stdin.
    event = json.dumps({"error": {"message": "3 tests failed", "exitCode": 1}})
    ok = mcpx(
        "hook", "test", "echo-error", *cfg, "--event", "-", "--json",
        cwd=tmp_path, env=env, stdin=event,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    frame = _frame(ok)
    assert (frame["phase"], frame["status"], frame["advice"]) == (
        "onError",
        "ok",
        ["3 tests failed"],
    )
    same = mcpx("hook", "test", "echo-error", *cfg, "--phase", "onError", cwd=tmp_path, env=env)
    assert same.returncode == 0, same.stderr

    wrong = mcpx("hook", "test", "echo-error", *cfg, "--phase", "before", cwd=tmp_path, env=env)
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert wrong.stderr == (
        'mcpx-hooks hook test: --phase before: the hook "echo-error" is declared at phase'
        ' "onError"; leave --phase out to run it there\n'
    )
    not_object = mcpx(
        "hook", "test", "no", *cfg, "--event", "-", cwd=tmp_path, env=env, stdin="[1]"
    )
    assert not_object.returncode == 2
    assert not_object.stderr == "mcpx-hooks hook test: stdin (--event -): expected a JSON object\n"
    # An error's own object (not under "error") was read as nothing, and the mock's shown.
    unknown = mcpx(
        "hook", "test", "echo-error", *cfg, "--event", "-", cwd=tmp_path, env=env,
        stdin='{"message": "3 tests failed", "exitCode": 1}',
    )  # fmt: skip
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == (
        'mcpx-hooks hook test: stdin (--event -): unknown key "message"; expected one of:'
        ' input, result, error, event (an error as {"error": {"message": "…"}})\n'
    )
    bad_json = mcpx("hook", "test", "no", *cfg, "--event", "-", cwd=tmp_path, env=env, stdin="{")
    assert bad_json.returncode == 2 and "stdin (--event -): invalid JSON" in bad_json.stderr
    inline = mcpx("hook", "test", "--hook", '{"run": ["true"]}', cwd=tmp_path, env=env)
    assert inline.returncode == 2
    assert '--hook: give its phase, as "phase" in the JSON or with --phase' in inline.stderr
    # An observe hook without "on": said as such, not as an "on" of "script" never typed.
    for phase in (["--phase", "observe"], []):
        decl = '{"run": ["true"]}' if phase else '{"run": ["true"], "phase": "observe"}'
        observe = mcpx("hook", "test", "--hook", decl, *phase, cwd=tmp_path, env=env)
        assert (observe.returncode, observe.stdout) == (2, "")
        assert observe.stderr == (
            "mcpx-hooks hook test: --hook: an observe hook follows events: give their kinds as"
            ' "on" in the JSON (such as "run.finished", "hook" or "*")\n'
        )


def test_hook_test_of_an_observer_gives_an_event_it_follows_merged_with_the_one_given(
    tmp_path: Path,
) -> None:
    """An observe hook tested was given a `run.finished` event whatever its `on`, and an
    `--event` with `{"event": {"data": …}}` took the whole event's place: no `kind`, no
    `seq`, so MCPX_HOOK_EVENT_KIND and MCPX_HOOK_EVENT_SEQ were empty."""
    env = environment(tmp_path)
    tmp_path.chmod(0o755)  # the hook's working directory (strict: others' access)
    # It fails, so that its frame keeps what it printed (an observer's effect is off).
    keep = ["sh", "-c", 'cat; echo; echo "$MCPX_HOOK_EVENT_KIND $MCPX_HOOK_EVENT_SEQ"; exit 1']
    hook = json.dumps({"on": "hook.failed", "run": keep})
    given = '{"event": {"data": {"name": "lint"}}}'
    done = mcpx("hook", "test", "--hook", hook, "--json", "--event", "-", cwd=tmp_path, env=env,
                stdin=given)  # fmt: skip
    assert done.returncode == 1, done.stderr
    frame = json.loads(done.stdout)
    stdin, said = frame["stdoutTail"].splitlines()
    event = json.loads(stdin)["event"]
    assert (event["kind"], event["seq"], event["data"]) == ("hook.failed", 0, {"name": "lint"})
    assert said == "hook.failed 0"
    other = '{"event": {"kind": "run.finished"}}'
    wrong = mcpx("hook", "test", "--hook", hook, "--event", "-", cwd=tmp_path, env=env, stdin=other)
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert wrong.stderr == (
        'mcpx-hooks hook test: --event: the event\'s kind "run.finished" is not one the hook'
        ' observes (on = "hook.failed"); give one it follows (hook.failed)\n'
    )


def test_a_module_file_the_sandbox_hides_is_one_line(tmp_path: Path) -> None:
    """A module hook named by a path outside what a strict hook may read failed with the
    runner's and importlib's frames and "PermissionError: [Errno 13]", saying nothing of the
    sandbox or what to do."""
    tmp_path.chmod(0o755)
    (tmp_path / "proj").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "m.py").write_text("def hook(given):\n    return None\n")
    target = f"{tmp_path}/elsewhere/m.py"
    hook = json.dumps({"module": target, "phase": "before"})
    done = mcpx("hook", "test", "--hook", hook, "--json", cwd=tmp_path / "proj",
                env=environment(tmp_path))  # fmt: skip
    assert done.returncode == 1, done.stderr
    said = json.loads(done.stdout)["stderrTail"].strip()
    assert said.startswith("mcpx-hooks module runner: module file ") and "\n" not in said, said
    assert target in said  # (not there, or not readable, as the sandbox hides it)
    assert said.endswith(
        "a hook reads its declaring and working directories; grant more with [sandbox] read)"
    )


def test_hook_test_of_a_name_not_in_force_names_a_few_and_the_closest(tmp_path: Path) -> None:
    """`hook test chek-77` against a generated config listed every hook in force in its one
    line (40,000 names: some 400 KB), and a name holding a line break broke that line. It now
    says the closest name, the first ten, and how many more, each name escaped."""
    hooks = "".join(
        f'[[hooks]]\nname = "{name}"\non = "script"\nphase = "before"\nrun = ["true"]\n'
        for name in ["we\\nird", *(f"check-{n}" for n in range(2_000))]
    )
    (tmp_path / "c.toml").write_text(hooks)
    out = mcpx(
        "hook", "test", "chek-77", "--config", "c.toml", cwd=tmp_path, env=environment(tmp_path)
    )
    assert out.returncode == 2
    assert out.stderr == (
        "mcpx-hooks hook test: no hook named 'chek-77' is in force; did you mean \"check-77\"?"
        " (hooks in force: we\\nird, check-0, check-1, check-2, check-3, check-4, check-5,"
        " check-6, check-7, check-8, and 1991 more: `mcpx-hooks hooks list` lists them)\n"
    )


@pytest.mark.parametrize(
    ("event", "said"),
    [
        ({"error": "3 tests failed"},
         '"error" is an object with "message" (as the hook\'s input holds it),'
         ' found the string "3 tests failed"'),
        ({"error": {"message": 3}},
         '"error" is an object with "message" (as the hook\'s input holds it),'
         ' found "message" as the integer 3'),
        ({"result": 3.5},
         '"result" is an object with "value" (as the hook\'s input holds it),'
         " found the number 3.5"),
        ({"event": [1]},
         '"event" is an object (as the hook\'s input holds it), found an array of 1'),
        ({"eror": {"message": "x"}},
         'unknown key "eror"; expected one of: input, result, error, event'
         ' (an error as {"error": {"message": "…"}})'),
    ],
)  # fmt: skip
def test_hook_test_refuses_an_event_the_hook_s_input_cannot_hold(
    tmp_path: Path, event: dict[str, Any], said: str
) -> None:
    # An error given as a string (or a result not in {"value": ...}) broke `hook test` with a
    # traceback as it wrote the hook's input; a misspelt key was dropped without a word, the
    # hook getting the generated error instead.
    env = {**environment(tmp_path), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    (tmp_path / "h.toml").write_text(HOOKS)
    (tmp_path / "hint.py").write_text(
        "import json, sys\n"
        "print(json.dumps({'advise': json.load(sys.stdin)['error']['message']}))\n"
    )
    done = mcpx(
        "hook", "test", "echo-error", "--config", "h.toml", "--event", "-",
        cwd=tmp_path, env=env, stdin=json.dumps(event),
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"mcpx-hooks hook test: stdin (--event -): {said}\n"
    # What a hook's input holds beside them (a captured input replayed) is filled in.
    replayed = {"protocol": 1, "hook": {}, "run": {}, "error": {"message": "3 tests failed"}}
    done = mcpx(
        "hook", "test", "echo-error", "--config", "h.toml", "--event", "-", "--json",
        cwd=tmp_path, env=env, stdin=json.dumps(replayed),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _frame(done)["advice"] == ["3 tests failed"]


#: A hook that says it runs (on the FIFO named first), then waits.
WAIT_READY = "import sys, time; open(sys.argv[1], 'w').write('up\\n'); time.sleep(60)"


def test_ctrl_c_in_hook_test_ends_it_without_a_traceback(tmp_path: Path) -> None:
    # Ctrl-C while the hook ran came out of the Trio run wrapped in an exception group, and
    # its traceback (KeyboardInterrupt at its end) reached the person, with exit status 1.
    env = {**environment(tmp_path), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    hook = {
        "on": "script",
        "phase": "before",
        "sandbox": "none",
        # (the last argument marks the process, to look for it afterwards)
        "run": [sys.executable, "-c", WAIT_READY, str(ready), f"mcpx-ctrl-c-{tmp_path.name}"],
        "timeoutMs": 60_000,
    }
    with subprocess.Popen(
        [*CLI, "hook", "test", "--hook", json.dumps(hook)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        assert ready.read_text() == "up\n"  # (the hook runs: opening the FIFO waited for it)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    left = subprocess.run(
        ["pgrep", "-f", f"mcpx-ctrl-c-{tmp_path.name}"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert left.stdout == "", left.stdout  # the hook's tree was killed with it


# ---- init ------------------------------------------------------------------------------------


def test_init_writes_a_starter_that_validates_and_never_overwrites(tmp_path: Path) -> None:
    env = environment(tmp_path)
    project = tmp_path / "repo"
    project.mkdir()
    out = mcpx("init", cwd=project, env=env)
    assert out.returncode == 0, out.stderr
    written = project / ".mcpx-hooks.toml"
    text = written.read_text()
    assert text.startswith("# ") and "[[hooks]]" in text
    assert "mcpx-hooks trust .mcpx-hooks.toml" in out.stdout  # how to apply it

    checked = mcpx("validate", ".mcpx-hooks.toml", cwd=project, env=env)
    assert (checked.returncode, checked.stdout) == (0, "ok: 1 file(s) valid\n")
    # Its commented-out examples are valid too, once uncommented.
    examples = [
        m.group(1) if (m := re.match(r"# (\[\[hooks\]\]|[a-zA-Z]+ = .*)$", line)) else line
        for line in text.splitlines()
    ]
    (tmp_path / "all.toml").write_text("\n".join(examples))
    assert sum(line == "[[hooks]]" for line in examples) == 3
    every = mcpx("validate", "all.toml", cwd=tmp_path, env=env)
    assert every.returncode == 0, every.stdout
    assert mcpx("trust", ".mcpx-hooks.toml", cwd=project, env=env).returncode == 0
    layered = mcpx("validate", cwd=project, env=env)
    assert (layered.returncode, layered.stdout, layered.stderr) == (0, "ok: 1 file(s) valid\n", "")
    listed = json.loads(mcpx("hooks", "list", "--json", cwd=project, env=env).stdout)
    assert [(h["name"], h["enabled"]) for h in listed] == [("needs-python", False)]

    again = mcpx("init", cwd=project, env=env)
    assert again.returncode == 2 and again.stdout == ""
    assert (
        again.stderr == "mcpx-hooks init: .mcpx-hooks.toml exists here already; not overwritten\n"
    )
    assert written.read_text() == text
    other = tmp_path / "other"
    other.mkdir()
    (other / ".mcpx-hooks.json").write_text("{}")
    beside = mcpx("init", cwd=other, env=env)
    assert beside.returncode == 2 and not (other / ".mcpx-hooks.toml").exists()


def test_the_starters_python_hooks_run_where_python3_is_a_shim(tmp_path: Path) -> None:
    """The starter's `hint` hook, uncommented with a `hooks/hint.py` of the user's, advises on
    a machine where `python3` on the PATH is a version manager's shim in the home (pyenv),
    which its `strict` profile does not show: it named `python3`, and failed with "cannot run
    python3: it resolves to ~/.pyenv/shims/python3, which the strict sandbox cannot see"."""
    env = environment(tmp_path)
    shims = tmp_path / "home" / ".pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (shims / "python3").chmod(0o755)
    env["PATH"] = f"{shims}:/usr/bin:/bin"
    project = tmp_path / "repo"
    (project / "hooks").mkdir(parents=True)
    assert mcpx("init", cwd=project, env=env).returncode == 0
    text = (project / ".mcpx-hooks.toml").read_text()
    at = text.index('# name = "hint"') - len("# [[hooks]]\n")
    hint, rest = text[at:].split("\n\n", 1)
    uncommented = "\n".join(line.removeprefix("# ") for line in hint.splitlines())
    (project / ".mcpx-hooks.toml").write_text(text[:at] + uncommented + "\n\n" + rest)
    (project / "hooks" / "hint.py").write_text('print("check the exit code")\n')
    assert mcpx("trust", cwd=project, env=env).returncode == 0
    ran = mcpx("exec", "--json", "--", "false", cwd=project, env=env)
    frames = [json.loads(line) for line in ran.stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook" and f["name"] == "hint"]
    assert (hook["status"], hook.get("advice")) == ("ok", ["check the exit code"]), hook


def test_init_where_nothing_can_be_written_fails_and_leaves_nothing(tmp_path: Path) -> None:
    # A directory init cannot write in exited 2, as bad input; and a write cut short (a full
    # disk) left an empty .mcpx-hooks.toml behind, which the next init refused to replace.
    env = environment(tmp_path)
    out = mcpx("init", cwd=Path("/proc"), env=env)  # (no file can be made there, even by root)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr.startswith("mcpx-hooks init: cannot write .mcpx-hooks.toml: ")
    project = tmp_path / "repo"
    project.mkdir()
    full = subprocess.run(
        ["sh", "-c", 'ulimit -f 0 && exec "$@"', "sh", *CLI, "init"],
        check=False, cwd=project, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (full.returncode, full.stdout) == (1, "")
    assert full.stderr == (
        "mcpx-hooks init: cannot write .mcpx-hooks.toml: File too large; nothing written\n"
    )
    assert list(project.iterdir()) == []
    assert mcpx("init", cwd=project, env=env).returncode == 0  # and the next one writes it


# ---- serve: the token file -------------------------------------------------------------------


def test_the_token_file_is_kept_across_restarts_and_a_busy_port(tmp_path: Path) -> None:
    env = environment(tmp_path)
    token_file = tmp_path / "token"
    first = start_server(tmp_path)
    try:
        token = token_file.read_text()
        for extra in ((), ("--new-token",)):
            second = mcpx(
                "serve", "--port", str(first.port), "--token-file", str(token_file), *extra,
                cwd=tmp_path, env=env,
            )  # fmt: skip
            assert second.returncode == 2
            assert f"cannot listen on 127.0.0.1:{first.port}" in second.stderr
            assert token_file.read_text() == token
            assert sorted(p.name for p in tmp_path.iterdir() if "token" in p.name) == ["token"]
        assert first.proc.poll() is None
    finally:
        assert first.stop() == 0
    restarted = start_server(tmp_path)
    try:
        assert restarted.token == token.strip()  # clients go on working
    finally:
        assert restarted.stop() == 0
    renewed = start_server(tmp_path, "--new-token")
    try:
        assert renewed.token != token.strip()
    finally:
        assert renewed.stop() == 0
    token_file.chmod(0o644)
    loose = mcpx("serve", "--port", "0", "--token-file", str(token_file), cwd=tmp_path, env=env)
    assert (loose.returncode, loose.stdout) == (2, "")
    assert loose.stderr == (
        f"mcpx-hooks serve: the token file {token_file} is open to others (mode 644):"
        f" chmod 600 {token_file} to keep it, or serve --new-token to replace it\n"
    )


# ---- exec --remote ---------------------------------------------------------------------------

CALLER = """
[defaults]
sandbox = "none"

[script]
onSuccess = ["print('from the caller', result)"]

[[hooks]]
name = "gate"
on = "script"
phase = "before"
run = ["sh", "-c", "cat >/dev/null; test -f job.py"]
effect = "ask"
failure = "closed"

[[hooks]]
name = "audit"
on = "run.finished"
phase = "observe"
run = ["true"]
"""


def _frames(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    check_order(frames)
    return frames


def test_exec_remote_sees_what_a_local_run_here_would(tmp_path: Path) -> None:
    env = environment(tmp_path)
    served = tmp_path / "served"
    caller = tmp_path / "caller"
    for where, value in ((served, 41), (caller, 42)):
        where.mkdir()
        (where / "job.py").write_text(f"def main():\n    return {value}\n")
    (caller / ".mcpx-hooks.toml").write_text(CALLER)
    assert mcpx("trust", ".mcpx-hooks.toml", cwd=caller, env=env).returncode == 0
    run = ("exec", "--json", "--sandbox", "none", "--python", "job.py")
    local = mcpx(*run, cwd=caller, env=env)
    assert local.returncode == 0, local.stderr

    def outcome(frames: list[dict[str, Any]]) -> tuple[Any, list[str], list[str]]:
        result = next(f["value"] for f in frames if f["type"] == "result")
        hooks = [f["name"] for f in frames if f["type"] == "hook"]
        said = [f["text"].strip() for f in frames if f["type"] == "stdout"]
        return result, hooks, said

    expected = (42, ["gate"], ["from the caller 42"])
    assert outcome(_frames(local)) == expected
    # (the caller's directory is one of the server's roots: a request's cwd must lie in one)
    (served / "server.toml").write_text(
        f'[service]\nsandboxes = ["none", "strict"]\nroots = ["{caller}"]\n'
    )
    for server_args in ((), ("--config", str(caller / ".mcpx-hooks.toml"))):
        # A server elsewhere; then one that applies the caller's file itself: its hooks and
        # lines are not sent again (they would run twice).
        srv = start_server(served, "--config", "server.toml", *server_args, env=env)
        try:
            url = ("--remote", srv.url, "--token-file", str(served / "token"))
            remote = mcpx(*run, *url, cwd=caller, env=env)
            assert remote.returncode == 0, remote.stderr
        finally:
            assert srv.stop() == 0
        assert outcome(_frames(remote)) == expected
        # Not a script hook: said not to be sent, unless the server has the file itself.
        assert ('hook "audit" (run.finished.observe' in remote.stderr) == (server_args == ())


def test_the_remote_request_carries_the_callers_resolved_layers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpx_hooks.supervisor.cli import exec as cli_exec
    from mcpx_hooks.supervisor.cli.parser import parser

    project = tmp_path / "repo"
    (project / "sub").mkdir(parents=True)
    (project / "c.toml").write_text(
        '[autonomy]\nmax = "advise"\n'
        '[script]\npassEnv = ["CI"]\nsandbox = "strict"\n'
        "[defaults]\ntimeoutMs = 777\n"
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["python3", "gate.py"]\n'
        '[[hooks]]\nname = "hint"\non = "script"\nphase = "onError"\nmodule = "hint.py"\n'
        'cwd = "sub"\neffect = "off"\n'
    )
    monkeypatch.chdir(project / "sub")
    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    monkeypatch.setenv("CI", "yes")
    args = parser().parse_args(["exec", "--config", "../c.toml", "--python", "job.py"])
    request = cli_exec.remote_request(args, lambda: ([], []))
    assert request["hooks"] == [
        # A defaulted name is left to the server; the directory is made explicit.
        {"on": "script", "phase": "before", "run": ["python3", "gate.py"], "timeoutMs": 777,
         "cwd": str(project)},
        {"on": "script", "phase": "onError", "module": "hint.py", "name": "hint",
         "timeoutMs": 777, "effect": "off", "cwd": str(project / "sub")},
    ]  # fmt: skip
    assert (request["file"], request["cwd"]) == ("job.py", str(project / "sub"))
    assert (request["autonomy"], request["sandbox"]) == ("advise", "strict")
    assert (request["passEnv"], request["callerEnv"]) == (["CI"], {"CI": "yes"})
    # The server applies that file itself: nothing of it is sent again.
    again = cli_exec.remote_request(args, lambda: ([str(project / "c.toml")], []))
    assert "hooks" not in again and "passEnv" not in again and "autonomy" not in again
    # A hook the server lists already (another file of its own gives it) is not sent again.
    served = {"name": "script.before.0", "on": "script", "phase": "before", "action": "run",
              "run": ["python3", "gate.py"], "dir": str(project)}  # fmt: skip
    third = cli_exec.remote_request(args, lambda: ([], [served]))
    assert [h.get("name") for h in third["hooks"]] == ["hint"]


def test_exec_from_a_directory_whose_path_is_not_utf8_says_so(tmp_path: Path) -> None:
    """A run's directory goes in its request as text: one whose name is not UTF-8 is a usage
    error naming it, locally and with --remote (it was 'bad spawn request: cwd: holds a lone
    surrogate' from the spawner, after the run had begun)."""
    odd = os.fsdecode(bytes(tmp_path) + b"/bad\xffdir")
    os.mkdir(odd)
    env = environment(tmp_path)
    for remote in ([], ["--remote", "ws://127.0.0.1:9"]):
        out = mcpx("exec", *remote, "--sandbox", "none", "--", "true", cwd=Path(odd), env=env)
        assert out.returncode == 2, out.stdout
        assert out.stdout == ""
        assert "working directory's path is not UTF-8" in out.stderr
        assert "$'" in out.stderr and "bad\\xffdir" in out.stderr


def test_events_since_says_when_the_server_dropped_the_events_asked_for(tmp_path: Path) -> None:
    # `events --since 0` on a server past its 1,024 kept events said "were missed (resume
    # with --since)": resuming would meet the same gap, the events being gone.
    from websockets.sync.client import connect

    from mcpx_hooks.supervisor.run.bus import DEFAULT_HISTORY

    server = start_server(tmp_path, auth=False)
    try:
        for _ in range(DEFAULT_HISTORY // 2 + 8):  # each: client.connected, client.closed
            with connect(f"{server.url}/v1/hooks", proxy=None):
                pass
        events = subprocess.Popen(
            [*CLI, "events", "--remote", server.url, "--since", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert events.stdout is not None
        first = events.stdout.readline()
    finally:
        assert server.stop() == 0
    # (the rest through the same text stream: `communicate` reads the pipe itself, and would
    # miss what `readline` took into the stream's buffer)
    with events:  # (its pipes closed, itself waited for)
        out, err = events.stdout.read(), events.stderr.read() if events.stderr else ""
    assert events.returncode == 0 and err == "", err
    found = re.fullmatch(
        r"gap: events 0\.\.(\d+) were dropped: the server no longer holds them \(it keeps its"
        r" latest events only\); the replay starts after (\d+)\n",
        first,
    )
    assert found and found.group(1) == found.group(2), first
    assert out.splitlines()[0].startswith(f"{int(found.group(1)) + 1} "), out
