"""Loading, layering, validating and defaulting configs (SPEC §2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from mcpx_hooks.supervisor.config import files as config_files
from mcpx_hooks.supervisor.config.files import discover_files
from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.errors import ConfigError, Problem
from mcpx_hooks.supervisor.core.events import kind_prefixes
from mcpx_hooks.supervisor.core.hooks import (
    DEFAULT_OBSERVE_DRAIN_MS,
    Action,
    Config,
    Defaults,
    Failure,
    Profile,
    Provenance,
    SourceKind,
)
from mcpx_hooks.supervisor.core.points import POINTS, Phase, PointInfo

EXAMPLE_TOML = """\
[autonomy]
max = "apply"
hooks = "ask"

[defaults]
timeoutMs = 7000
killGraceMs = 250
maxOutputBytes = 4096
effect = "propose"
sandbox = "net"

[runs]
retain = 12

[script]
before = ["import os"]
onError = ["print('failed:', error)"]

[[hooks]]
name = "deps"
on = "script"
phase = "before"
run = ["python3", "check_deps.py"]
effect = "ask"
failure = "closed"
timeoutMs = 5000
env = { LEVEL = "strict" }
enabled = true

[[hooks]]
on = "script"
phase = "onSuccess"
module = "hooks/shape.py"
cwd = "hooks"
when = { argv = ["pytest*"], cwd = ["*/proj"] }
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def write_json(path: Path, doc: Any) -> Path:
    return write(path, json.dumps(doc))


def load(cwd: Path, *files: Path | str, **kwargs: Any) -> Config:
    return load_config(files, cwd=cwd, environ={}, discover=False, **kwargs)


def problems(cwd: Path, *files: Path | str, **kwargs: Any) -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        load(cwd, *files, **kwargs)
    return info.value.problems


def where(found: list[Problem]) -> list[tuple[str, str]]:
    return [(p.file, p.pointer) for p in found]


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def hook_toml(on: str = "script", phase: str = "before", **keys: Any) -> str:
    """One `[[hooks]]` entry; `run = ["true"]` unless given (`run=None` leaves it out)."""
    keys.setdefault("run", ["true"])
    lines = [f'on = "{on}"', f'phase = "{phase}"']
    lines += [f"{k} = {toml_value(v)}" for k, v in keys.items() if v is not None]
    return "[[hooks]]\n" + "\n".join(lines) + "\n"


def one_problem(tmp_path: Path, text: str, name: str = "c.toml") -> Problem:
    path = write(tmp_path / name, text)
    found = problems(tmp_path, path)
    assert len(found) == 1, found
    assert found[0].file == str(path)
    return found[0]


# --- loading -------------------------------------------------------------------------------


def test_toml_config_is_loaded(tmp_path: Path) -> None:
    path = write(tmp_path / "proj" / "c.toml", EXAMPLE_TOML)
    config = load(tmp_path, path)
    assert config.autonomy_max is Effect.APPLY
    assert config.autonomy_hooks is Effect.ASK
    assert config.defaults == Defaults(7000, 250, 4096, Effect.PROPOSE, Profile.NET)
    assert config.runs_retain == 12
    assert config.script == {
        Phase.BEFORE: ("import os",),
        Phase.ON_ERROR: ("print('failed:', error)",),
    }
    assert config.files == (str(path),)
    deps, shape = config.hooks
    assert deps.name == "deps"
    assert (deps.on, deps.phase, deps.action) == ("script", Phase.BEFORE, Action.RUN)
    assert deps.target == ("python3", "check_deps.py")
    assert (deps.effect, deps.failure, deps.timeout_ms) == (Effect.ASK, Failure.CLOSED, 5000)
    assert deps.env == {"LEVEL": "strict"}
    assert deps.enabled is True
    assert deps.declaring_dir == str(tmp_path / "proj")
    assert deps.source == Provenance(SourceKind.FILE, str(path), 0)
    assert deps.cwd is None
    assert deps.workdir == str(tmp_path / "proj")
    assert shape.name == "script.onSuccess.0"
    assert (shape.action, shape.target) == (Action.MODULE, "hooks/shape.py")
    assert shape.cwd == str(tmp_path / "proj" / "hooks")
    assert shape.when == {"argv": ["pytest*"], "cwd": ["*/proj"]}
    assert shape.source == Provenance(SourceKind.FILE, str(path), 1)


def test_json_config_is_loaded_like_toml(tmp_path: Path) -> None:
    import tomllib

    doc = tomllib.loads(EXAMPLE_TOML)
    doc["$schema"] = "urn:mcpx-hooks:schema:config"
    toml_config = load(tmp_path, write(tmp_path / "a" / "c.toml", EXAMPLE_TOML))
    json_config = load(tmp_path, write_json(tmp_path / "a" / "c.json", doc))
    assert [to_json(h) | {"source": None} for h in json_config.hooks] == [
        to_json(h) | {"source": None} for h in toml_config.hooks
    ]
    assert json_config.script == toml_config.script
    assert json_config.defaults == toml_config.defaults


def test_json_tolerates_a_bom_and_reads_integral_floats(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"defaults": {"timeoutMs": 5000.0}}).encode())
    config = load(tmp_path, path)
    assert config.defaults.timeout_ms == 5000
    assert type(config.defaults.timeout_ms) is int


def test_config_files_are_relative_to_cwd(tmp_path: Path) -> None:
    write(tmp_path / "c.toml", hook_toml(name="x"))
    assert [h.name for h in load(tmp_path, "c.toml").hooks] == ["x"]


def test_empty_config_gives_the_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, write(tmp_path / "c.toml", ""))
    assert config.hooks == ()
    assert config.script == {}
    assert config.autonomy_max is Effect.RUN
    assert config.autonomy_hooks is Effect.RUN
    assert config.defaults == Defaults()
    assert config.runs_retain == 256


def test_no_files_at_all(tmp_path: Path) -> None:
    assert load(tmp_path) == Config()


# --- defaults ------------------------------------------------------------------------------


def test_default_names_count_per_point_and_phase(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        hook_toml()
        + hook_toml(name="named")
        + hook_toml(phase="onError")
        + hook_toml()
        + hook_toml(on="run.finished", phase="observe"),
    )
    assert [h.name for h in load(tmp_path, path).hooks] == [
        "script.before.0",
        "named",
        "script.onError.0",
        "script.before.2",
        "run.finished.observe.0",
    ]


def test_per_hook_defaults_come_from_the_defaults_table(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        """\
        [defaults]
        timeoutMs = 1234
        killGraceMs = 0
        maxOutputBytes = 99
        effect = "apply"
        sandbox = "none"
        """
        + hook_toml(name="plain")
        + hook_toml(
            name="own",
            timeoutMs=5,
            killGraceMs=6,
            maxOutputBytes=7,
            effect="off",
            sandbox="strict",
        ),
    )
    plain, own = load(tmp_path, path).hooks
    assert (plain.timeout_ms, plain.kill_grace_ms, plain.max_output_bytes) == (1234, 0, 99)
    assert (plain.effect, plain.sandbox, plain.failure) == (
        Effect.APPLY,
        Profile.NONE,
        Failure.OPEN,
    )
    assert (own.timeout_ms, own.kill_grace_ms, own.max_output_bytes) == (5, 6, 7)
    assert (own.effect, own.sandbox) == (Effect.OFF, Profile.STRICT)


def test_built_in_defaults_without_a_defaults_table(tmp_path: Path) -> None:
    (hook,) = load(tmp_path, write(tmp_path / "c.toml", hook_toml())).hooks
    assert (hook.timeout_ms, hook.kill_grace_ms, hook.max_output_bytes) == (10_000, 500, 1 << 20)
    assert (hook.effect, hook.failure, hook.sandbox) == (
        Effect.ADVISE,
        Failure.OPEN,
        Profile.STRICT,
    )
    assert hook.env == {}
    assert hook.when == {}
    assert hook.args is None


def test_disabled_hooks_stay_listed(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", hook_toml(name="off", enabled=False) + hook_toml(name="on"))
    hooks = load(tmp_path, path).hooks
    assert [(h.name, h.enabled) for h in hooks] == [("off", False), ("on", True)]


def test_cwd_resolves_against_the_declaring_dir(tmp_path: Path) -> None:
    path = write(
        tmp_path / "d" / "c.toml",
        hook_toml(name="rel", cwd="sub/../x") + hook_toml(name="abs", cwd="/srv"),
    )
    rel, absolute = load(tmp_path, path).hooks
    assert rel.cwd == str(tmp_path / "d" / "x")
    assert absolute.cwd == "/srv"


def test_each_action_builds_its_target(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        '[servers.ns]\ncommand = ["srv"]\n'
        + hook_toml(name="r", run=["a", "b"])
        + '[[hooks]]\nname = "m"\non = "script"\nphase = "before"\nmodule = "pkg.mod:main"\n'
        + '[[hooks]]\nname = "p"\non = "script"\nphase = "before"\nprompt = "check @input"\n'
        + '[[hooks]]\nname = "g"\non = "script"\nphase = "before"\nplugin = "ns.tool"\n'
        + "args = { level = 2 }\n",
    )
    hooks = {h.name: h for h in load(tmp_path, path).hooks}
    assert (hooks["r"].action, hooks["r"].target) == (Action.RUN, ("a", "b"))
    assert (hooks["m"].action, hooks["m"].target) == (Action.MODULE, "pkg.mod:main")
    assert (hooks["p"].action, hooks["p"].target) == (Action.PROMPT, "check @input")
    assert (hooks["g"].action, hooks["g"].target) == (Action.PLUGIN, "ns.tool")
    assert hooks["g"].args == {"level": 2}


def test_observe_hooks_take_event_kinds_and_prefixes(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        hook_toml(on="hook.failed", phase="observe", when={"kinds": ["hook.failed"]})
        + hook_toml(on="hook", phase="observe")
        + hook_toml(on="*", phase="observe"),
    )
    hooks = load(tmp_path, path).hooks
    assert [(h.on, h.phase) for h in hooks] == [
        ("hook.failed", Phase.OBSERVE),
        ("hook", Phase.OBSERVE),
        ("*", Phase.OBSERVE),
    ]


# --- layering ------------------------------------------------------------------------------


def three_layers(tmp_path: Path, near_hooks: str) -> tuple[Config, list[Path]]:
    """far (TOML) → middle (JSON) → near (TOML, given), each in its own directory."""
    far = write(tmp_path / "far" / "c.toml", hook_toml(name="f0") + hook_toml(name="f1"))
    middle = write_json(
        tmp_path / "mid" / "c.json",
        {"hooks": [None, {"name": "m1", "on": "script", "phase": "before", "run": ["m"]}]},
    )
    near = write(tmp_path / "near" / "c.toml", near_hooks)
    return load(tmp_path, far, middle, near), [far, middle, near]


INHERIT = "[[hooks]]\ninherit = true\n"


def test_null_at_the_start_appends(tmp_path: Path) -> None:
    config, _ = three_layers(tmp_path, INHERIT + hook_toml(name="n0"))
    assert [h.name for h in config.hooks] == ["f0", "f1", "m1", "n0"]


def test_null_in_the_middle_splices_there(tmp_path: Path) -> None:
    config, _ = three_layers(tmp_path, hook_toml(name="n0") + INHERIT + hook_toml(name="n2"))
    assert [h.name for h in config.hooks] == ["n0", "f0", "f1", "m1", "n2"]


def test_null_at_the_end_prepends(tmp_path: Path) -> None:
    config, _ = three_layers(tmp_path, hook_toml(name="n0") + INHERIT)
    assert [h.name for h in config.hooks] == ["n0", "f0", "f1", "m1"]


def test_no_null_replaces(tmp_path: Path) -> None:
    config, _ = three_layers(tmp_path, hook_toml(name="n0"))
    assert [h.name for h in config.hooks] == ["n0"]


def test_an_empty_list_clears(tmp_path: Path) -> None:
    config, _ = three_layers(tmp_path, "hooks = []\n")
    assert config.hooks == ()


def test_a_layer_without_hooks_keeps_them(tmp_path: Path) -> None:
    config, _ = three_layers(tmp_path, "[runs]\nretain = 3\n")
    assert [h.name for h in config.hooks] == ["f0", "f1", "m1"]
    assert config.runs_retain == 3


def test_spliced_hooks_keep_their_provenance(tmp_path: Path) -> None:
    config, (far, middle, near) = three_layers(
        tmp_path, hook_toml(name="n0") + INHERIT + hook_toml(name="n2")
    )
    got = {h.name: (h.source, h.declaring_dir) for h in config.hooks}
    assert got == {
        "n0": (Provenance(SourceKind.FILE, str(near), 0), str(near.parent)),
        "f0": (Provenance(SourceKind.FILE, str(far), 0), str(far.parent)),
        "f1": (Provenance(SourceKind.FILE, str(far), 1), str(far.parent)),
        # index in *its* file's array, the null included
        "m1": (Provenance(SourceKind.FILE, str(middle), 1), str(middle.parent)),
        "n2": (Provenance(SourceKind.FILE, str(near), 2), str(near.parent)),
    }
    assert config.files == (str(far), str(middle), str(near))


def test_several_nulls_splice_at_each(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(run=["a"]))
    b = write_json(
        tmp_path / "b.json",
        {"hooks": [None, {"on": "script", "phase": "before", "run": ["b"]}, None]},
    )
    hooks = load(tmp_path, a, b).hooks
    assert [(h.name, h.target, h.source.file, h.source.index) for h in hooks] == [
        ("script.before.0", ("a",), str(a), 0),
        ("script.before.1", ("b",), str(b), 1),
        ("script.before.2", ("a",), str(a), 0),
    ]


def test_a_named_hook_spliced_twice_is_a_duplicate(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(name="a", enabled=False))
    b = write_json(tmp_path / "b.json", {"hooks": [None, None]})
    with pytest.raises(ConfigError) as info:  # the same hook twice: its name is duplicated
        load(tmp_path, a, b)
    assert where(info.value.problems) == [(str(a), "/hooks/0/name")]


def test_null_in_the_farthest_layer_splices_nothing(tmp_path: Path) -> None:
    a = write_json(
        tmp_path / "a.json", {"hooks": [None, {"on": "script", "phase": "before", "run": ["x"]}]}
    )
    assert [h.source.index for h in load(tmp_path, a).hooks] == [1]


def test_default_names_follow_the_resolved_order(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(run=["a"]))
    b = write(tmp_path / "b.toml", hook_toml(run=["b"]) + INHERIT)
    assert [(h.name, h.target) for h in load(tmp_path, a, b).hooks] == [
        ("script.before.0", ("b",)),
        ("script.before.1", ("a",)),
    ]


def test_script_lists_null_splice(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", '[script]\nbefore = ["a"]\nsuffix = ["s"]\n')
    b = write_json(tmp_path / "b.json", {"script": {"before": [None, "b"], "onError": ["e"]}})
    c = write(tmp_path / "c.toml", '[script]\nbefore = ["c", {inherit = true}]\nsuffix = []\n')
    assert load(tmp_path, a, b, c).script == {
        Phase.BEFORE: ("c", "a", "b"),
        Phase.ON_ERROR: ("e",),
    }


def test_tables_merge_key_by_key(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.toml",
        '[autonomy]\nmax = "apply"\nhooks = "ask"\n[defaults]\ntimeoutMs = 1\neffect = "ask"\n',
    )
    b = write(tmp_path / "b.toml", '[autonomy]\nhooks = "advise"\n[defaults]\ntimeoutMs = 2\n')
    config = load(tmp_path, a, b)
    assert (config.autonomy_max, config.autonomy_hooks) == (Effect.APPLY, Effect.ADVISE)
    assert (config.defaults.timeout_ms, config.defaults.effect) == (2, Effect.ASK)


def test_defaults_apply_to_hooks_of_farther_layers(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(name="x"))
    b = write(tmp_path / "b.toml", "hooks = [{inherit = true}]\n[defaults]\ntimeoutMs = 42\n")
    assert load(tmp_path, a, b).hooks[0].timeout_ms == 42


def test_command_line_and_per_call_hooks_append(tmp_path: Path) -> None:
    a = write(tmp_path / "d" / "a.toml", hook_toml(name="file"))
    cli = json.dumps({"name": "cli", "on": "script", "phase": "suffix", "run": ["c"]})
    per_call = MappingProxyType(
        {"name": "call", "on": "script", "phase": "onSuccess", "module": "m.py"}
    )
    config = load(tmp_path / "d", a, command_line_hooks=[cli], per_call_hooks=[per_call])
    assert [(h.name, h.source, h.declaring_dir) for h in config.hooks] == [
        ("file", Provenance(SourceKind.FILE, str(a), 0), str(tmp_path / "d")),
        ("cli", Provenance(SourceKind.COMMAND_LINE, None, 0), str(tmp_path / "d")),
        ("call", Provenance(SourceKind.PER_CALL, None, 0), str(tmp_path / "d")),
    ]
    assert to_json(config.hooks[1].source) == "command-line"
    assert to_json(config.hooks[2].source) == "per-call"


def test_per_call_script_is_layered_last(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", '[script]\nbefore = ["a"]\n')
    config = load(tmp_path, a, script={"before": [None, "b"], "suffix": ("s",)})
    assert config.script == {Phase.BEFORE: ("a", "b"), Phase.SUFFIX: ("s",)}
    found = problems(tmp_path, a, script={"befor": ["x"], "suffix": "s"})
    assert where(found) == [
        ("per-call script", "/script/befor"),
        ("per-call script", "/script/suffix"),
    ]
    assert 'did you mean "before"?' in found[0].message


# --- discovery -----------------------------------------------------------------------------


def test_discovery_order_farthest_first(tmp_path: Path) -> None:
    etc = write(tmp_path / "etc" / "config.toml", "")
    user = write(tmp_path / "xdg" / "mcpx-hooks" / "config.toml", "")
    top_toml = write(tmp_path / "w" / ".mcpx-hooks.toml", "")
    top_json = write(tmp_path / "w" / ".mcpx-hooks.json", "{}")
    deeper = write(tmp_path / "w" / "a" / "b" / ".mcpx-hooks.json", "{}")
    write(tmp_path / "w" / "a" / "b" / "c" / "unrelated.toml", "")
    write(tmp_path / "elsewhere" / ".mcpx-hooks.toml", "")
    cwd = tmp_path / "w" / "a" / "b" / "c"
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    found = discover_files(cwd, environ, etc_dir=tmp_path / "etc")
    assert found == [etc, user, top_toml, top_json, deeper]


def test_discovery_falls_back_to_home_config(tmp_path: Path) -> None:
    user = write(tmp_path / "home" / ".config" / "mcpx-hooks" / "config.toml", "")
    write(tmp_path / "xdg" / "mcpx-hooks" / "config.toml", "")
    for environ in (
        {"HOME": str(tmp_path / "home")},
        {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "xdg"},
    ):
        assert discover_files(tmp_path / "w", environ, etc_dir=tmp_path / "etc") == [user]
    assert discover_files(tmp_path / "w", {}, etc_dir=tmp_path / "etc") == []


def test_a_relative_home_names_no_user_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME=. made `./.config/mcpx-hooks/config.toml` the user's config, a trusted place: a
    project that ships that file had its hooks applied without `trust`, wherever the command
    ran. A HOME that is not absolute names no user config, as an unset one does."""
    project = tmp_path / "p"
    write(project / ".config" / "mcpx-hooks" / "config.toml", hook_toml(name="planted"))
    monkeypatch.chdir(project)
    for home in (".", "p", ""):
        environ = {"HOME": home}
        assert discover_files(project, environ, etc_dir=tmp_path / "etc") == []
        config = load_config(cwd=project, environ=environ, etc_dir=tmp_path / "etc")
        assert config.hooks == ()


def test_discovery_can_be_switched_off(tmp_path: Path) -> None:
    write(tmp_path / "etc" / "config.toml", hook_toml(name="etc"))
    write(tmp_path / ".mcpx-hooks.toml", "")
    environ = {"MCPX_HOOKS_NO_DISCOVERY": "1"}
    assert discover_files(tmp_path, environ, etc_dir=tmp_path / "etc") == []
    config = load_config(cwd=tmp_path, environ=environ, etc_dir=tmp_path / "etc")
    assert config.hooks == ()
    config = load_config(cwd=tmp_path, environ={}, etc_dir=tmp_path / "etc", discover=False)
    assert config.hooks == ()


def test_load_config_layers_discovered_then_given_files(tmp_path: Path) -> None:
    etc = write(tmp_path / "etc" / "config.toml", hook_toml(name="etc"))
    local = write(tmp_path / "w" / ".mcpx-hooks.toml", INHERIT + hook_toml(name="local"))
    given = write(
        tmp_path / "given.json",
        json.dumps(
            {"hooks": [None, {"name": "given", "on": "script", "phase": "before", "run": ["g"]}]}
        ),
    )
    trusted = {"MCPX_HOOKS_TRUST": "all"}  # the project file applies only once trusted
    config = load_config([given], cwd=tmp_path / "w", environ=trusted, etc_dir=tmp_path / "etc")
    assert [h.name for h in config.hooks] == ["etc", "local", "given"]
    assert config.files == (str(etc), str(local), str(given))
    local_hook = config.find("local")
    assert local_hook is not None
    assert local_hook.declaring_dir == str(tmp_path / "w")


def test_a_file_given_twice_applies_once(tmp_path: Path) -> None:
    local = write(tmp_path / ".mcpx-hooks.toml", hook_toml(name="local"))
    config = load_config(
        [local, ".mcpx-hooks.toml"], cwd=tmp_path, environ={}, etc_dir=tmp_path / "etc"
    )
    assert [h.name for h in config.hooks] == ["local"]
    assert config.files == (str(local),)


# --- refusals ------------------------------------------------------------------------------


def test_shell_string_in_run_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(run="echo hi"))
    assert problem.pointer == "/hooks/0/run"
    assert 'expected an argv array of strings, found the string "echo hi"' in problem.message
    assert (
        "run takes an argv array, never a shell string;"
        ' to use a shell write ["sh", "-c", "echo hi"]' in problem.message
    )


def test_every_argv_key_refuses_a_shell_string_as_run_does(tmp_path: Path) -> None:
    """A server's `command` and `install` and a model's `command` are argvs too: a string is
    never taken as "a list of one" (a program named "python3 tools.py" runs nothing)."""
    path = tmp_path / "c.toml"
    path.write_text(
        '[servers.w]\ncommand = "python3 tools.py"\ninstall = ["npm", ""]\n'
        '[servers.v]\ncommand = [""]\ninstall = []\n'
        '[models.m]\nprovider = "command"\ncommand = "llm -m x"\ntemperature = 2.5\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config([path], cwd=tmp_path, environ={}, discover=False)
    said = {p.pointer: p.message for p in caught.value.problems}
    shell = "takes an argv array, never a shell string; to use a shell write"
    assert said == {
        "/models/m/command": 'expected an argv array of strings, found the string "llm -m x":'
        f' command {shell} ["sh", "-c", "llm -m x"]',
        "/models/m/temperature": "expected a number ≤ 2, found the number 2.5",
        "/servers/v/command/0": "expected the program to run (a non-empty string), found the"
        ' string ""',
        "/servers/v/install": "expected an argv array with at least the program, found an"
        " empty array",
        "/servers/w/command": "expected an argv array of strings, found the string"
        f' "python3 tools.py": command {shell} ["sh", "-c", "python3 tools.py"]',
    }


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ([], "expected an argv array with at least the program, found an empty array"),
        (["ls", 3], "expected a string, found the integer 3"),
        ({"x": 1}, "expected an argv array of strings, found an object"),
    ],
)
def test_run_must_be_a_non_empty_argv(tmp_path: Path, run: Any, expected: str) -> None:
    problem = one_problem(tmp_path, hook_toml(run=run))
    assert problem.pointer.startswith("/hooks/0/run")
    assert problem.message == expected


def test_zero_actions_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, '[[hooks]]\non = "script"\nphase = "before"\n')
    assert problem.pointer == "/hooks/0"
    assert problem.message == (
        "a hook takes exactly one action (run, module, prompt, plugin), found none"
    )


def test_two_actions_name_the_keys(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(module="m.py"))
    assert problem.pointer == "/hooks/0"
    assert problem.message.endswith("found 2: run, module")


def test_phase_outside_the_six(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(phase="beforee"))
    assert problem.pointer == "/hooks/0/phase"
    assert 'found the string "beforee"; did you mean "before"?' in problem.message
    assert '"observe"' in problem.message


def test_phase_the_point_does_not_have(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POINTS, "script", PointInfo("script", "one script run", (Phase.BEFORE,)))
    problem = one_problem(tmp_path, hook_toml(phase="onError"))
    assert problem.pointer == "/hooks/0/phase"
    assert problem.message == 'expected a phase of the point "script" (before), found "onError"'


def test_prefix_takes_inline_source_only(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(phase="prefix"))
    assert problem.pointer == "/hooks/0/phase"
    assert "[script].prefix" in problem.message


def test_source_in_hooks_points_to_script(tmp_path: Path) -> None:
    text = '[[hooks]]\non = "script"\nphase = "before"\nsource = ["import os"]\n'
    problem = one_problem(tmp_path, text)
    assert problem.pointer == "/hooks/0/source"
    assert "[script].<phase>" in problem.message


def test_a_point_nothing_fires_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(on="request"))
    assert problem.pointer == "/hooks/0/on"
    assert 'expected a point that something fires ("script"' in problem.message
    assert 'found the string "request"' in problem.message


@pytest.mark.parametrize(
    ("extra", "origin"),
    [("", " (the default)"), ('[defaults]\neffect = "off"\n', " (the default)")],
)
def test_closed_below_ask_is_refused(tmp_path: Path, extra: str, origin: str) -> None:
    problem = one_problem(tmp_path, extra + hook_toml(failure="closed"))
    assert problem.pointer == "/hooks/0/failure"
    assert problem.message.endswith(f'found effect "{"off" if extra else "advise"}"{origin}')
    assert '"ask" or above' in problem.message


def test_closed_with_a_declared_low_effect(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(failure="closed", effect="advise"))
    assert problem.message.endswith('found effect "advise"')


def test_closed_is_legal_when_the_effect_may_refuse(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(name="x", failure="closed"))
    b = write(tmp_path / "b.toml", '[defaults]\neffect = "ask"\n')
    assert load(tmp_path, a, b).hooks[0].failure is Failure.CLOSED
    # the nearer default lowers it again: refused, blamed on the hook's own file
    c = write(tmp_path / "c.toml", '[defaults]\neffect = "advise"\n')
    assert where(problems(tmp_path, a, b, c)) == [(str(a), "/hooks/0/failure")]


@pytest.mark.parametrize(
    ("text", "pointer", "suggestion"),
    [
        ("[autonomy]\nmaxx = 'run'\n", "/autonomy/maxx", "max"),
        ("[defaults]\ntimeoutMS = 5\n", "/defaults/timeoutMS", "timeoutMs"),
        ("[runs]\nretian = 5\n", "/runs/retian", "retain"),
        ("[script]\nonSucess = ['x']\n", "/script/onSucess", "onSuccess"),
        ("[hook]\nx = 1\n", "/hook", "hooks"),
        (hook_toml(timeoutMS=5), "/hooks/0/timeoutMS", "timeoutMs"),
        (hook_toml().replace("phase", "phse"), "/hooks/0/phse", "phase"),
    ],
)
def test_unknown_keys_get_did_you_mean(
    tmp_path: Path, text: str, pointer: str, suggestion: str
) -> None:
    path = write(tmp_path / "c.toml", text)
    found = [p for p in problems(tmp_path, path) if "unknown key" in p.message]
    assert [(p.pointer, p.message) for p in found] == [
        (pointer, f'unknown key "{pointer.rsplit("/", 1)[1]}"; did you mean "{suggestion}"?')
    ]


def test_unknown_key_without_a_close_match_lists_the_keys(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, "[runs]\nzzz = 1\n")
    assert (
        problem.message
        == 'unknown key "zzz"; expected one of: retain, runBytes, retainBytes, artifactBytes'
    )


@pytest.mark.parametrize(
    ("text", "pointer", "message"),
    [
        (
            hook_toml(timeoutMs=0),
            "/hooks/0/timeoutMs",
            "expected an integer ≥ 1 ms, found the integer 0",
        ),
        (
            '[service]\nsandboxes = ["strict", "none", "strict"]\n',
            "/service/sandboxes",
            'expected no item twice, found the string "strict" more than once',
        ),
        (
            '[history]\npath = "state/history.db"\n',
            "/history/path",
            "expected an absolute path, or one under your home as ~/…, found the string"
            ' "state/history.db"',
        ),
        (
            '[mcp]\nseparator = "/"\n',
            "/mcp/separator",
            'expected letters, digits, _, - or ., found the string "/"',
        ),
        (
            '[servers."a b"]\ncommand = ["x"]\n',
            "/servers/a b",
            'expected a server name: letters, digits, _ or -, found the string "a b"',
        ),
        (
            hook_toml(timeoutMs=-5),
            "/hooks/0/timeoutMs",
            "expected an integer ≥ 1 ms, found the integer -5",
        ),
        (
            "[defaults]\ntimeoutMs = 0\n",
            "/defaults/timeoutMs",
            "expected an integer ≥ 1 ms, found the integer 0",
        ),
        (
            hook_toml(killGraceMs=-1),
            "/hooks/0/killGraceMs",
            "expected an integer ≥ 0 ms, found the integer -1",
        ),
        (
            hook_toml(timeoutMs="5000"),
            "/hooks/0/timeoutMs",
            'expected an integer, found the string "5000"',
        ),
        (
            hook_toml(timeoutMs=1.5),
            "/hooks/0/timeoutMs",
            "expected an integer, found the number 1.5",
        ),
        (
            hook_toml(enabled="yes"),
            "/hooks/0/enabled",
            'expected a boolean (true or false), found the string "yes"',
        ),
        (hook_toml(env={"A": 1}), "/hooks/0/env/A", "expected a string, found the integer 1"),
        (hook_toml(name=""), "/hooks/0/name", 'expected a non-empty string, found the string ""'),
        (
            hook_toml(failure="shut"),
            "/hooks/0/failure",
            'expected one of "open", "closed", found the string "shut"',
        ),
        (
            hook_toml(sandbox="strcit"),
            "/hooks/0/sandbox",
            'expected a sandbox profile of "strict", "workspace", "net", "none", found the string'
            ' "strcit";'
            ' did you mean "strict"?',
        ),
        (
            hook_toml(effect="apply!"),
            "/hooks/0/effect",
            'expected an effect of "off", "advise", "ask", "propose", "apply", "run",'
            ' found the string "apply!"; did you mean "apply"?',
        ),
        (
            # Matched against the whole working directory (absolute): it could never match.
            hook_toml(when={"cwd": ["*/ok*", "myproject*"]}),
            "/hooks/0/when/cwd/1",
            "expected a glob of the whole working directory, an absolute path: starting with /"
            " or a wildcard (*/myproject*); one that does not would never match, found the"
            ' string "myproject*"',
        ),
        ("[runs]\nretain = 0\n", "/runs/retain", "expected an integer ≥ 1, found the integer 0"),
        ("hooks = 3\n", "/hooks", "expected an array, found the integer 3"),
        (
            "[hooks]\nx = 1\n",
            "/hooks",
            "expected an array, found an object"
            " (in TOML, write each hook as [[hooks]], with double brackets)",
        ),
        ("hooks = [3]\n", "/hooks/0", "expected an object, found the integer 3"),
        (
            "[script]\nbefore = 'x'\n",
            "/script/before",
            'expected an array, found the string "x"; a list of one is written ["x"]',
        ),
        (
            "[script]\nbefore = [1]\n",
            "/script/before/0",
            "expected a string or null, found the integer 1",
        ),
        (
            '[[hooks]]\non = "script"\nrun = ["x"]\n',
            "/hooks/0/on",
            "expected an event kind the bus publishes, or a prefix of one ("
            + ", ".join(json.dumps(p) for p in kind_prefixes())
            + "): this hook observes (its phase is observe, the default when none is given),"
            ' and the string "script" would never fire; a hook on the point "script" names its'
            " phase (before, prefix, onSuccess, onError, suffix)",
        ),
        (
            hook_toml(run=None, module="not a module"),
            "/hooks/0/module",
            "expected a Python file (ending in .py) or package.module[:function],"
            ' found the string "not a module"',
        ),
        (
            hook_toml(run=None, plugin="tool"),
            "/hooks/0/plugin",
            'expected an MCP tool named "namespace.tool", found the string "tool"',
        ),
        (
            hook_toml(args={}),
            "/hooks/0/args",
            'expected "args" only with "plugin", found "args" without "plugin"',
        ),
    ],
)
def test_each_wrong_value_gets_one_clear_message(
    tmp_path: Path, text: str, pointer: str, message: str
) -> None:
    problem = one_problem(tmp_path, text)
    assert (problem.pointer, problem.message) == (pointer, message)


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        hook_toml(name="a") + hook_toml(name="a") + hook_toml() + hook_toml(name="script.before.2"),
    )
    found = problems(tmp_path, path)
    assert where(found) == [(str(path), "/hooks/1/name"), (str(path), "/hooks/3/name")]
    assert found[0].message == (
        f'expected a unique hook name, found "a" again (first declared at {path}:/hooks/0)'
    )


def test_a_defaulted_name_can_be_a_duplicate(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", hook_toml(name="script.before.1") + hook_toml())
    assert where(problems(tmp_path, path)) == [(str(path), "/hooks/1")]


def test_duplicates_across_layers(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(name="x"))
    b = write(tmp_path / "b.toml", INHERIT + hook_toml(name="x"))
    assert where(problems(tmp_path, a, b)) == [(str(b), "/hooks/1/name")]


def test_toml_syntax_error(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, '[autonomy]\nmax = "run\n')
    assert problem.pointer == ""
    assert problem.message.startswith("invalid TOML: ")
    assert "line 2, column" in problem.message


@pytest.mark.parametrize(
    ("text", "at", "key", "line"),
    [
        ('[[hooks]]\nname = "x"\nname = "y"\n', "/hooks/0/name", "name", 3),
        (
            '[[hooks]]\nname = "a"\n[[hooks]]\n[hooks.when]\nclient = "a"\nclient = "b"\n',
            "/hooks/1/when/client",
            "client",
            6,
        ),
        ("[[hooks]]\n[[hooks]]\n[hooks.when]\n[hooks.when]\n", "/hooks/1/when", "when", 4),
        ('[defaults]\n"time=out" = 1 # one\n"time=out" = 2\n', "/defaults/time=out", "time=out", 3),
        ("[autonomy]\nmax.x = 1\nmax.x = 2\n", "/autonomy/max/x", "x", 3),
    ],
)
def test_a_toml_key_given_twice_is_refused_at_its_pointer(
    tmp_path: Path, text: str, at: str, key: str, line: int
) -> None:
    # tomllib says only the line and column: the pointer is worked out as JSON's is given
    problem = one_problem(tmp_path, text)
    assert (problem.pointer, problem.message) == (
        at,
        f'the key "{key}" is given more than once (line {line})',
    )


def test_a_toml_key_given_twice_where_its_place_cannot_be_told_is_said_at_the_root(
    tmp_path: Path,
) -> None:
    problem = one_problem(tmp_path, "x = {a = 1, a = 2}\n")
    assert problem.pointer == ""
    assert problem.message.startswith("invalid TOML: ")


def test_json_syntax_error(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, '{"hooks": [\n  1,\n]}', name="c.json")
    assert problem.pointer == ""
    assert problem.message.startswith("invalid JSON: ")
    assert "(at line 3, column 1)" in problem.message


def test_a_json_key_given_twice_is_refused_at_its_pointer(tmp_path: Path) -> None:
    # JSON parsers keep the last value silently; TOML refuses: so does a JSON config.
    text = (
        '{"defaults": {"timeoutMs": 5, "timeoutMs": 50000},'
        ' "hooks": [{"on": "script", "phase": "before", "run": ["true"],'
        ' "run": ["sh", "-c", "echo surprise"], "run": ["false"]}]}'
    )
    path = write(tmp_path / "c.json", text)
    found = problems(tmp_path, path)
    assert [(p.file, p.pointer, p.message) for p in found] == [
        (str(path), "/defaults/timeoutMs", 'the key "timeoutMs" is given more than once'),
        (str(path), "/hooks/0/run", 'the key "run" is given more than once'),
    ]
    found = problems(tmp_path, command_line_hooks=['{"on": "script", "on": "script"}'])
    assert where(found) == [("--hook #1", "/on")]
    # the same key in different objects is no duplicate
    hook = {"name": "h", "on": "script", "phase": "before", "run": ["true"]}
    write_json(tmp_path / "ok.json", {"hooks": [hook, {**hook, "name": "i"}]})
    assert len(load(tmp_path, tmp_path / "ok.json").hooks) == 2


def test_json_root_must_be_an_object(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, "[]", name="c.json")
    assert (problem.pointer, problem.message) == ("", "expected an object, found an empty array")


def test_missing_config_file(tmp_path: Path) -> None:
    found = problems(tmp_path, "nope.toml")
    assert found == [
        Problem("nope.toml", "", f"no such file: {tmp_path / 'nope.toml'} (given with --config)")
    ]


def test_a_missing_config_file_is_said_missing_whatever_its_name(tmp_path: Path) -> None:
    # Not "expected a .toml or .json config file, found no extension": there is no file.
    found = problems(tmp_path, "nope")
    assert found == [
        Problem("nope", "", f"no such file: {tmp_path / 'nope'} (given with --config)")
    ]


def test_unsupported_file_type(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, "a: 1", name="c.yaml")
    assert problem.message == 'expected a .toml or .json config file, found ".yaml"'


def test_several_problems_in_one_file_come_together(tmp_path: Path) -> None:
    hooks = "".join(hook_toml(name=f"h{i}") for i in range(11))
    path = write(
        tmp_path / "c.toml",
        '[autonomy]\nmax = "high"\n'
        + hooks.replace('name = "h2"', 'name = "h2"\ntimeoutMs = 0').replace(
            'name = "h10"', 'name = "h10"\ncolour = "red"'
        )
        + hook_toml(run="ls"),
    )
    found = problems(tmp_path, path)
    assert [p.pointer for p in found] == [
        "/autonomy/max",
        "/hooks/2/timeoutMs",
        "/hooks/10/colour",
        "/hooks/11/run",
    ]


def test_problems_across_files_sort_by_layer_then_pointer(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(timeoutMs=0) + '[runs]\nretain = "x"\n')
    b = write(tmp_path / "b.toml", '[autonomy]\nmax = "x"\n')
    c = write(tmp_path / "c.toml", hook_toml(name="fine"))
    d = write(tmp_path / "d.json", "{")
    found = problems(tmp_path, b, a, c, d, "missing.toml")
    assert where(found) == [
        (str(b), "/autonomy/max"),
        (str(a), "/hooks/0/timeoutMs"),
        (str(a), "/runs/retain"),
        (str(d), ""),
        ("missing.toml", ""),
    ]
    text = str(ConfigError(found))
    assert f"{b}:/autonomy/max: " in text


def test_command_line_hook_errors(tmp_path: Path) -> None:
    good = json.dumps({"on": "script", "phase": "before", "run": ["x"]})
    found = problems(
        tmp_path,
        command_line_hooks=[
            good,
            '{"on": "script",',
            '"run"',
            json.dumps({"on": "script", "phase": "before", "run": "ls -l", "timeoutMS": 3}),
        ],
    )
    assert where(found) == [
        ("--hook #2", ""),
        ("--hook #3", ""),
        ("--hook #4", "/run"),
        ("--hook #4", "/timeoutMS"),
    ]
    assert found[0].message.startswith("invalid JSON: ")
    assert "(at line 1, column 17)" in found[0].message
    assert found[1].message == 'expected a hook object, found the string "run"'
    assert "never a shell string" in found[2].message
    assert 'did you mean "timeoutMs"?' in found[3].message


def test_command_line_hook_rules(tmp_path: Path) -> None:
    hook = {"on": "script", "phase": "prefix", "run": ["x"], "failure": "closed"}
    found = problems(tmp_path, command_line_hooks=[json.dumps(hook)])
    assert where(found) == [("--hook #1", "/phase")]
    hook["phase"] = "before"
    found = problems(tmp_path, command_line_hooks=[json.dumps(hook)])
    assert where(found) == [("--hook #1", "/failure")]


def test_per_call_hooks_attach_to_the_script_point(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        per_call_hooks=[{"on": "hook", "phase": "observe", "run": ["x"]}, {"on": "script"}, None],
    )
    assert [(p.file, p.pointer) for p in found] == [
        ("per-call hook #1", "/on"),
        ("per-call hook #2", ""),
        ("per-call hook #2", "/on"),
        ("per-call hook #3", ""),
    ]
    assert found[0].message.startswith('expected "script": per-call hooks')


def test_validate_files_takes_each_file_alone(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", hook_toml(name="x", failure="closed"))
    b = write(tmp_path / "b.toml", '[defaults]\neffect = "ask"\n' + hook_toml(name="x"))
    c = write(tmp_path / "c.json", "{}")
    found = validate_files([a, b, c, tmp_path / "gone.json"])
    assert where(found) == [(str(a), "/hooks/0/failure"), (str(tmp_path / "gone.json"), "")]
    assert found[1].message == f"no such file: {tmp_path / 'gone.json'}"
    assert validate_files([b, c]) == []


def test_no_problem_when_a_file_is_valid(tmp_path: Path) -> None:
    assert validate_files([write(tmp_path / "c.toml", EXAMPLE_TOML)]) == []


def test_discovery_names_are_the_documented_ones() -> None:
    assert config_files.LOCAL_NAMES == (".mcpx-hooks.toml", ".mcpx-hooks.json")
    assert str(config_files.ETC_DIR) == "/etc/mcpx-hooks"
    assert config_files.NO_DISCOVERY_ENV == "MCPX_HOOKS_NO_DISCOVERY"


# --- hostile files (issue 11, case 6): every one a Problem, never a traceback ---------------

TOO_DEEP_TOML = "invalid TOML: nested deeper than 128 levels"
TOO_DEEP_JSON = "invalid JSON: nested deeper than 128 levels"


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 1000 + "]" * 1000 + "\n",  # tomllib recurses: RecursionError
        "a = " + "{b = " * 1000 + "1" + " }" * 1000 + "\n",
        "a." * 200 + "b = 1\n",  # dotted keys nest without recursing: the depth check
        "[" + "a." * 200 + "b]\n",
        "a = " + "[" * 128 + "]" * 128 + "\n",  # 129 with the document itself
    ],
    ids=["arrays-1000", "inline-tables-1000", "dotted-200", "header-200", "arrays-129"],
)
def test_toml_nested_too_deep_is_a_problem_naming_the_file(tmp_path: Path, text: str) -> None:
    problem = one_problem(tmp_path, text)
    assert (problem.pointer, problem.message) == ("", TOO_DEEP_TOML)


def test_toml_at_the_depth_limit_reaches_the_schema(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, "a = " + "[" * 127 + "]" * 127 + "\n")
    assert (problem.pointer, problem.message) == (
        "/a",
        'unknown key "a"; expected one of: '
        "$schema, autonomy, defaults, limits, runs, history, observe, service, sandbox, script,"
        " when,"
        " models, servers, mcp, hooks",
    )


def test_json_nested_100k_deep_is_a_problem_naming_the_file(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, "[" * 100_000 + "]" * 100_000, name="c.json")
    assert (problem.pointer, problem.message) == ("", TOO_DEEP_JSON)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "c.toml",
            "[runs]\nretain = " + "9" * 5000 + "\n",
            "invalid TOML: Exceeds the limit (4300 digits) for integer string conversion:"
            " value has 5000 digits",
        ),
        (
            "c.json",
            '{"runs": {"retain": ' + "9" * 5000 + "}}",
            "invalid JSON: Exceeds the limit (4300 digits) for integer string conversion:"
            " value has 5000 digits",
        ),
    ],
)
def test_an_integer_too_long_to_convert_is_a_problem(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    problem = one_problem(tmp_path, text, name=name)
    assert (problem.pointer, problem.message) == ("", message)


def test_config_naming_a_symlink_loop_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "loop.toml").symlink_to("loop.toml")
    assert problems(tmp_path, "loop.toml") == [
        Problem(
            "loop.toml", "", "expected a config file, found a symlink loop (given with --config)"
        )
    ]


def test_config_naming_a_directory_or_a_dangling_symlink_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "dir.toml").mkdir()
    (tmp_path / "dangling.json").symlink_to("gone.json")
    assert problems(tmp_path, "dir.toml", "dangling.json") == [
        Problem("dir.toml", "", "expected a config file, found a directory (given with --config)"),
        Problem(
            "dangling.json",
            "",
            "expected a config file, found a dangling symlink (to 'gone.json')"
            " (given with --config)",
        ),
    ]


def test_config_naming_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.toml")  # opening it to read would block: the test would hang
    assert validate_files([tmp_path / "fifo.toml"]) == [
        Problem(str(tmp_path / "fifo.toml"), "", "expected a config file, found a FIFO")
    ]


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
def test_a_config_file_that_is_not_utf8_names_the_line_and_column(
    tmp_path: Path, bom: bytes
) -> None:
    # A Latin-1 "é" in a hook's name: the decoder's "position 30" was an offset into the
    # bytes (after the BOM), which a person could not find in an editor.
    path = tmp_path / "c.toml"
    path.write_bytes(bom + b'[[hooks]]\nname = "caf\xe9"\non = "script"\n')
    assert validate_files([path]) == [
        Problem(str(path), "", "cannot read the file: not UTF-8: byte 0xe9 at line 2, column 12")
    ]


def test_a_json_config_of_null_is_refused_as_an_array_is(tmp_path: Path) -> None:
    # `null` read as "nothing read": a valid, empty config (and `[]` refused beside it).
    for text, found in (("null", "null"), ("[]", "an empty array")):
        (tmp_path / "c.json").write_text(text)
        assert validate_files([tmp_path / "c.json"]) == [
            Problem(str(tmp_path / "c.json"), "", f"expected an object, found {found}")
        ]


def test_a_config_file_over_4_mib_is_refused_unread(tmp_path: Path) -> None:
    # A 20 MB file took a minute and 400 MB to check; what a config holds fits in KiB.
    big = tmp_path / "big.toml"
    big.write_text("[defaults]\n" + "# padding\n" * 500_000)
    assert validate_files([big]) == [
        Problem(str(big), "", "the file is over 4194304 bytes: not read")
    ]


def test_a_symlink_to_a_config_file_is_followed(tmp_path: Path) -> None:
    write(tmp_path / "real.toml", hook_toml(name="x"))
    (tmp_path / "link.toml").symlink_to("real.toml")
    assert [h.name for h in load(tmp_path, "link.toml", "real.toml").hooks] == ["x"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.symlink_to(p.name), "expected a config file, found a symlink loop"),
        (
            lambda p: p.symlink_to("gone.toml"),
            "expected a config file, found a dangling symlink (to 'gone.toml')",
        ),
        (lambda p: p.mkdir(), "expected a config file, found a directory"),
    ],
    ids=["symlink-loop", "dangling-symlink", "directory"],
)
def test_a_discovered_name_that_is_not_a_file_is_a_problem(
    tmp_path: Path, make: Any, message: str
) -> None:
    write(tmp_path / "etc" / "config.toml", hook_toml(name="etc"))
    local = tmp_path / "w" / ".mcpx-hooks.toml"
    local.parent.mkdir()
    make(local)
    etc_dir = tmp_path / "etc"
    assert discover_files(tmp_path / "w", {}, etc_dir=etc_dir) == [etc_dir / "config.toml", local]
    trusted = {"MCPX_HOOKS_TRUST": "all"}  # a project file trusted: it was meant to apply
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path / "w", environ=trusted, etc_dir=etc_dir)
    assert info.value.problems == [Problem(str(local), "", message)]
    # Not trusted, it cannot be pinned by a hash: skipped, and said.
    config = load_config(cwd=tmp_path / "w", environ={}, etc_dir=etc_dir)
    assert [h.name for h in config.hooks] == ["etc"]
    assert config.warnings == (
        f"skipped {local}: {message}, so it cannot be trusted;"
        " remove it, or make it a regular file you can read",
    )


def test_a_user_config_behind_a_directory_that_cannot_be_searched_is_a_problem(
    tmp_path: Path,
) -> None:
    # `~/.config/mcpx-hooks` a symlink loop: whether anything is at `config.toml` cannot be
    # told (as with a directory its user may not search, EACCES): it was read as "nothing
    # there" and the user's hooks vanished without a word, `validate` saying "ok".
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    (xdg / "mcpx-hooks").symlink_to("mcpx-hooks")
    user_file = xdg / "mcpx-hooks" / "config.toml"
    environ = {"XDG_CONFIG_HOME": str(xdg)}
    etc_dir = tmp_path / "etc"
    assert discover_files(tmp_path, environ, etc_dir=etc_dir) == [user_file]
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ=environ, etc_dir=etc_dir)
    assert info.value.problems == [
        Problem(str(user_file), "", "expected a config file, found a symlink loop")
    ]


def test_command_line_hooks_are_read_with_the_depth_limit(tmp_path: Path) -> None:
    deep = '{"on": "script", "phase": "before", "run": ["x"], "args": ' + "[" * 200 + "]" * 200
    found = problems(tmp_path, command_line_hooks=[deep + "}", "[" * 100_000 + "]" * 100_000])
    assert found == [
        Problem("--hook #1", "", TOO_DEEP_JSON),
        Problem("--hook #2", "", TOO_DEEP_JSON),
    ]


def test_a_per_call_hook_built_too_deep_is_a_problem(tmp_path: Path) -> None:
    args: Any = []
    for _ in range(200):
        args = [args]
    hook = {"on": "script", "phase": "before", "plugin": "a.b", "args": {"x": args}}
    assert problems(tmp_path, per_call_hooks=[hook]) == [
        Problem("per-call hook #1", "", "nested deeper than 128 levels")
    ]


# --- what a process cannot take (issue 11, case 2): refused with the pointer -----------------

TEXT_WORDS = "expected a string without NUL or lone surrogates (a process cannot take them)"
NAME_WORDS = "expected a variable name: not empty, without '=', NUL or lone surrogates"


def test_env_name_with_equals_is_refused_at_its_entry(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml() + 'env = { "A=B" = "x" }\n')
    assert (problem.pointer, problem.message) == (
        "/hooks/0/env/A=B",
        f'{NAME_WORDS}, found the string "A=B"',
    )


SECRET_GLOB_WORDS = (
    "expected a variable name, not a glob (a secret is one variable, named; passEnv takes"
    " globs): not empty, without '=', '*', '?', '[', NUL or lone surrogates"
)


@pytest.mark.parametrize(
    ("text", "pointer"),
    [
        (hook_toml(secrets=["TOKEN_*"]), "/hooks/0/secrets/0"),
        ('[script]\nsecrets = ["TOKEN_?"]\n', "/script/secrets/0"),
        ('[servers.s]\ncommand = ["x"]\nsecrets = ["TOKEN_[AB]"]\n', "/servers/s/secrets/0"),
        (
            '[servers.s]\ncommand = ["x"]\nsecrets = [{ name = "T*", hosts = ["a.org"] }]\n',
            "/servers/s/secrets/0/name",
        ),
    ],
    ids=["hook", "script", "server", "egress"],
)
def test_a_secret_named_by_a_glob_is_refused_where_it_is_written(
    tmp_path: Path, text: str, pointer: str
) -> None:
    # `passEnv` takes globs and `secrets` does not: a copied `T*` failed only at run time.
    problem = one_problem(tmp_path, text)
    assert (problem.pointer, problem.message.partition(", found")[0]) == (
        pointer,
        SECRET_GLOB_WORDS,
    )
    # a glob of names is said as written (a value that may be a secret is said by its length)
    assert problem.message.partition(", found ")[2].startswith('the string "T'), problem
    fixed = text.replace("T*", "TOKEN") if "hosts" in text else text.replace("secrets", "passEnv")
    load(tmp_path, write(tmp_path / "ok.toml", fixed))  # (passEnv takes the glob)


@pytest.mark.parametrize(
    "where",
    ['[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n', "[script]\n"],
    ids=["hook", "script"],
)
def test_secrets_written_as_a_string_is_refused_without_repeating_a_pasted_key(
    tmp_path: Path, where: str
) -> None:
    # `secrets = "ghp_…"` (the token itself, not in a list) was quoted twice in the refusal,
    # on stderr and in a per-call hook's 4400: a value that may be the secret is said by
    # its length; a variable's name or a glob of names, as written.
    token = "ghp_" + "S3cretValue4242" * 3
    problem = one_problem(tmp_path, f'{where}secrets = "{token}"\n')
    assert token not in problem.message and token.lower() not in problem.message.lower()
    assert problem.message == (
        f"expected an array, found a string of {len(token)} characters (not shown: it may be"
        ' the secret itself); a list of one is written ["NAME"]'
    )
    for name in ("GITHUB_TOKEN", "TOKEN_*"):
        problem = one_problem(tmp_path, f'{where}secrets = "{name}"\n')
        assert problem.message == (
            f'expected an array, found the string "{name}"; a list of one is written ["{name}"]'
        )


def test_empty_env_name_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml() + 'env = { "" = "x" }\n')
    assert (problem.pointer, problem.message) == (
        "/hooks/0/env/",
        f'{NAME_WORDS}, found the string ""',
    )


def test_nul_in_run_argv_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(run=["echo", "a\0b"]))
    assert (problem.pointer, problem.message) == (
        "/hooks/0/run/1",
        f'{TEXT_WORDS}, found the string "a\\u0000b"',
    )


def test_an_empty_program_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, hook_toml(run=["", "x"]))
    assert (problem.pointer, problem.message) == (
        "/hooks/0/run/0",
        'expected the program to run (a non-empty string), found the string ""',
    )


@pytest.mark.parametrize(
    ("keys", "pointer", "found"),
    [
        ({"run": ["a\0"]}, "/hooks/0/run/0", '"a\\u0000"'),
        ({"env": {"A": "v\0"}}, "/hooks/0/env/A", '"v\\u0000"'),
        ({"cwd": "sub\0"}, "/hooks/0/cwd", '"sub\\u0000"'),
        ({"name": "n\0"}, "/hooks/0/name", '"n\\u0000"'),
        ({"run": None, "module": "m\0.py"}, "/hooks/0/module", '"m\\u0000.py"'),
    ],
    ids=["program", "env-value", "cwd", "name", "module"],
)
def test_nul_anywhere_a_process_gets_it_is_refused(
    tmp_path: Path, keys: dict[str, Any], pointer: str, found: str
) -> None:
    problem = one_problem(tmp_path, hook_toml(**keys))
    assert (problem.pointer, problem.message) == (
        pointer,
        f"{TEXT_WORDS}, found the string {found}",
    )


def test_nul_in_a_script_line_is_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, '[script]\nbefore = ["x = 1\\u0000"]\n')
    assert (problem.pointer, problem.message) == (
        "/script/before/0",
        f'{TEXT_WORDS}, found the string "x = 1\\u0000"',
    )


def test_script_lines_that_are_not_python_are_refused_at_the_line_python_names(
    tmp_path: Path,
) -> None:
    # Found only when a script ran, before: `validate` said the file was valid.
    text = '[script]\nbefore = ["import os", "x = (1,", "print(x"]\nonError = ["pass"]\n'
    problem = one_problem(tmp_path, text)
    assert problem.pointer == "/script/before/2"
    assert problem.message == "does not compile as Python: '(' was never closed: 'print(x'"
    indented = '[script]\nsuffix = ["""if x:\n    a = 1\n  b = 2"""]\n'  # one item, three lines
    assert one_problem(tmp_path, indented).pointer == "/script/suffix/0"
    # Lines written indented, as under a heading, compile as one dedented block.
    load(tmp_path, write(tmp_path / "ok.toml", '[script]\nbefore = ["  x = 1", "  y = x"]\n'))
    found = problems(tmp_path, script={"prefix": ["def f(:"]})  # a per-call script too
    assert where(found) == [("per-call script", "/script/prefix/0")]
    # In one pass with the schema's problems (validate lists every problem at once).
    both = '[script]\nbefore = ["print(x"]\n' + hook_toml(secrets=["T*"])
    path = write(tmp_path / "both.toml", both)
    assert where(problems(tmp_path, path)) == [
        (str(path), "/hooks/0/secrets/0"),
        (str(path), "/script/before/0"),
    ]
    # A phase that splices a farther layer's lines in is compiled whole, where it runs.
    a = write(tmp_path / "a.toml", '[script]\nbefore = ["if True:"]\n')
    b = write(tmp_path / "b.toml", '[script]\nbefore = [{ inherit = true }, "    pass"]\n')
    assert where(problems(tmp_path, a)) == [(str(a), "/script/before/0")]
    assert load(tmp_path, b).script == {Phase.BEFORE: ("    pass",)}


def test_lone_surrogates_in_json_are_refused_and_printable(tmp_path: Path) -> None:
    hook = {"on": "script", "phase": "before", "run": ["x", "\ud800"], "env": {"N\udfff": "v"}}
    path = write(tmp_path / "c.json", json.dumps({"hooks": [hook]}))  # ASCII: \\ud800 escapes
    found = problems(tmp_path, path)
    assert [(p.pointer, p.message) for p in found] == [
        ("/hooks/0/env/N\\udfff", f'{NAME_WORDS}, found the string "N\\udfff"'),
        ("/hooks/0/run/1", f'{TEXT_WORDS}, found the string "\\ud800"'),
    ]
    for problem in found:
        str(problem).encode("utf-8")  # printable: no lone surrogate left


def test_per_call_and_command_line_hooks_take_the_same_rules(tmp_path: Path) -> None:
    hook = {"on": "script", "phase": "before", "run": ["x"], "env": {"A=B": "x"}}
    found = problems(tmp_path, command_line_hooks=[json.dumps(hook)], per_call_hooks=[hook])
    assert where(found) == [("--hook #1", "/env/A=B"), ("per-call hook #1", "/env/A=B")]


@pytest.mark.parametrize(
    ("text", "pointer", "message"),
    [
        (
            hook_toml(timeoutMs=10**30),
            "/hooks/0/timeoutMs",
            "expected an integer ≤ 9007199254740991 ms, found an integer of 31 digits",
        ),
        (
            "[limits]\nmemoryMb = 9999999999999\n",
            "/limits/memoryMb",
            "expected an integer ≤ 8796093022207, found the integer 9999999999999",
        ),
    ],
)
def test_integers_past_what_a_process_takes_are_refused(
    tmp_path: Path, text: str, pointer: str, message: str
) -> None:
    problem = one_problem(tmp_path, text)
    assert (problem.pointer, problem.message) == (pointer, message)


# --- the command line: exit 2, the problems, no traceback ------------------------------------


def test_validate_prints_every_hostile_file_as_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mcpx_hooks.supervisor.cli.main import main

    deep_toml = write(tmp_path / "deep.toml", "a = " + "[" * 1000 + "]" * 1000 + "\n")
    deep_json = write(tmp_path / "deep.json", "[" * 100_000 + "]" * 100_000)
    (tmp_path / "loop.toml").symlink_to("loop.toml")
    (tmp_path / "dir.toml").mkdir()
    env = write(tmp_path / "env.toml", hook_toml(run=["x", "\0"]) + 'env = { "A=B" = "x" }\n')
    surrogate = write(tmp_path / "s.json", json.dumps({"hooks": [{"run": ["\ud800"]}]}))
    files = [deep_toml, deep_json, tmp_path / "loop.toml", tmp_path / "dir.toml", env, surrogate]
    assert main(["validate", *map(str, files)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert out.splitlines() == [
        f"{deep_toml}:/: {TOO_DEEP_TOML}",
        f"{deep_json}:/: {TOO_DEEP_JSON}",
        f"{tmp_path / 'loop.toml'}:/: expected a config file, found a symlink loop",
        f"{tmp_path / 'dir.toml'}:/: expected a config file, found a directory",
        f'{env}:/hooks/0/env/A=B: {NAME_WORDS}, found the string "A=B"',
        f'{env}:/hooks/0/run/1: {TEXT_WORDS}, found the string "\\u0000"',
        f'{surrogate}:/hooks/0: missing the required key "on"',
        f'{surrogate}:/hooks/0/run/0: {TEXT_WORDS}, found the string "\\ud800"',
    ]
    assert err == "8 problem(s)\n"


@pytest.mark.parametrize("command", [["hooks", "list"], ["serve"]])
def test_a_command_loading_a_hostile_config_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    from mcpx_hooks.supervisor.cli.main import main

    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.toml").symlink_to("loop.toml")
    write(tmp_path / "deep.toml", "a = " + "[" * 1000 + "]" * 1000 + "\n")
    assert main([*command, "--config", "loop.toml", "--config", "deep.toml"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err.splitlines() == [
        "mcpx-hooks: the configuration is invalid:",
        "  loop.toml:/: expected a config file, found a symlink loop (given with --config)",
        f"  deep.toml:/: {TOO_DEEP_TOML}",
    ]


def test_a_command_says_a_config_s_problems_as_validate_does_without_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key is the file's data: `exec` wrote its ESC and line break as they came (a line
    # "end: exit code 0" of its own), where `validate` escaped them.
    from mcpx_hooks.supervisor.cli.main import main

    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "k.toml", '[limits]\n"x\\u001b[2J\\nend: exit code 0" = 1\n')
    assert main(["exec", "--config", "k.toml", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\nend: exit code 0" not in err, err
    # (a pointer's characters that are not printable: JSON escapes, as the message quotes it)
    assert "  k.toml:/limits/x\\u001b[2J\\nend: exit code 0: unknown key" in err, err


def test_a_file_name_with_a_line_break_keeps_each_problem_on_one_line(tmp_path: Path) -> None:
    """`validate $'a\\nb.toml'` printed `…/a` on a line and `b.toml:/hooks/0/run: …` on the
    next: a name that is not printable is now written as bash quotes it, `$'…/a\\nb.toml'`,
    in the problem's `FILE:POINTER` and in the file's own problems that name it again."""
    bad = write(tmp_path / "a\nb\x1b[2J.toml", '[[hooks]]\non = "script"\nrun = "true"\n')
    gone = tmp_path / "c\td.toml"
    out = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "validate", str(bad), str(gone)],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out
    shown = f"$'{tmp_path}/a\\nb\\x1b[2J.toml'"
    assert [line.split(": ")[0] for line in out.stdout.splitlines()] == [
        f"{shown}:/hooks/0/on",
        f"{shown}:/hooks/0/run",
        f"$'{tmp_path}/c\\td.toml':/",
    ], out.stdout
    assert out.stdout.splitlines()[-1].endswith(f"no such file: $'{tmp_path}/c\\td.toml'")
    assert "\x1b" not in out.stdout and out.stderr == "3 problem(s)\n"


# --- [sandbox] read / write and [script] sandbox --------------------------------------------


def test_sandbox_paths_append_across_layers_and_resolve_where_declared(tmp_path: Path) -> None:
    far = write(
        tmp_path / "etc" / "far.toml",
        '[sandbox]\nread = ["~/.pyenv", "/opt/tools", "shared"]\nwrite = ["/srv/out"]\n',
    )
    near = write(
        tmp_path / "project" / "near.toml",
        '[sandbox]\nread = ["/opt/tools", "~root/x"]\nwrite = ["build", "../cache"]\n'
        + hook_toml(),
    )
    cfg = load_config([far, near], cwd=tmp_path, environ={"HOME": "/home/op"}, discover=False)
    root_home = os.path.expanduser("~root")
    assert cfg.sandbox_paths.read == (
        "/home/op/.pyenv",
        "/opt/tools",
        f"{tmp_path}/etc/shared",
        f"{root_home}/x",
    )  # a nearer layer adds, never replaces; "/opt/tools" is not added twice
    assert cfg.sandbox_paths.write == (
        "/srv/out",
        f"{tmp_path}/project/build",
        f"{tmp_path}/cache",
    )
    assert cfg.hooks[0].paths == cfg.sandbox_paths


def test_sandbox_paths_a_nearer_empty_list_takes_nothing_away(tmp_path: Path) -> None:
    far = write(tmp_path / "far.toml", '[sandbox]\nread = ["/opt/tools"]\n')
    near = write(tmp_path / "near.toml", "[sandbox]\nread = []\nwrite = []\n")
    assert load(tmp_path, far, near).sandbox_paths.read == ("/opt/tools",)


def test_sandbox_path_problems(tmp_path: Path) -> None:
    unknown = one_problem(tmp_path, '[sandbox]\nread = ["~nosuchuser-mcpx/x"]\n')
    assert unknown.pointer == "/sandbox/read/0"
    assert 'there is no user "nosuchuser-mcpx"' in unknown.message
    nul = one_problem(tmp_path, '[sandbox]\nwrite = ["a\\u0000b"]\n', name="n.toml")
    assert nul.pointer == "/sandbox/write/0"
    empty = one_problem(tmp_path, '[sandbox]\nread = [""]\n', name="e.toml")
    assert empty.pointer == "/sandbox/read/0"
    typo = one_problem(tmp_path, '[sandbox]\nreads = ["/x"]\n', name="t.toml")
    assert typo.pointer == "/sandbox/reads"


def test_sandbox_path_patterns_and_variables_that_name_nothing_are_problems(
    tmp_path: Path,
) -> None:
    """A glob or a `$VARIABLE` is not expanded: written where a path is meant, it would be
    skipped as a path that does not exist, a `deny` protecting nothing. Each is a problem
    naming the file and the key; a path that exists with such a character is taken."""
    glob = one_problem(tmp_path, '[sandbox]\ndeny = ["/x", "~/.secret*"]\n', name="g.toml")
    assert (glob.file, glob.pointer) == (str(tmp_path / "g.toml"), "/sandbox/deny/1")
    assert glob.message == (
        'expected a path, found "~/.secret*": patterns are not expanded, and no path is'
        " named that; name each path"
    )
    var = one_problem(tmp_path, '[sandbox]\nwrite = ["$HOME/out"]\n', name="v.toml")
    assert var.pointer == "/sandbox/write/0"
    assert "variables are not expanded" in var.message
    roots = one_problem(tmp_path, '[service]\nroots = ["/srv/[ab]"]\n', name="r.toml")
    assert roots.pointer == "/service/roots/0"
    (tmp_path / "odd*dir").mkdir()
    taken = load(tmp_path, write(tmp_path / "o.toml", '[sandbox]\nread = ["odd*dir", "gone"]\n'))
    assert taken.sandbox_paths.read == (f"{tmp_path}/odd*dir", f"{tmp_path}/gone")


def test_the_runs_default_profile_is_workspace_and_script_sandbox_sets_it(
    tmp_path: Path,
) -> None:
    assert Config().script_sandbox is Profile.WORKSPACE
    plain = load(tmp_path, write(tmp_path / "a.toml", hook_toml()))
    assert plain.script_sandbox is Profile.WORKSPACE
    assert plain.defaults.sandbox is Profile.STRICT and plain.hooks[0].sandbox is Profile.STRICT
    text = '[defaults]\nsandbox = "net"\n[script]\nsandbox = "strict"\n' + hook_toml()
    cfg = load(tmp_path, write(tmp_path / "b.toml", text))
    assert cfg.script_sandbox is Profile.STRICT  # the runs'
    assert cfg.hooks[0].sandbox is Profile.NET  # the hooks' stays [defaults]
    assert cfg.script == {}  # `sandbox` is not a source phase


def test_layering_appends_only_the_sandbox_lists() -> None:
    from mcpx_hooks.supervisor.config import layering

    far = {"sandbox": {"read": ["/a", "/b"]}, "hooks": ["x"], "script": {"before": ["1"]}}
    near = {"sandbox": {"read": ["/b", "/c"], "write": ["/w"]}, "hooks": ["y"]}
    assert layering.merge_all([far, near]) == {
        "sandbox": {"read": ["/a", "/b", "/c"], "write": ["/w"]},
        "hooks": ["y"],  # null-splice: replaced
        "script": {"before": ["1"]},
    }


def test_observe_drain_ms_defaults_and_is_validated(tmp_path: Path) -> None:
    assert load(tmp_path).observe_drain_ms == DEFAULT_OBSERVE_DRAIN_MS == 2000
    path = write(tmp_path / "c.toml", "[observe]\ndrainMs = 500\n")
    assert load(tmp_path, path).observe_drain_ms == 500
    problem = one_problem(tmp_path, "[observe]\ndrainMs = -1\n", "bad.toml")
    assert problem.pointer == "/observe/drainMs"


def test_the_same_bytes_under_the_same_name_are_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`validate FILE` checks a file alone, then layered (its warnings): a file of 50,000
    hooks was parsed and checked against the schema twice. The same bytes under the same
    name are checked once; a file changed in any way is checked again."""
    from mcpx_hooks.supervisor.config import loading

    seen: list[str] = []
    real = loading._file_problems

    def counted(doc: Any, file: str) -> list[Problem]:
        seen.append(file)
        return real(doc, file)

    monkeypatch.setattr(loading, "_file_problems", counted)
    path = tmp_path / "c.toml"
    path.write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n')
    assert loading.validate_files([str(path)]) == []
    config = load_config([path], cwd=tmp_path, environ={}, discover=False)
    assert len(config.hooks) == 1 and seen == [str(path)]
    path.write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = "true"\n')
    (problem,) = loading.validate_files([str(path)])
    assert problem.pointer == "/hooks/0/run" and seen == [str(path)] * 2
    assert loading.validate_files([str(path)]) == [problem] and len(seen) == 2


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("c.json", '{"defaults": {"timeoutMs": 1e400}}', "read as infinity"),
        ("c.json", '{"defaults": {"timeoutMs": -1e400}}', "read as -infinity"),
        ("c.toml", "[defaults]\ntimeoutMs = inf\n", "read as infinity"),
        ("c.toml", "[defaults]\ntimeoutMs = nan\n", "not a number (nan)"),
    ],
)
def test_a_number_too_large_to_hold_is_one_problem(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    """1e400 reads as infinity: neither an integer nor under the maximum. It was two
    problems at one pointer ("expected an integer, found the number inf", then "expected an
    integer ≤ 9007199254740991 ms, found the number inf"); the type's is the one."""
    path = tmp_path / name
    path.write_text(text)
    (problem,) = validate_files([str(path)])
    assert problem.pointer == "/defaults/timeoutMs"
    assert problem.message.startswith("expected an integer, found ") and said in problem.message


def test_a_toml_date_where_a_string_goes_is_said_as_written(tmp_path: Path) -> None:
    """TOML reads `1979-05-27` unquoted as a date: the problem said "found date"."""
    path = tmp_path / "c.toml"
    path.write_text('[[hooks]]\non = "script"\nphase = "before"\nrun = ["true", 1979-05-27]\n')
    (problem,) = validate_files([str(path)])
    assert (problem.pointer, problem.message) == (
        "/hooks/0/run/1",
        "expected a string, found the TOML date 1979-05-27",
    )


def test_a_deep_chain_of_project_files_is_resolved_once_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each project file found had its real path taken three times (`os.path.realpath`:
    an lstat of every directory above it, each an lstat of a path as deep), so 600 nested
    project files took 16 s to list and 22 s to validate. The chain is resolved a directory
    at a time, each from its parent's, and says what `os.path.realpath` says, symlinks too."""
    hook = '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n'
    deep = tmp_path
    for level in range(60):
        deep = deep / ("link" if level == 30 else "d")
        if level == 30:  # a symlinked directory on the way
            (tmp_path / "elsewhere").mkdir()
            deep.symlink_to(tmp_path / "elsewhere")
        else:
            deep.mkdir()
        (deep / ".mcpx-hooks.toml").write_text(hook.replace('["true"]', f'["true", "{level}"]'))
    (tmp_path / "real.json").write_text('{"hooks": [null]}')
    (deep / ".mcpx-hooks.json").symlink_to(tmp_path / "real.json")  # a symlinked file
    (deep.parent / ".mcpx-hooks.json").symlink_to(deep.parent / ".mcpx-hooks.json")  # a loop
    found = config_files.discover(deep, {"HOME": str(tmp_path / "home")})
    assert len(found) == 62
    for each in found:
        assert each.real_dir == os.path.realpath(each.path.parent)
        assert each.real == os.path.realpath(each.path)
    lstats: list[str] = []
    lstat = os.lstat

    def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
        lstats.append(str(path))
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counted)
    environ = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    with pytest.raises(ConfigError) as info:  # (the loop: a problem, at its place)
        load_config(cwd=deep, environ=environ, trust_project=True)
    assert [(p.file, p.message) for p in info.value.problems] == [
        (str(deep.parent / ".mcpx-hooks.json"), "expected a config file, found a symlink loop")
    ]
    depth = len(deep.parts)
    assert len(lstats) < 8 * depth  # (each realpath alone was `depth` lstats, 3 a file)


def test_a_toml_date_in_vars_or_args_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    """`vars` and `args` take any value, and a TOML date passed the schema: `validate` said
    "ok", then `hooks list --json` died with a traceback (a date has no JSON), as would a
    prompt built with it. It is a problem at its pointer, with what to write instead."""
    write(
        tmp_path / "d.toml",
        '[[hooks]]\nname = "p"\non = "script"\nphase = "before"\nprompt = "on {{day}}"\n'
        "vars = { day = 1979-05-01 }\n"
        '[[hooks]]\nname = "g"\non = "script"\nphase = "before"\nplugin = "srv.tool"\n'
        "args = { at = [07:32:00] }\n"
        '[servers.srv]\ncommand = ["true"]\n',
    )
    for args in (["validate", "d.toml"], ["hooks", "list", "--json", "--config", "d.toml"]):
        out = subprocess.run(
            [sys.executable, "-m", "mcpx_hooks.supervisor", *args],
            check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60,
            env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        )  # fmt: skip
        assert out.returncode == 2 and "Traceback" not in out.stderr, out
        said = out.stdout + out.stderr
        assert (
            "d.toml:/hooks/0/vars/day: expected a JSON value (a string, a number, a boolean, an"
            " array or a table), found the TOML date 1979-05-01: vars are passed on as JSON,"
            ' which has no dates or times; write it as a string ("1979-05-01")'
        ) in said, said
        assert "d.toml:/hooks/1/args/at/0: expected a JSON value" in said, said
