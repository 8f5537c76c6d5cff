"""`when`: the keys each point provides (any other refused, with file and pointer), the pure
matcher, and through the CLI a hook that fires for one command and not another, and
`exec --explain`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.errors import ConfigError, Problem
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.core.points import OBSERVE_WHEN, POINTS, WHEN_KEYS, Phase, When
from mcpx_hooks.supervisor.core.when import (
    RunFacts,
    argv_matches,
    command_line,
    event_mismatch,
    run_mismatch,
)

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def problems_of(tmp_path: Path, hook: dict[str, Any]) -> list[Problem]:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"hooks": [hook]}))
    try:
        load_config([path], cwd=tmp_path, environ={}, discover=False)
    except ConfigError as exc:
        return list(exc.problems)
    return []


#: A hook on each point, and an observe hook: what `when` is checked against.
SUBJECTS: dict[str, dict[str, Any]] = {
    **{name: {"on": name, "phase": POINTS[name].phases[0].value} for name in POINTS},
    "observe": {"on": "run.finished", "phase": Phase.OBSERVE.value},
}
PROVIDED: dict[str, tuple[When, ...]] = {
    **{name: POINTS[name].when for name in POINTS},
    "observe": OBSERVE_WHEN,
}
#: Keys of points not declared yet (a tool call, a server starting) and typos.
FOREIGN = ("server", "tool", "session", "uri", "argvs")


# --- the table --------------------------------------------------------------------------------


def test_every_key_a_point_provides_is_declared_and_every_declared_key_is_provided() -> None:
    provided = {k for keys in PROVIDED.values() for k in keys}
    assert provided == set(WHEN_KEYS) == set(When)
    assert POINTS["script"].when == (When.ARGV, When.CWD, When.FILES)
    assert OBSERVE_WHEN == (When.KINDS, When.RUN_ARGV)


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("subject", sorted(SUBJECTS))
@pytest.mark.parametrize("key", [*(k.value for k in When), *FOREIGN])
def test_a_when_key_is_taken_where_the_point_provides_it_and_refused_elsewhere(
    tmp_path: Path, subject: str, key: str
) -> None:
    value = ["run.finished"] if key == When.KINDS else ["*x*"]  # (kinds are no globs)
    hook = {**SUBJECTS[subject], "run": ["true"], "when": {key: value}}
    found = problems_of(tmp_path, hook)
    if key in PROVIDED[subject]:
        assert found == []
        return
    where = "observe hooks" if subject == "observe" else f'the point "{subject}"'
    keys = ", ".join(PROVIDED[subject])
    [problem] = found
    assert (problem.file, problem.pointer) == (str(tmp_path / "c.json"), f"/hooks/0/when/{key}")
    assert problem.message.startswith(f'"{key}" is not a when key of {where} (its keys: {keys})')


def test_the_newcomers_tool_filter_is_refused_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / ".mcpx-hooks.toml"
    path.write_text(
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\nwhen = { tool = ["pytest"] }\n'
    )
    out = subprocess.run(
        [*CLI, "validate", str(path)], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert out.returncode == 2
    assert (
        f'{path}:/hooks/0/when/tool: "tool" is not a when key of the point "script"'
        " (its keys: argv, cwd, files)\n"
    ) in out.stdout
    assert "1 problem(s)" in out.stderr and "Traceback" not in out.stderr


def test_a_typo_gets_did_you_mean(tmp_path: Path) -> None:
    [problem] = problems_of(
        tmp_path, {"on": "script", "phase": "before", "run": ["true"], "when": {"argvs": ["x"]}}
    )
    assert problem.message.endswith('; did you mean "argv"?')


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "expected at least 1 item(s), found an empty array"),
        # (a glob alone, as one would write it: said how to write it as a list)
        (
            "pytest",
            'expected an array, found the string "pytest"; a list of one is written ["pytest"]',
        ),
        ([1], "expected a string, found the integer 1"),
    ],
)
def test_patterns_are_a_non_empty_list_of_strings(tmp_path: Path, value: Any, message: str) -> None:
    hook = {"on": "script", "phase": "before", "run": ["true"], "when": {"argv": value}}
    [problem] = problems_of(tmp_path, hook)
    assert problem.message == message
    assert problem.pointer.startswith("/hooks/0/when/argv")


def test_a_hostile_when_crashes_nothing(tmp_path: Path) -> None:
    for when in ("x", 3, None, ["a"], {"\ud800": ["x"]}, {"argv": [{"a": 1}]}, {"": ["x"]}):
        hook = {"on": "script", "phase": "before", "run": ["true"], "when": when}
        assert problems_of(tmp_path, hook), when


def test_per_call_and_command_line_hooks_are_held_to_the_same_keys(tmp_path: Path) -> None:
    hook = {"on": "script", "phase": "before", "run": ["true"], "when": {"server": ["s"]}}
    with pytest.raises(ConfigError) as caught:
        load_config(
            cwd=tmp_path,
            environ={},
            discover=False,
            command_line_hooks=[json.dumps(hook)],
            per_call_hooks=[hook],
        )
    assert [(p.file, p.pointer) for p in caught.value.problems] == [
        ("--hook #1", "/when/server"),
        ("per-call hook #1", "/when/server"),
    ]


# --- matching (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patterns", "argv", "matches"),
    [
        (["pytest"], ("/usr/bin/pytest", "-q"), True),  # the program's basename
        (["pytest*"], ("pytest", "-q"), True),  # the command line
        (["make test*"], ("make", "test", "-j4"), True),
        (["make test*"], ("make", "lint"), False),
        (["*pytest*"], ("python", "-m", "pytest"), True),
        (["python job.py"], ("python", "job.py"), True),  # an `--python job.py` run
        (["pytest"], ("python", "-m", "pytest"), False),
        (["*'a b'*"], ("ls", "a b"), True),  # the command line is shell-quoted
        (["PYTEST"], ("pytest",), False),  # case counts
        (["*/bin/*"], ("/usr/bin/env", "x"), True),  # `*` crosses `/`
        (["lint", "test"], ("test",), True),  # any one may match
        (["x"], (), False),
    ],
)
def test_argv_patterns(patterns: list[str], argv: tuple[str, ...], matches: bool) -> None:
    assert argv_matches(patterns, argv) is matches


def test_run_mismatch_says_what_was_matched() -> None:
    facts = RunFacts(("make", "test"), "/work/proj")
    assert run_mismatch({}, facts) is None
    assert run_mismatch({"argv": ["make*"], "cwd": ["/work/*"]}, facts) is None
    assert run_mismatch({"argv": ["pytest*"]}, facts) == (
        'when.argv ["pytest*"] matches neither the command line "make test" nor its program "make"'
    )
    assert run_mismatch({"argv": ["make*"], "cwd": ["/tmp/*"]}, facts) == (
        'when.cwd ["/tmp/*"] does not match the working directory "/work/proj"'
    )
    assert command_line(("a b", "c")) == "'a b' c"


def test_event_mismatch() -> None:
    assert event_mismatch({}, "run.finished", None) is None
    assert event_mismatch({"kinds": ["run"]}, "run.finished", None) is None
    assert event_mismatch({"kinds": ["hook"]}, "run.finished", None) is not None
    assert event_mismatch({"runArgv": ["pytest"]}, "run.finished", ("pytest", "-q")) is None
    assert "of no known run" in str(event_mismatch({"runArgv": ["x"]}, "client.connected", None))
    assert "does not match" in str(event_mismatch({"runArgv": ["x"]}, "run.finished", ("y",)))


# --- through the CLI ----------------------------------------------------------------------


def mcpx(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = env or {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    return subprocess.run(
        [*CLI, *args], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def hook_toml(name: str, phase: str, when: str = "", **extra: str) -> str:
    lines = [
        "[[hooks]]",
        f'name = "{name}"',
        'on = "script"',
        f'phase = "{phase}"',
        'run = ["sh", "-c", "cat >/dev/null; echo \'{\\"advise\\": \\"' + name + '\\"}\'"]',
        'sandbox = "none"',
    ]
    if when:
        lines.append(f"when = {when}")
    lines += [f"{k} = {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n\n"


CONFIG = (
    hook_toml("tests-only", "before", '{ argv = ["pytest*", "*-m pytest*"] }')
    + hook_toml("always", "suffix")
    + hook_toml("here-only", "onSuccess", '{ cwd = ["*/elsewhere"] }')
    + hook_toml("off", "before", enabled="false")
    + '[[hooks]]\nname = "watch"\non = "run.finished"\nphase = "observe"\nrun = ["true"]\n'
    'when = { runArgv = ["make*"] }\n'
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hooks.toml").write_text(CONFIG)
    return tmp_path


def hook_names(out: subprocess.CompletedProcess[str]) -> list[str]:
    frames = [json.loads(line) for line in out.stdout.splitlines()]
    check_order(frames)
    return [f["name"] for f in frames if f["type"] == "hook"]


def test_a_hook_with_when_argv_runs_for_one_command_and_not_another(project: Path) -> None:
    script = [sys.executable, "-c", "print(1)"]
    tests = mcpx(
        "exec", "--config", "hooks.toml", "--json", "--", *script, "-m", "pytest", cwd=project
    )
    assert tests.returncode == 0, tests.stderr
    assert hook_names(tests) == ["tests-only", "always"]
    other = mcpx("exec", "--config", "hooks.toml", "--json", "--", *script, cwd=project)
    assert other.returncode == 0, other.stderr
    assert hook_names(other) == ["always"]  # no frame for the hooks whose `when` did not match


def test_explain_says_what_would_run_in_order_and_why_not_the_rest(project: Path) -> None:
    out = mcpx("exec", "--config", "hooks.toml", "--explain", "--", "make", "test", cwd=project)
    assert out.returncode == 0, out.stderr
    hooks = str(project / "hooks.toml")
    assert out.stdout.splitlines() == [
        f"a run of make test in {project}",
        "would run, in order:",
        f"  1. suffix always (run, advise): after the outcome, on both paths  [{hooks}:/hooks/1]",
        "  2. observe watch (run, off): after the fact, on the events run.finished"
        f"  [{hooks}:/hooks/4]",
        "will not run:",
        '  before tests-only: when.argv ["pytest*", "*-m pytest*"] matches neither the command'
        f' line "make test" nor its program "make"  [{hooks}:/hooks/0]',
        f"  before off: enabled = false  [{hooks}:/hooks/3]",
        f'  onSuccess here-only: when.cwd ["*/elsewhere"] does not match the working directory'
        f' "{project}"  [{hooks}:/hooks/2]',
    ]
    assert not (project / "marker").exists()


def test_explain_json(project: Path) -> None:
    out = mcpx(
        "exec", "--config", "hooks.toml", "--explain", "--json", "--", "pytest", "-q", cwd=project
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert (plan["argv"], plan["cwd"], plan["skippedFiles"]) == (["pytest", "-q"], str(project), [])
    assert [(h["name"], h["runs"]) for h in plan["hooks"]] == [
        ("tests-only", True),
        ("always", True),
        ("off", False),
        ("here-only", False),
        ("watch", False),
    ]
    tests_only, _, off, _, watch = plan["hooks"]
    assert tests_only["at"] == "before the script"
    assert tests_only["source"] == {"file": str(project / "hooks.toml"), "index": 0}
    assert off["why"] == "enabled = false"
    assert watch["why"].startswith('when.runArgv ["make*"] does not match')
    assert (watch["effect"], watch["requestedEffect"]) == ("off", "advise")


def test_explain_names_an_untrusted_project_file_and_runs_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
    home = tmp_path / "home"
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "c"), XDG_STATE_HOME=str(home / "s"))
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["touch", "marker"]\n'
    )
    out = mcpx("exec", "--explain", "--json", "--", "true", cwd=project, env=env)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["hooks"] == []
    [skipped] = plan["skippedFiles"]
    assert skipped["file"] == str(project / ".mcpx-hooks.toml")
    assert skipped["trustCommand"].startswith("mcpx-hooks trust ")
    readable = mcpx("exec", "--explain", "--", "true", cwd=project, env=env)
    assert "not applied (their hooks are not in force):" in readable.stdout
    assert f"  {project / '.mcpx-hooks.toml'}: " in readable.stdout
    assert "skipped" in readable.stderr  # the loader's warning, as for a run
    assert not (project / "marker").exists()


def test_explain_refuses_remote_and_a_bad_config(project: Path) -> None:
    remote = mcpx("exec", "--explain", "--remote", "ws://127.0.0.1:9", "--", "true", cwd=project)
    assert remote.returncode == 2
    assert "--explain" in remote.stderr and "Traceback" not in remote.stderr
    (project / "bad.toml").write_text(
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\nwhen = { tool = ["x"] }\n'
    )
    bad = mcpx("exec", "--config", "bad.toml", "--explain", "--", "true", cwd=project)
    assert bad.returncode == 2
    assert "bad.toml:/hooks/0/when/tool" in bad.stderr and "Traceback" not in bad.stderr


def test_a_python_run_is_matched_as_python_file(tmp_path: Path) -> None:
    hook = {"on": "script", "phase": "before", "run": ["true"], "when": {"argv": ["python job*"]}}
    (tmp_path / "job.py").write_text("def main():\n    return 1\n")
    out = mcpx(
        "exec",
        "--hook",
        json.dumps(hook),
        "--explain",
        "--json",
        "--python",
        "job.py",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["argv"] == ["python", "job.py"]
    [entry] = plan["hooks"]
    assert (entry["runs"], entry["source"]) == (True, "command-line")
    other = mcpx(
        "exec", "--hook", json.dumps(hook), "--explain", "--json", "--", "job", cwd=tmp_path
    )
    assert json.loads(other.stdout)["hooks"][0]["runs"] is False


@pytest.mark.parametrize(
    "hook",
    [
        {"on": "script", "phase": [], "run": ["true"], "when": {"argv": []}},
        {"on": [], "phase": "before", "run": ["true"], "when": {"argv": ["x"]}},
        {"on": "script", "phase": {}, "run": ["true"], "when": {"argv": ["x"]}},
        {"on": "script", "phase": "before", "run": ["true"], "when": {"argv": [[]]}},
    ],
)
def test_a_hostile_hook_with_when_is_a_problem_not_a_crash(hook: dict[str, Any]) -> None:
    # Found by the property suite: an unhashable phase beside `when` raised TypeError.
    with pytest.raises(ConfigError):
        load_config(cwd=Path("/"), environ={}, per_call_hooks=[hook], discover=False)


def test_a_refused_when_key_is_the_one_problem_whatever_its_patterns(tmp_path: Path) -> None:
    """`cwd` on the point "call" is refused as a key; a pattern under it that could never
    match (not absolute) was a second problem about a key that would never be looked at."""
    from mcpx_hooks.supervisor.config.loading import validate_files

    path = tmp_path / "c.toml"
    path.write_text(
        '[[hooks]]\non = "call"\nphase = "before"\nrun = ["true"]\n'
        'when = { cwd = ["relative"], tool = ["x.*"] }\n'
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\nwhen = { cwd = ["rel"] }\n'
    )
    refused, pattern = validate_files([str(path)])
    assert refused.pointer == "/hooks/0/when/cwd"
    assert refused.message.startswith('"cwd" is not a when key of the point "call"')
    assert pattern.pointer == "/hooks/1/when/cwd/0"  # where the key is provided: the pattern


def test_a_when_server_that_matches_no_declared_server_is_said(tmp_path: Path) -> None:
    # A gate on server "filesystem" where the server is declared "fs" never fires for a call
    # that reaches a server, without a word.
    path = tmp_path / "c.json"
    gate = {"on": "call", "phase": "before", "run": ["true"]}
    doc = {
        "servers": {"fs": {"command": ["true"]}, "git": {"command": ["true"]}},
        "hooks": [
            {**gate, "name": "typo", "when": {"server": ["filesystem"], "tool": ["write*"]}},
            {**gate, "name": "glob", "when": {"server": ["f*"]}},
            {**gate, "name": "start", "on": "server.start", "when": {"server": ["gti", "gi?"]}},
            {**gate, "name": "any"},
        ],
    }
    path.write_text(json.dumps(doc))
    config = load_config([path], cwd=tmp_path, environ={}, discover=False)
    said = (
        f'hook "typo" ({path}:/hooks/0): when.server ["filesystem"] matches none of the servers'
        " declared here (fs, git): it fires only for a call to a server not declared, which fails"
    )
    assert [w for w in config.warnings if "when.server" in w] == [said]
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(tmp_path)}
    for args in (["validate", str(path)], ["hooks", "list", "--config", str(path)]):
        done = subprocess.run(
            [*CLI, *args], env=env, capture_output=True, text=True, check=False, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [f"mcpx-hooks: warning: {said}"], args
    del doc["servers"]
    path.write_text(json.dumps(doc))
    config = load_config([path], cwd=tmp_path, environ={}, discover=False)
    call = "it fires only for a call to a server not declared, which fails"
    said = 'it is on "{}", and no tool server is declared here: {}'
    assert [w for w in config.warnings if "no tool server" in w] == [
        f'hook "{name}" ({path}:/hooks/{i}): ' + said.format(on, call if on == "call" else why)
        for i, (name, on, why) in enumerate(
            [
                ("typo", "call", ""),
                ("glob", "call", ""),
                ("start", "server.start", "it never fires"),
                ("any", "call", ""),
            ]
        )
    ]


@pytest.mark.parametrize(
    ("on", "kinds", "index", "message"),
    [
        (
            "run",
            ["run.finsihed"],
            0,
            "expected an event kind the bus publishes, or a prefix of one, found the string"
            ' "run.finsihed": as written it never matches; did you mean "run.finished"?',
        ),
        (
            "run",
            ["run.started", "hook.failed"],
            1,
            'expected a kind the hook follows (on = "run": run.started, run.finished), found'
            ' the string "hook.failed": as written it never matches',
        ),
    ],
)
def test_a_when_kinds_entry_that_never_matches_is_refused(
    tmp_path: Path, on: str, kinds: list[str], index: int, message: str
) -> None:
    # An observe hook filtering on a misspelt kind, or on one its `on` never follows, would
    # never run, without a word.
    hook = {"on": on, "run": ["true"], "when": {"kinds": kinds}}
    assert [(p.pointer, p.message) for p in problems_of(tmp_path, hook)] == [
        (f"/hooks/0/when/kinds/{index}", message)
    ]


def test_when_kinds_entries_that_can_match_are_taken(tmp_path: Path) -> None:
    for on, kinds in (("*", ["hook", "*"]), ("hook", ["hook.failed"]), ("run.finished", ["run"])):
        assert problems_of(tmp_path, {"on": on, "run": ["true"], "when": {"kinds": kinds}}) == []
