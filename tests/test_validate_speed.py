"""`validate` of a config of many hooks: the hooks are checked one by one, each shape of
invalid hook by jsonschema once (`config/manyhooks.py`), and what is found is exactly what a
walk of the whole document finds, every problem with its file and pointer."""

from __future__ import annotations

import collections
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcpx_hooks.supervisor.config import manyhooks
from mcpx_hooks.supervisor.config.manyhooks import SPLIT_FROM
from mcpx_hooks.supervisor.config.problems import problems
from mcpx_hooks.supervisor.config.schemas import document_problems, validator
from mcpx_hooks.supervisor.core.errors import Problem

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]

DATE = datetime.date(1979, 5, 1)
TIME = datetime.time(7, 32)

#: Hooks wrong in every way the schema says, and right ones, and the layer splice (`null`).
VARIED: list[Any] = [
    {"name": "a", "on": "script", "run": ["true"]},  # no phase: an observe hook on "script"
    {"name": "b", "on": "script", "phase": "before", "run": ["true"]},
    {"name": "c", "on": "script", "phase": "before"},  # no action
    {"name": "d", "on": "script", "phase": "before", "run": [""], "colour": 1},
    {"name": "", "on": "script", "phase": "before", "run": ["true"]},  # an empty name
    {"name": 7, "on": "script", "phase": "before", "run": ["true"]},
    {"on": "script", "phase": "nope", "run": ["true"], "timeoutMs": -1},
    {"on": "call", "phase": "before", "run": ["true"], "when": {"tool": []}},
    None,
    "a string",
    [],
    {"name": "e", "on": "script", "phase": "before", "run": ["true"], "timeoutMs": 1e400},
    {"name": "f", "on": "script", "phase": "before", "module": "x", "run": ["true"]},
    {"name": "g", "on": "script", "phase": "before", "run": ["true", 3]},
    {"name": "h", "on": "nowhere", "phase": "before", "run": ["true"]},
    {"name": "i", "on": "script", "phase": "before", "run": "true", "args": 5},
    {"name": "j", "on": "script", "phase": "before", "run": ["true"], "args": {}},
    {"name": "k", "on": "script", "phase": "before", "run": ["t"], "env": {"A=B": 1}, "x/y~": 2},
    {"name": "l", "on": "script", "phase": "observe", "run": ["true"], "failure": "x"},
    {"name": "m", "on": "script", "phase": "before", "run": ["t"], "timeoutMs": "x", "": 1},
    {"on": "script", "phase": "before", "plugin": "a.b", "answer": "x", "args": []},
    {"on": "script", "phase": "before", "source": ["x"], "effect": "nope", "when": {"x": 1}},
    # What only TOML gives: dates and times where a number, a string or an argv belongs.
    {"name": "n", "on": "script", "phase": "before", "run": ["t"], "timeoutMs": DATE},
    {"name": "o", "on": "script", "phase": TIME, "run": ["t", DATE], "env": {"A": TIME}},
    {"name": "p", "on": "script", "phase": "before", "run": ["t"], "timeoutMs": "1979-05-01"},
]


def varied_doc(copies: int) -> dict[str, Any]:
    hooks = [
        {**h, "name": f"{h['name']}{i}"} if isinstance(h, dict) and h.get("name") else h
        for i in range(copies)
        for h in VARIED
    ]
    return {"hooks": hooks, "colour": "blue", "defaults": {"timeoutMs": "x"}}


@pytest.mark.parametrize("copies", [1, SPLIT_FROM // len(VARIED) + 1, 20])
def test_the_split_finds_exactly_what_the_whole_walk_finds(copies: int) -> None:
    doc = varied_doc(copies)
    split = document_problems(doc, "c.json")
    whole = problems(validator("config"), doc, "c.json")
    assert [(p.file, p.pointer, p.message) for p in split] == [
        (p.file, p.pointer, p.message) for p in whole
    ]
    assert len(split) > 10 * copies


def test_fifty_thousand_copies_of_one_invalid_hook_are_walked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50,000 hooks missing their phase took about 20 s: jsonschema walked each one."""
    walked = []
    descend = jsonschema.Draft202012Validator.descend

    def counting(self: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(instance, dict) and instance.get("on") == "script":
            walked.append(instance["name"])
        return descend(self, instance, *args, **kwargs)

    monkeypatch.setattr(type(validator("config")), "descend", counting)
    hooks = [{"name": f"h{n}", "on": "script", "run": ["true"]} for n in range(50_000)]
    found = document_problems({"hooks": hooks}, "big.json")
    assert [p.pointer for p in found] == [f"/hooks/{n}/on" for n in range(50_000)]
    assert len({p.message for p in found}) == 1
    assert set(walked) == {"h0"}  # the first copy only (its if, then and else)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("timeoutMs", DATE, "expected an integer, found the TOML date 1979-05-01"),
        ("phase", TIME, "expected a phase of"),
        ("run", ["true", DATE], "expected a string"),
    ],
)
def test_many_hooks_with_one_toml_date_are_walked_once(
    monkeypatch: pytest.MonkeyPatch, key: str, value: Any, said: str
) -> None:
    """40,000 hooks with `timeoutMs = 1979-05-01` took 6.2 s to be refused, half again what
    as many with `timeoutMs = "soon"` took: a date has no JSON, so its problems were never
    shared, and jsonschema walked every hook. A date is now shared like any other value."""
    walks = []

    def counting(validator: Any, instance: Any, file: str) -> list[Problem]:
        walks.append(instance)
        return problems(validator, instance, file)

    monkeypatch.setattr(manyhooks, "problems", counting)
    hooks = [
        {"name": f"h{n}", "on": "script", "phase": "before", "run": ["true"], key: value}
        for n in range(2_000)
    ]
    found = document_problems({"hooks": hooks}, "big.toml")
    assert {p.pointer for p in found if said in p.message} == {
        f"/hooks/{n}/{key}{'/1' if key == 'run' else ''}" for n in range(2_000)
    }
    assert all(p.file == "big.toml" for p in found)
    assert len(walks) <= 3  # the document without its hooks, the first hook, its value


def wrong_in_its_own_way(n: int) -> Any:
    """Hook `n` of a generated file, wrong in one of ten ways, with a value of its own."""
    hook: dict[str, Any] = {"name": f"h{n}", "on": "script", "phase": "before", "run": ["true"]}
    match n % 10:
        case 0:
            del hook["run"]
            hook["timeout"] = n
        case 1:
            hook["run"] = ["true", n]
        case 2:
            hook["phase"] = f"ph{n}"
        case 3:
            hook[f"extra{n}"] = 1
        case 4:
            hook["timeoutMs"] = -n - 1
        case 5:
            hook["on"] = f"pt{n}"
        case 6:
            hook["run"] = f"true {n}"
        case 7:
            hook["env"] = {f"E{n}": n}
        case 8:
            hook["name"] = n
        case _:
            hook["failure"] = f"x{n}"
    return hook


def test_hooks_each_wrong_in_its_own_way_are_walked_once_a_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50,000 hooks each wrong in its own way (a value of its own) took about 20 s: each was
    a new shape, walked whole by jsonschema. Now a hook's frame (its keys, `on`, `phase`, which
    values are refused) is walked whole once, and each refused value on its own: the same
    problems, in the same words, at the same pointers, as a walk of the whole document."""
    walked = []
    descend = jsonschema.Draft202012Validator.descend

    def counting(self: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(instance, dict) and "on" in instance:
            walked.append(instance.get("name"))
        return descend(self, instance, *args, **kwargs)

    doc = {"hooks": [wrong_in_its_own_way(n) for n in range(400)]}
    whole = problems(validator("config"), doc, "c.json")
    monkeypatch.setattr(type(validator("config")), "descend", counting)
    split = document_problems(doc, "c.json")
    assert [(p.pointer, p.message) for p in split] == [(p.pointer, p.message) for p in whole]
    assert len(split) >= 400
    # One walk a frame: seven frames among eight kinds (a refused `run`, a string or an
    # item, is one), and forty of each of the other two: `phase` and `on` are the frame's.
    assert len(set(walked)) == 7 + 40 + 40


def test_validate_names_every_problem_of_many_hooks(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    hooks = [{"name": f"h{n}", "on": "script", "run": ["true"]} for n in range(2_000)]
    path.write_text(json.dumps({"hooks": hooks}))
    out = subprocess.run(
        [*CLI, "validate", str(path)], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [f"{path}:/hooks/{n}/on" for n in range(2000)]
    assert out.stderr == "2000 problem(s)\n"


@pytest.mark.parametrize("discover", [False, True])
def test_validate_of_one_file_builds_its_hooks_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    discover: bool,
) -> None:
    """`validate FILE` checked the file on its own, then loaded it again with the layers in
    force here for its warnings: 50,000 hooks were built twice (about a third of its time).
    Where nothing else is layered in (no file found, or the file found is the one given),
    the file's own `Config` is the layered one: built once, its warnings said all the same."""
    from mcpx_hooks.supervisor.cli.main import main
    from mcpx_hooks.supervisor.config import build, doccache, files, loading

    built: list[int] = []
    parsed: list[str] = []
    resolve, parse = build.resolve, files.parse_bytes

    def counted_resolve(layers: Any) -> Any:
        built.append(len(layers))
        return resolve(layers)

    def counted_parse(data: bytes, path: Path, file: str) -> Any:
        parsed.append(file)
        return parse(data, path, file)

    monkeypatch.setattr(loading, "resolve", counted_resolve)
    monkeypatch.setattr(files, "parse_bytes", counted_parse)
    monkeypatch.setattr(doccache, "_kept", collections.OrderedDict())  # (none checked before)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    if not discover:
        monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    hooks = [
        {"name": f"h{n}", "on": "script", "phase": "before", "run": ["true"]} for n in range(3)
    ]
    hooks.append({"on": "script", "phase": "before", "prompt": "x", "model": "nowhere"})
    (tmp_path / ".mcpx-hooks.json").write_text(json.dumps({"hooks": hooks}))
    assert main(["validate", ".mcpx-hooks.json"]) == 0
    out, err = capsys.readouterr()
    assert out == "ok: 1 file(s) valid\n"
    assert 'model "nowhere"' in err  # the warning of the layered load, still said
    assert built == [1] and parsed == [".mcpx-hooks.json"]


def test_validate_of_several_files_reads_and_checks_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate` of 3,000 files checked each on its own, then read, parsed and checked them
    all again to layer them for the warnings (3.8 s where `hooks list` of the same layers
    took 1.3 s). Each is now parsed once; the layered load takes the files' layers as they
    are, and builds only what layering them makes."""
    from mcpx_hooks.supervisor.cli.main import main
    from mcpx_hooks.supervisor.config import build, doccache, files, loading

    built: list[int] = []
    parsed: list[str] = []
    resolve, parse = build.resolve, files.parse_bytes
    monkeypatch.setattr(
        loading, "resolve", lambda layers: built.append(len(layers)) or resolve(layers)
    )
    monkeypatch.setattr(
        files,
        "parse_bytes",
        lambda data, path, file: parsed.append(file) or parse(data, path, file),
    )
    monkeypatch.setattr(doccache, "_kept", collections.OrderedDict())
    monkeypatch.setattr(doccache, "KEPT", 1)  # (fewer kept than files: each read again before)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    names = [f"c{n}.json" for n in range(3)]
    for n, name in enumerate(names):
        hook = {"name": f"h{n}", "on": "script", "phase": "before", "prompt": "x", "model": f"m{n}"}
        (tmp_path / name).write_text(json.dumps({"hooks": [hook]}))
    assert main(["validate", *names]) == 0
    out, err = capsys.readouterr()
    assert out == "ok: 3 file(s) valid\n"
    assert 'model "m2"' in err  # (the layered load's warning: the last file's hooks replace)
    assert parsed == names and built == [1, 1, 1, 3]


def test_hooks_that_set_no_default_of_their_own_share_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each hook was built with `[defaults]` overridden by itself and turned into a dict
    (`attrs.asdict`), and its phase, failure and answer words looked up by calling their
    enums: per hook, though 50,000 generated hooks rarely set any of them. A hook that sets
    none takes the defaults' fields as they are; one that does gets its own."""
    from mcpx_hooks.supervisor.config import build
    from mcpx_hooks.supervisor.config.build import Decl, Layer
    from mcpx_hooks.supervisor.core.hooks import DEFAULTS, Defaults, Provenance, SourceKind

    overridden: list[object] = []
    real = Defaults.overridden

    def counted(self: Defaults, table: Any) -> Defaults:
        overridden.append(table)
        return real(self, table)

    monkeypatch.setattr(Defaults, "overridden", counted)
    objs: list[dict[str, Any]] = [
        {"name": f"h{n}", "on": "script", "phase": "before", "run": ["true"]} for n in range(200)
    ]
    objs.append({"name": "own", "on": "script", "phase": "before", "run": ["t"], "timeoutMs": 5})
    decls = [
        Decl(obj, "c.json", f"/hooks/{i}", Provenance(SourceKind.FILE, "/c.json", i), "/")
        for i, obj in enumerate(objs)
    ]
    config, problems = build.resolve([Layer("c.json", {"hooks": decls}, "/c.json")])
    assert problems == [] and len(overridden) == 2  # `[defaults]` once, the one hook's own
    assert {h.timeout_ms for h in config.hooks[:-1]} == {DEFAULTS.timeout_ms}
    assert config.hooks[-1].timeout_ms == 5


def test_did_you_mean_asks_difflib_only_about_choices_that_could_be_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300,000 top-level keys each unknown in its own way (a 3 MB file) took 17 s to
    validate, most of it difflib comparing each key with every key the schema knows. A
    choice whose characters in common with the word (difflib's quick ratio, a bound on its
    ratio) are too few is not compared; what is said is what difflib alone says."""
    import difflib

    from mcpx_hooks.supervisor.config import closest as said

    choices = ("autonomy", "defaults", "limits", "hooks", "timeoutMs", "sandbox", "run", "mcp")

    def difflib_alone(word: str) -> str:
        close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
        lowered = {c.lower(): c for c in choices}
        close = close or ([lowered[word.lower()]] if word.lower() in lowered else [])
        return f'; did you mean "{close[0]}"?' if close else ""

    words = ["", "x", "k123", "timeout", "timeoutMS", "TIMEOUTMS", "hook", "sandbx", "rn", "mpc"]
    words += [c[:cut] + c[cut + 1 :] for c in choices for cut in range(len(c))]
    words += [c[:cut] + "q" + c[cut:] for c in choices for cut in range(len(c) + 1)]
    assert [said._closest.__wrapped__(w, choices) for w in words] == [
        difflib_alone(w) for w in words
    ]
    asked: list[list[str]] = []
    real = difflib.get_close_matches

    def counted(word: str, possibilities: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(list(possibilities))
        return real(word, possibilities, *args, **kwargs)

    monkeypatch.setattr(difflib, "get_close_matches", counted)
    assert said._closest.__wrapped__("k123", choices) == ""
    assert said._closest.__wrapped__("timeoutMS", choices) == '; did you mean "timeoutMs"?'
    assert asked == [["timeoutMs"]]


@pytest.mark.parametrize("valid", [True, False])
def test_validate_with_no_file_loads_a_project_not_trusted_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    valid: bool,
) -> None:
    """`validate` with no FILE loaded the layers found here, then, a project file being not
    trusted, all of them again with the project trusted: every file read, checked and built
    twice. One load now layers the project files not trusted as if they were, and names them
    as not trusted all the same (and says them when another layer has problems too, where
    the first load's problems were all it printed)."""
    from mcpx_hooks.supervisor.cli.main import main
    from mcpx_hooks.supervisor.config import build, files, loading

    loads: list[bool] = []
    read: list[str] = []
    load, read_bytes = loading.load_config, files.read_bytes

    def counted_load(*args: Any, **kwargs: Any) -> Any:
        loads.append(kwargs.get("trust_project", False))
        return load(*args, **kwargs)

    def counted_read(path: Path, file: str, **kwargs: Any) -> Any:
        read.append(Path(file).name)
        return read_bytes(path, file, **kwargs)

    built: list[int] = []
    resolve = build.resolve
    monkeypatch.setattr(loading, "load_config", counted_load)
    monkeypatch.setattr(files, "read_bytes", counted_read)
    monkeypatch.setattr(
        loading, "resolve", lambda layers: built.append(len(layers)) or resolve(layers)
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MCPX_HOOKS_NO_DISCOVERY", raising=False)
    monkeypatch.delenv("MCPX_HOOKS_TRUST", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    user = tmp_path / "home" / "mcpx-hooks" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[autonomy]\nmax = 'apply'\n" if valid else "[autonomy]\nmax = 'lots'\n")
    hook = '[[hooks]]\nname = "p"\non = "script"\nphase = "before"\nrun = ["true"]\n'
    (tmp_path / ".mcpx-hooks.toml").write_text(hook + ("" if valid else "effect = 'x'\n"))
    assert main(["validate"]) == (0 if valid else 2)
    out, err = capsys.readouterr()
    assert "skipped" in err and "not trusted" in err, err
    if valid:
        assert out == "ok: 2 file(s) valid (1 not trusted yet: `mcpx-hooks trust` applies it)\n"
    else:
        assert [line.split(": ")[0] for line in out.splitlines()] == [
            f"{user}:/autonomy/max",
            f"{tmp_path}/.mcpx-hooks.toml:/hooks/0/effect",
        ], out
    assert len(loads) == 1 and read == ["config.toml", ".mcpx-hooks.toml"]
    assert built == [2]  # (the two layers, built once)


def test_validate_says_how_many_project_files_are_not_trusted_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # (It said "applies it" of any number: "400 not trusted yet: `mcpx-hooks trust` applies it".)
    from mcpx_hooks.supervisor.cli.main import main

    monkeypatch.delenv("MCPX_HOOKS_NO_DISCOVERY", raising=False)
    monkeypatch.delenv("MCPX_HOOKS_TRUST", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    for directory in (tmp_path / "a", inner):
        (directory / ".mcpx-hooks.toml").write_text("[autonomy]\nmax = 'run'\n")
    monkeypatch.chdir(inner)
    assert main(["validate"]) == 0
    assert capsys.readouterr().out == (
        "ok: 2 file(s) valid (2 not trusted yet: `mcpx-hooks trust` applies them)\n"
    )
