"""`validate` says every problem of a config at once: the rules that need every hook or every
layer (a unique name, `failure = "closed"` with an effect that may refuse, a locked hook, a
plugin hook's server, `parallel`, a hook's `network`) are checked over a hook or a table that
has another problem too, and none says what only follows from a problem already said. Each
run is the installed command, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MCPX = str(Path(sys.executable).with_name("mcpx-hooks"))


def environment(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MCPX_HOOKS_NO_DISCOVERY", "MCPX_HOOKS_TRUST")
    }
    home = tmp_path / "home"
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
    )
    return env


def validate(tmp_path: Path, *args: str, cwd: Path | None = None) -> list[str]:
    """The problems `validate ARGS` prints, each `FILE:POINTER: message`, after it exits 2."""
    out = subprocess.run(
        [MCPX, "validate", *args],
        check=False,
        cwd=cwd or tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and f"{len(lines)} problem(s)" in out.stderr, out
    return lines


def pointers(lines: list[str]) -> list[str]:
    return [line.split(": ", 1)[0] for line in lines]


def toml(hooks: list[dict[str, object]], head: str = "") -> str:
    """`hooks` as `[[hooks]]` tables after `head` (values as JSON, which TOML reads too for
    strings, numbers, booleans and arrays of them)."""
    out = [head]
    for hook in hooks:
        out.append("[[hooks]]")
        out += [f"{key} = {json.dumps(value)}" for key, value in hook.items()]
    return "\n".join(out) + "\n"


GATE = {"on": "script", "phase": "before", "run": ["true"]}


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_duplicate_name_is_said_beside_the_hooks_other_problems(
    tmp_path: Path, suffix: str
) -> None:
    """Hooks 0 and 1 both named "x", each with another problem: the duplicate name was said
    only once the other problems were fixed."""
    hooks: list[dict[str, object]] = [
        {**GATE, "name": "x", "timeoutMs": "soon"},
        {**GATE, "name": "x", "effect": "bogus"},
        {**GATE, "name": "y"},
    ]
    path = tmp_path / f"c{suffix}"
    path.write_text(json.dumps({"hooks": hooks}) if suffix == ".json" else toml(hooks))
    lines = validate(tmp_path, path.name)
    assert pointers(lines) == [
        f"{path.name}:/hooks/0/timeoutMs",
        f"{path.name}:/hooks/1/effect",
        f"{path.name}:/hooks/1/name",
    ], lines
    assert f'found "x" again (first declared at {path.name}:/hooks/0)' in lines[2]


def test_each_rule_across_hooks_is_said_beside_the_hook_s_other_problem(tmp_path: Path) -> None:
    """`failure = "closed"` with an effect below ask, `parallel` with an effect above advise,
    and `network` with an unconfined sandbox were each skipped on a hook with another
    problem; so was a plugin hook's undeclared server."""
    hooks: list[dict[str, object]] = [
        {**GATE, "name": "closed", "failure": "closed", "timeoutMs": "x"},
        {**GATE, "name": "fast", "parallel": True, "effect": "ask", "timeoutMs": "x"},
        {**GATE, "name": "net", "sandbox": "none", "network": ["a.example"], "timeoutMs": "x"},
        {"on": "call", "phase": "before", "name": "plug", "plugin": "nope.read", "timeoutMs": "x"},
    ]
    (tmp_path / "c.toml").write_text(toml(hooks))
    lines = validate(tmp_path, "c.toml")
    assert pointers(lines) == [
        "c.toml:/hooks/0/failure",
        "c.toml:/hooks/0/timeoutMs",
        "c.toml:/hooks/1/parallel",
        "c.toml:/hooks/1/timeoutMs",
        "c.toml:/hooks/2/network",
        "c.toml:/hooks/2/timeoutMs",
        "c.toml:/hooks/3/plugin",
        "c.toml:/hooks/3/timeoutMs",
    ], lines


def test_what_only_follows_from_a_broken_table_is_not_said(tmp_path: Path) -> None:
    """A problem in `[defaults]` or in `[servers.fs]` took the whole table out, and the rules
    that read it said what followed: a gate `failure = "closed"` under `[defaults] effect =
    "ask"` needed an effect that may refuse, a plugin hook on fs had no server declared."""
    head = (
        '[defaults]\neffect = "ask"\ntimeoutMs = "x"\n\n'
        '[servers.fs]\ncommand = ["fs-server"]\nbogus = 1\n\n'
    )
    hooks: list[dict[str, object]] = [
        {**GATE, "name": "gate", "failure": "closed"},
        {"on": "call", "phase": "before", "name": "plug", "plugin": "fs.read"},
    ]
    (tmp_path / "c.toml").write_text(toml(hooks, head))
    lines = validate(tmp_path, "c.toml")
    assert pointers(lines) == ["c.toml:/defaults/timeoutMs", "c.toml:/servers/fs/bogus"], lines


def test_a_value_a_problem_took_out_is_never_read_as_its_default(tmp_path: Path) -> None:
    """A hook whose own effect is refused, or whose name is, is not said to fail closed with
    the default effect, nor to share a default name: those follow from the problem said."""
    hooks: list[dict[str, object]] = [
        {**GATE, "failure": "closed", "effect": "bogus"},
        {**GATE, "name": 7},
        {**GATE, "name": "script.before.1"},
    ]
    (tmp_path / "c.toml").write_text(toml(hooks))
    lines = validate(tmp_path, "c.toml")
    assert pointers(lines) == ["c.toml:/hooks/0/effect", "c.toml:/hooks/1/name"], lines


def test_a_locked_hook_redefined_by_a_hook_with_a_problem_is_said_too(tmp_path: Path) -> None:
    """The user's config locks "gate"; the project file redefines it in a hook that has
    another problem: the lock was said only once that problem was fixed."""
    user = tmp_path / "home" / ".config" / "mcpx-hooks" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(toml([{**GATE, "name": "gate", "locked": True}]))
    project = tmp_path / "p"
    project.mkdir()
    (project / ".mcpx-hooks.toml").write_text(toml([{**GATE, "name": "gate", "timeoutMs": "x"}]))
    lines = validate(tmp_path, "--trust-project", cwd=project)
    local = project / ".mcpx-hooks.toml"
    assert pointers(lines) == [f"{local}:/hooks/0", f"{local}:/hooks/0/timeoutMs"], lines
    assert f'hook "gate" is locked by {user}:/hooks/0' in lines[0]


def test_a_hook_that_is_not_a_table_is_said_not_a_traceback(tmp_path: Path) -> None:
    """`{"hooks": [false, …]}`: the hook that is not an object is said, beside the rules over
    the others, never a traceback."""
    hooks = [False, {**GATE, "name": "x"}, {**GATE, "name": "x", "timeoutMs": "x"}]
    (tmp_path / "c.json").write_text(json.dumps({"hooks": hooks}))
    lines = validate(tmp_path, "c.json")
    assert pointers(lines) == [
        "c.json:/hooks/0",
        "c.json:/hooks/2/name",
        "c.json:/hooks/2/timeoutMs",
    ]


def test_a_hook_whose_only_action_a_problem_took_out_is_said_not_a_traceback(
    tmp_path: Path,
) -> None:
    """`source` in a `[[hooks]]` entry (legal only under `[script]`): the problem took out its
    one action, and the hook was built with none (StopIteration, found by the property in
    test_properties_config.py as `nobody`)."""
    hook = {"on": "script", "phase": "before", "source": []}
    (tmp_path / "c.json").write_text(json.dumps({"hooks": [hook]}))
    assert pointers(validate(tmp_path, "c.json")) == ["c.json:/hooks/0/source"]
