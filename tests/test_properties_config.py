"""Properties (Hypothesis) of what a person's files hold: hostile config files through
`load_config`, `validate_files`, `mcpx-hooks validate` and `hooks list`; a hostile trust state
file through `load_config`, `hooks list`, `trust`, `trust --list` and `untrust`.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_service import tracebacks
from props import (
    Raw,
    deep,
    effect_word,
    examples,
    hook_object,
    hostile_json,
    hostile_text,
    huge_int,
    mutate,
    near_json,
    person_shell,
    profile_word,
    render,
    run_cli,
    source_line,
)

from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.core import changes
from mcpx_hooks.supervisor.core.errors import ConfigError, Problem

person = pytest.fixture(person_shell)


# ---- config files -------------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A value as TOML (inline), `Raw` as is: lone surrogates and NaN as TOML cannot
    hold them, so such a document is one the parser must refuse clearly."""
    if isinstance(value, Raw):
        return str(value)
    if value is None:
        return "null"  # not TOML: a document to refuse
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string, escapes as JSON's (\ud800 is refused)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return (
        "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    )


def toml_document(doc: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in doc.items())


valid_hook = st.fixed_dictionaries(
    {
        "on": st.just("script"),
        "phase": st.sampled_from(["before", "onSuccess", "suffix"]),
        "run": st.just(["true"]),
    },
    optional={
        "name": st.text("abcdef", min_size=1, max_size=5),
        "effect": st.sampled_from(["advise", "ask"]),
        "timeoutMs": st.integers(1, 10_000),
    },
)
#: A hook that is valid but for one thing that can never be spawned: validation must say so.
poisoned_hook = st.one_of(
    st.builds(
        lambda h, k: {**h, "env": {k: "x"}},
        valid_hook,
        st.sampled_from(["A=B", "=", "", "A\x00B", "\x00"]),
    ),
    st.builds(
        lambda h, v: {**h, "env": {"OK": v}}, valid_hook, st.sampled_from(["\x00", "a\x00b"])
    ),
    st.builds(
        lambda h, a: {**h, "run": ["true", a]}, valid_hook, st.sampled_from(["\x00", "a\x00b"])
    ),
    st.builds(lambda h: {**h, "run": ["true\x00"]}, valid_hook),
)
config_section: dict[str, st.SearchStrategy[Any]] = {
    "autonomy": st.one_of(
        st.fixed_dictionaries({}, optional={"max": effect_word, "hooks": effect_word}), hostile_json
    ),
    "defaults": st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "timeoutMs": st.one_of(st.integers(-1, 10**6), huge_int),
                "killGraceMs": st.integers(-1, 10**4),
                "maxOutputBytes": st.one_of(st.integers(-1, 10**7), huge_int),
                "effect": effect_word,
                "sandbox": profile_word,
            },
        ),
        hostile_json,
    ),
    "limits": st.one_of(
        st.dictionaries(
            st.sampled_from(["memoryMb", "cpuSeconds", "processes", "openFiles", "x"]),
            st.one_of(st.integers(-1, 10**6), huge_int, hostile_json),
            max_size=3,
        ),
        hostile_json,
    ),
    "runs": st.one_of(
        st.fixed_dictionaries({"retain": st.one_of(st.integers(-1, 10**4), huge_int)}), hostile_json
    ),
    "script": st.one_of(
        st.dictionaries(
            st.sampled_from(["before", "onSuccess", "x"]),
            st.lists(source_line, max_size=2),
            max_size=2,
        ),
        hostile_json,
    ),
    "hooks": st.one_of(st.lists(st.one_of(valid_hook, hook_object()), max_size=3), hostile_json),
    "service": st.one_of(
        st.fixed_dictionaries({"sandboxes": st.lists(profile_word, max_size=3)}), hostile_json
    ),
    # `[models]`: runBudgetTokens beside model tables of every shape.
    "models": st.one_of(
        st.dictionaries(
            st.one_of(st.sampled_from(["default", "runBudgetTokens", "cli", "a b"]), hostile_text),
            st.one_of(
                st.fixed_dictionaries(
                    {"provider": st.sampled_from(["openai", "command", "x"])},
                    optional={
                        "url": st.one_of(st.just("http://127.0.0.1:1/v1"), hostile_text),
                        "model": hostile_text,
                        "apiKeyEnv": st.one_of(st.just("KEY"), hostile_text),
                        "maxTokens": st.one_of(st.integers(-1, 10**6), huge_int),
                        "maxConcurrent": st.one_of(st.integers(-1, 2000), huge_int),
                        "temperature": st.one_of(st.floats(allow_nan=True), hostile_json),
                        "command": st.lists(hostile_text, max_size=2),
                        "sandbox": profile_word,
                    },
                ),
                st.integers(-1, 10**6),
                huge_int,
                hostile_json,
            ),
            max_size=3,
        ),
        hostile_json,
    ),
}


@st.composite
def config_document(draw: st.DrawFn) -> dict[str, Any]:
    doc = {
        key: draw(config_section[key])
        for key in draw(st.sets(st.sampled_from(sorted(config_section)), max_size=4))
    }
    doc.update(draw(st.dictionaries(hostile_text, hostile_json, max_size=1)))
    return doc


@st.composite
def config_file(draw: st.DrawFn) -> tuple[str, bytes | str | None, bool]:
    """(file name, contents: bytes to write, or a special kind; must it be refused)."""
    kind = draw(st.sampled_from(["doc", "doc", "doc", "poisoned", "raw", "special"]))
    suffix = draw(st.sampled_from([".toml", ".json"]))
    if kind == "special":
        return (
            draw(st.sampled_from(["c.toml", "c.json", "c.yaml", "c"])),
            draw(st.sampled_from(["loop", "dangling", "directory", "self-loop"])),
            True,
        )
    if kind == "raw":
        contents = draw(
            st.one_of(
                st.binary(max_size=64),
                st.sampled_from(
                    [
                        b"",
                        b"null",
                        b"[]",
                        b"\xef\xbb\xbf{}",
                        b"\xff\xfe",
                        b"\x00",
                        b'"hooks" = 1\x00',
                        b"[[hooks]]\n" * 3,
                    ]
                ),
                st.integers(129, 1_000).map(lambda n: f"a = {deep(n)}\n".encode()),
                st.integers(129, 1_000).map(
                    lambda n: ("a = " + "{b = " * n + "1" + "}" * n).encode()
                ),
                st.integers(129, 3_000).map(lambda n: ("a" + ".a" * n + " = 1\n").encode()),
                st.integers(129, 3_000).map(lambda n: ("[a" + ".a" * n + "]\n").encode()),
                st.sampled_from([1_000, 100_000]).map(lambda n: deep(n).encode()),
                st.sampled_from([1_000, 100_000]).map(lambda n: deep(n, "{").encode()),
                huge_int.map(lambda n: f"[runs]\nretain = {n}\n".encode()),
                huge_int.map(lambda n: f'{{"runs": {{"retain": {n}}}}}'.encode()),
            )
        )
        return f"c{suffix}", contents, False
    if kind == "poisoned":
        doc: dict[str, Any] = {"hooks": draw(st.lists(poisoned_hook, min_size=1, max_size=2))}
        must_refuse = True
    else:
        doc = draw(config_document())
        must_refuse = False
    text = render(doc) if suffix == ".json" else toml_document(doc)
    if kind == "doc" and draw(st.booleans()):
        text = draw(near_json(st.just(text)))
    return f"c{suffix}", text.encode("utf-8", "surrogatepass"), must_refuse


def write_config(directory: Path, name: str, contents: bytes | str) -> Path:
    path = directory / name
    if contents == "loop":
        (directory / "other.toml").symlink_to(path)
        path.symlink_to(directory / "other.toml")
    elif contents == "self-loop":
        path.symlink_to(path)
    elif contents == "dangling":
        path.symlink_to(directory / "gone.toml")
    elif contents == "directory":
        path.mkdir()
    else:
        assert isinstance(contents, bytes)
        path.write_bytes(contents)
    return path


ConfigCase = tuple[str, bytes | str, bool]
#: Issue 11, cases 2 and 6, as config files.
POISONED_TOML = b'[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\nenv = {"A=B" = "x"}\n'
CONFIG_CASES: list[ConfigCase] = [
    ("c.toml", f"a = {deep(1000)}\n".encode(), True),
    ("c.toml", ("a = " + "{b = " * 1000 + "1" + "}" * 1000).encode(), True),
    ("c.json", deep(100_000).encode(), True),
    ("c.toml", "loop", True),
    ("c.toml", "self-loop", True),
    ("c.toml", "dangling", True),
    ("c.toml", "directory", True),
    ("c.toml", POISONED_TOML, True),
    ("c.json", b'{"hooks": [{"on": "script", "phase": "before", "run": ["true\\u0000"]}]}', True),
    ("c.json", b'{"hooks": [{"on": "script", "phase": "before", "run": ["\\ud800"]}]}', True),
    ("c.toml", f"[runs]\nretain = {'9' * 5000}\n".encode(), True),
]


# `person` is one directory for all examples (each writes its own file under it).
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@examples("file", CONFIG_CASES)
@given(file=config_file())
def test_config_files(person: Path, file: ConfigCase) -> None:
    name, contents, must_refuse = file
    directory = person / f"c{len(list(person.iterdir()))}"
    directory.mkdir()
    path = write_config(directory, name, contents)
    given_name = str(path.relative_to(person))
    problems = validate_files([given_name])
    for problem in problems:
        assert isinstance(problem, Problem), problem
        assert problem.file == given_name, problem
        str(problem).encode("utf-8")  # a person can be shown it
        assert not tracebacks(str(problem)), problem
    if must_refuse:
        assert problems, f"{given_name}: accepted, though nothing could run it"
    try:
        load_config([given_name], cwd=person, environ={}, discover=False)
        loaded = True
    except ConfigError as exc:
        loaded = False
        assert exc.problems
    assert loaded == (not problems), (loaded, problems)
    code, out, err = run_cli(["validate", given_name])
    assert code == (2 if problems else 0), (code, out, err)
    code, out, err = run_cli(["hooks", "list", "--config", given_name, "--json"])
    assert code == (2 if problems else 0), (code, out, err)


@st.composite
def trust_state_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """A trust state file as a hostile hand left it: junk bytes, JSON of any shape, a
    near-valid document broken in one place, or something that is not a file at all."""
    sha = draw(st.sampled_from(["a" * 64, "A" * 64, "", "a" * 63, "\u0000"]))
    entry = draw(
        st.one_of(
            st.fixed_dictionaries({"sha256": st.just(sha), "trustedAt": hostile_json}),
            hostile_json,
        )
    )
    key = draw(st.one_of(st.just("@local"), hostile_text))
    doc = {"version": draw(st.one_of(st.just(1), hostile_json)), "files": {key: entry}}
    text = render(doc).replace("@local", "LOCAL")
    kind = draw(st.sampled_from(["json", "bytes", "mutated", "fifo", "dir", "loop", "0666"]))
    if kind == "bytes":
        return kind, draw(st.binary(max_size=200))
    if kind == "mutated":
        how = draw(st.sampled_from(["cut", "insert", "drop", "quote", "trail"]))
        text = mutate(text, draw(st.integers(0, 400)), how, draw(hostile_text))
    return kind, text.encode("utf-8", "surrogatepass")


# `person` is one directory for all examples (each a project of its own under it).
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(state=trust_state_file())
def test_a_hostile_trust_state_never_crashes_a_command(
    person: Path, monkeypatch: pytest.MonkeyPatch, state: tuple[str, bytes]
) -> None:
    kind, data = state
    project = person / f"p{len(list(person.iterdir()))}"
    project.mkdir()
    local = project / ".mcpx-hooks.toml"
    local.write_text('[[hooks]]\nname = "local"\non = "script"\nphase = "before"\nrun = ["x"]\n')
    path = person / "xdg_state_home" / "mcpx-hooks" / "trust.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in (path, path.with_name("other")):
        if old.is_dir() and not old.is_symlink():
            old.rmdir()
        elif old.exists() or old.is_symlink():
            old.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.with_name("other"))
        path.with_name("other").symlink_to(path)
    else:
        path.write_bytes(data.replace(b"LOCAL", str(local).encode()))
        path.chmod(0o666 if kind == "0666" else 0o600)
    monkeypatch.delenv("MCPX_HOOKS_NO_DISCOVERY", raising=False)
    monkeypatch.chdir(project)
    config = load_config(cwd=project, environ=os.environ)
    applied = [h.name for h in config.hooks] == ["local"]
    assert applied or config.skipped, "a project file neither applied nor said to be skipped"
    for warning in config.warnings:
        assert not tracebacks(warning), warning
    code, out, err = run_cli(["hooks", "list", "--json"])
    assert code == 0, (code, out, err)
    assert applied or "mcpx-hooks trust" in out
    code, out, err = run_cli(["trust", "--list"])
    assert code in (0, 2), (code, out, err)
    code, out, err = run_cli(["trust"])
    assert code in (0, 2), (code, out, err)
    if code == 0:  # it could read the state, so it wrote it: now the file applies
        config = load_config(cwd=project, environ=os.environ)
        assert [h.name for h in config.hooks] == ["local"], config.warnings
        assert run_cli(["untrust", str(local)])[0] == 0


# ---- when.files globs ---------------------------------------------------------------------------


def plain_glob_regex(pattern: str) -> re.Pattern[str]:
    """The rule of `when.files` as a plain translation, each `*` and `**` a greedy repeat:
    exact, and slow past a few stars (it tries every way to share a path out), so it is only
    the measure of the matcher on small examples."""

    def part(text: str) -> str:
        return "".join("[^/]*" if a is None else a for a in changes._atoms(text))

    if "/" not in pattern:
        return re.compile(r"(?:.*/)?" + part(pattern), re.DOTALL)
    parts = pattern.lstrip("/").split("/")
    out = ""
    for index, one in enumerate(parts):
        last = index == len(parts) - 1
        if one == "**":
            out += ".+" if last else "(?:[^/]+/)*"
        else:
            out += part(one) + ("" if last else "/")
    return re.compile(out, re.DOTALL)


glob_atom = st.sampled_from(["a", "b", ".", "*", "**", "?", "[ab]", "[!a]", "[", "]", "-"])
glob_part = st.lists(glob_atom, max_size=4).map("".join)
glob_pattern = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "/"]),
    st.lists(glob_part, min_size=1, max_size=6),
)
changed_path = st.lists(st.text("ab.*[]-", min_size=1, max_size=4), min_size=1, max_size=6).map(
    "/".join
)


@examples(
    "case", [("**/**/a", "b/b/a"), ("a/**/**", "a/b"), ("*a*b", "aab"), ("**/*a*/b", "x/aa/b")]
)
@given(case=st.tuples(glob_pattern, changed_path))
def test_when_files_matches_as_the_plain_rule_does(case: tuple[str, str]) -> None:
    pattern, path = case
    assert bool(changes.glob_regex(pattern).fullmatch(path)) is bool(
        plain_glob_regex(pattern).fullmatch(path)
    ), case


glob_set = st.builds(
    lambda negate, members: f"[{negate}{members}]",
    st.sampled_from(["", "!"]),
    st.text("ac-z[]!^\\", min_size=1, max_size=6),
).filter(lambda s: not s.startswith("[^"))  # a negation here, a `^` to fnmatch


@examples("case", [("[z-a]", "a"), ("[a-[ab]", "["), ("[!z-a]", "q"), ("[a-c-e]", "-")])
@given(case=st.tuples(glob_set, st.text("abcz-[]!^\\", min_size=1, max_size=1)))
def test_a_when_files_set_matches_as_fnmatch_does(case: tuple[str, str]) -> None:
    """A set (`[a-z]`, `[!a]`, a range the wrong way round) takes the characters
    `fnmatch` would, `when.argv`'s matcher: `[z-a]` raised re.error (a traceback) before."""
    pattern, char = case
    assert bool(changes.glob_regex(pattern).fullmatch(char)) is fnmatch.fnmatchcase(
        char, pattern
    ), case


_TOML_PIECE = st.sampled_from(
    ["[[hooks]]", "[hooks.when]", "[a]", '["x=]y"]', "name = 1", "a.b = 2", '"k=v" = 3',
     "x = { a = 1 }", "= =", "]", "[", '"', "#", "", "max.x = [1,", "]]"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_TOML_PIECE, max_size=12), noise=st.text(max_size=20))
def test_a_toml_file_refused_names_a_pointer_or_the_root_and_never_fails(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], noise: str
) -> None:
    # Any TOML text, its keys given twice or not, is read or refused with problems: a key
    # given twice at a pointer into the document that parses, anything else at the root.
    directory = tmp_path_factory.mktemp("toml")
    path = directory / "c.toml"
    path.write_text("\n".join([*pieces, *pieces[:3], noise]) + "\n", encoding="utf-8")
    try:
        load_config([str(path)], cwd=directory, environ={}, discover=False)
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            if "more than once (line" in problem.message:
                assert problem.pointer.startswith("/")


def test_a_hostile_key_given_twice_is_said_at_the_root_at_once(tmp_path: Path) -> None:
    # a million `=` in a quoted key, given twice: a parse for each would never end
    key = '"' + "=" * 1_000_000 + '"'
    path = tmp_path / "c.toml"
    path.write_text(f"{key} = 1\n{key} = 2\n", encoding="utf-8")
    found = validate_files([str(path)])
    assert [(p.pointer, p.message[:40]) for p in found] == [
        ("", "invalid TOML: Cannot overwrite a value (")
    ]


# ---- a model's apiKeyEnv: a variable's name, never the key ----------------------------------

#: The words `passenv.looks_like_key` refuses an `apiKeyEnv` with (its length said, not it).
PASTED = "found a string of {n} characters that reads as the key itself (not shown)"


def key_env_problems(given: str) -> list[Problem]:
    """The problems at the key of a config whose model's `apiKeyEnv` is `given` (JSON, so
    that any string, a lone surrogate too, is written as it is)."""
    model = {"provider": "openai", "url": "http://127.0.0.1:1/v1", "apiKeyEnv": given}
    data = json.dumps({"models": {"default": model}}).encode()
    found = validate_files(["c.json"], data=data)
    assert all(p.pointer == "/models/default/apiKeyEnv" for p in found), found
    return found


#: Names people give the variable: the providers' own (their docs' examples), and any
#: written as names are: words of letters and digits joined by `_`, upper or lower case, or
#: written together in camelCase.
_PROVIDERS = ["OPENAI", "ANTHROPIC", "AZURE_OPENAI", "GROQ", "OPENROUTER", "GEMINI", "GOOGLE",
              "MISTRAL", "TOGETHER", "DEEPSEEK", "XAI", "PERPLEXITY", "FIREWORKS"]  # fmt: skip
variable_name = st.one_of(
    st.sampled_from([f"{p}_API_KEY" for p in _PROVIDERS] + ["HF_TOKEN", "LOOP_KEY", "LLM_KEY"]),
    st.from_regex(r"[A-Z_][A-Z0-9]{0,15}(_[A-Z0-9]{1,15}){0,6}", fullmatch=True),
    st.from_regex(r"[a-z_][a-z0-9]{0,15}(_[a-z0-9]{1,15}){0,6}", fullmatch=True),
    # written together (camelCase): a long run, with digits, under 32 characters
    st.from_regex(r"[a-z]{1,9}[0-9]{0,2}([A-Z][a-z]{0,9}[0-9]{0,2}){0,4}", fullmatch=True).filter(
        lambda name: len(name) < 32
    ),
)
_TOKEN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_URL_SAFE = _TOKEN + "-_"
#: Keys as their issuers shape them, and any other random token (digits in two places).
pasted_key = st.one_of(
    st.tuples(st.sampled_from(["sk-", "sk-proj-", "sk-ant-api03-", "sk-or-v1-", "xai-", "pplx-"]),
              st.text(_URL_SAFE, min_size=20, max_size=160)).map("".join),
    st.tuples(st.sampled_from(["hf_"]), st.text(_TOKEN, min_size=30, max_size=40)).map("".join),
    st.tuples(st.sampled_from(["gsk_"]), st.text(_TOKEN, min_size=40, max_size=56)).map("".join),
    st.tuples(st.sampled_from(["ghp_", "gho_"]), st.text(_TOKEN, min_size=36)).map("".join),
    st.tuples(st.just("AIza"), st.text(_URL_SAFE, min_size=35, max_size=35)).map("".join),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=16).map("AKIA".__add__),
    st.tuples(st.text(_TOKEN, min_size=24, max_size=40), st.text("0123456789", min_size=1),
              st.text(_TOKEN[:52], min_size=1, max_size=5), st.text("0123456789", min_size=1),
              st.text(_TOKEN, max_size=20)).map("".join).filter(lambda k: len(k) >= 32),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(name=variable_name)
def test_a_variable_s_name_is_never_refused_as_a_key(name: str) -> None:
    assert key_env_problems(name) == []


@settings(max_examples=300, deadline=None)
@given(key=pasted_key)
def test_a_key_pasted_as_apikeyenv_is_refused_by_its_length(key: str) -> None:
    (problem,) = key_env_problems(key)
    assert PASTED.format(n=len(key)) in problem.message
    assert key not in problem.message


@settings(max_examples=500, deadline=None)
@given(given_=st.one_of(st.text(), pasted_key, variable_name, hostile_text))
def test_an_apikeyenv_is_taken_or_refused_without_being_repeated(given_: str) -> None:
    # Any string: taken, or refused at its pointer by words that do not repeat it (a short
    # one, `=`, is found in any sentence; from 8 characters on it would be the value's own).
    found = key_env_problems(given_)
    for problem in found:
        assert len(given_) < 8 or given_ not in problem.message, problem
        assert f"{len(given_)} characters" in problem.message, problem


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    doc=config_document(),
    hooks=st.lists(
        st.one_of(
            hook_object(),
            st.fixed_dictionaries(
                {"on": st.just("script"), "phase": st.just("before"), "run": st.just(["true"])},
                optional={
                    "name": st.sampled_from(["x", "script.before.0"]),
                    "failure": st.just("closed"),
                    "effect": effect_word,
                    "parallel": st.booleans(),
                },
            ),
        ),
        max_size=4,
    ),
    index=st.integers(0, 3),
    suffix=st.sampled_from([".json", ".toml"]),
)
def test_a_problem_added_to_a_hook_hides_none_said_before(
    doc: dict[str, Any], hooks: list[Any], index: int, suffix: str
) -> None:
    """Every problem a config has alone is still said when a hook of it gets another one (a
    key the schema does not know): the rules across hooks and tables are checked beside it."""
    name = f"c{suffix}"

    def said(listed: list[Any]) -> set[Problem]:
        whole = {**doc, "hooks": listed}
        text = render(whole) if suffix == ".json" else toml_document(whole)
        return set(validate_files([name], data=text.encode("utf-8", "surrogatepass")))

    alone = said(hooks)
    if (
        index >= len(hooks)
        or not isinstance(hooks[index], dict)
        or any(
            p.pointer == ""
            for p in alone  # (a document not read: where is said moves with it)
        )
    ):
        return
    added = said([{**h, "zzzUnknown": 1} if i == index else h for i, h in enumerate(hooks)])
    assert alone <= added, sorted(alone - added, key=str)
