"""Properties (Hypothesis) of the CLI's arguments: `cli.main([...])` with hostile flags and
values for `serve`, `exec`, `--input` and the other commands, its stdout and stderr captured
as a person's terminal has them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from props import (
    as_comment,
    deep,
    effect_word,
    examples,
    hostile_json,
    near_json,
    person_shell,
    render,
    run_cli,
)

from mcpx_hooks.supervisor.service import server as server_module

person = pytest.fixture(person_shell)


# ---- CLI arguments ------------------------------------------------------------------------------

#: Text a person can put in an argument: no NUL (no shell passes one), but undecodable
#: bytes, which Python gives as lone surrogates (`\udcff`).
arg_text = st.one_of(
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=20),
    st.sampled_from(["\udcff", "x\udc80y", "", "-", "--", "=", "A=B", " ", "\n", "-1", "0"]),
)
int_text = st.one_of(
    st.integers(-3, 3).map(str),
    st.integers(65_530, 70_000).map(str),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["9" * 50, "-0", " 80", "0x50", "1e3", "", "nan", "1.5", "8765"]),
    arg_text,
)
float_text = st.one_of(
    st.floats().map(repr),
    st.sampled_from(["-1", "0", "0.5", "nan", "inf", "-inf", "1e308", "x", ""]),
    int_text,
)
json_text = st.one_of(
    hostile_json.map(render),
    near_json(hostile_json.map(render)),
    st.sampled_from([deep(1000), deep(100_000), "9" * 5000, '{"x": ' + "9" * 5000 + "}"]),
    arg_text,
)
SERVE_FLAGS: dict[str, st.SearchStrategy[str]] = {
    "--port": int_text,
    "--max-connections": int_text,
    "--max-runs": int_text,
    "--max-message-bytes": int_text,
    "--grace": float_text,
    # Only names that need no DNS (loopback, or refused before any lookup): a property
    # test sends nothing past this machine.
    "--host": st.sampled_from(
        ["127.0.0.1", "localhost", "::1", "a" * 300, "\udcff", "127.0.0.1\udcff", "[::1]x\udcff"]
    ),
    "--allow-origin": arg_text,
}
#: For each numeric flag: the least it may be, the most it must take (past that, a server may
#: take the value or refuse it as absurd), the most it may be (None: no such bound).
NUMERIC: dict[str, tuple[float, float, float | None]] = {
    "--port": (0, 65535, 65535),
    "--max-connections": (1, 100_000, None),
    "--max-runs": (1, 100_000, None),
    "--max-message-bytes": (1, 64 * 1024 * 1024, None),
    "--grace": (0, 3600, None),
}


def flag_valid(flag: str, value: str) -> bool | None:
    """Whether `serve` must take the value (True), must refuse it (False), or either."""
    if flag in NUMERIC:
        try:
            number = float(value) if flag == "--grace" else int(value)
        except ValueError:
            return False
        low, must_take, most = NUMERIC[flag]
        if math.isnan(number) or number < low or (most is not None and number > most):
            return False
        return True if number <= must_take else None
    if flag == "--host":
        return True if value in ("127.0.0.1", "localhost", "::1") else None
    return None


@st.composite
def serve_argv(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    chosen = draw(st.dictionaries(st.sampled_from(sorted(SERVE_FLAGS)), st.just(""), max_size=3))
    flags = {flag: draw(SERVE_FLAGS[flag]) for flag in chosen}
    flags.setdefault("--host", "127.0.0.1")
    flags.setdefault("--port", "0")
    argv = ["serve", "--no-auth"]
    for flag, value in flags.items():
        argv += [f"{flag}={value}"] if value.startswith("-") else [flag, value]
    return argv, flags


#: A frames-channel line whose value takes the encoder's slow path (a lone surrogate, an
#: integer past 64 bits) with an infinity in it (`mcpx.emit` itself refuses infinities).
SLOW_PATH_EMIT = (
    "import os\nos.write(int(os.environ['MCPX_FRAMES_FD']),"
    ' b\'{"type":"emit","value":[-1e999,"\\\\ud800",18446744073709551616]}\\n\')'
)
exec_tail = st.one_of(
    st.builds(
        lambda first, rest: ["--", first, *rest],
        st.sampled_from(["true", "false", "echo", "no-such-program", "", "/", "\udcff"]),
        st.lists(arg_text, max_size=3),
    ),
    st.builds(
        lambda code: ["-c", code],
        st.one_of(
            st.sampled_from(
                [
                    "def main():\n    return 1",
                    "raise SystemExit(4)",
                    "1/0",
                    "def main():\n    return '\\ud800'",
                    "def main():\n    return 10 ** 400",
                    "import mcpx\nmcpx.emit(10 ** 400)\nmcpx.emit('\\ud800')",
                    SLOW_PATH_EMIT,
                    "x = (",
                ]
            ),
            arg_text.map(as_comment),
        ),
    ),
    st.builds(
        lambda f: ["--python", f], st.sampled_from(["job.py", "no-such.py", ".", "\udcff.py"])
    ),
    st.builds(lambda args: [*args, "--", "true"], st.lists(arg_text, max_size=2)),
)
EXEC_FLAGS: dict[str, st.SearchStrategy[str]] = {
    "--hook": json_text,
    "--input": json_text,
    "--timeout": float_text,
    "--autonomy": st.one_of(effect_word.filter(lambda x: isinstance(x, str)), arg_text),
    "--before": arg_text,
    "--env": st.builds(lambda k, v: f"{k}={v}", arg_text, arg_text),
    "--sandbox": st.sampled_from(["strict", "none", "workspace", "x", ""]),
    "--config": st.sampled_from(["c.toml", "no-such.toml", ".", "\udcff.toml"]),
    "--remote": st.sampled_from(
        [
            "ws://127.0.0.1:1",
            "ws://127.0.0.1:99999",
            "ws://[::1",
            "http://127.0.0.1:1",
            "ws://localhost:0/x",
            "x",
        ]
    ),
    "--stdin": st.sampled_from(["no-such-file", ".", "c.toml"]),
}


@st.composite
def exec_argv(draw: st.DrawFn) -> list[str]:
    argv = ["exec"]
    for flag in draw(st.lists(st.sampled_from(sorted(EXEC_FLAGS)), max_size=3, unique=True)):
        value = draw(EXEC_FLAGS[flag])
        argv += [f"{flag}={value}"] if value.startswith("-") else [flag, value]
    if draw(st.booleans()):
        argv.append("--json")
    tail: list[str] = draw(exec_tail)
    return argv + tail


other_argv = st.one_of(
    st.builds(
        lambda f: ["validate", *f],
        st.lists(st.sampled_from(["c.toml", "no-such.toml", ".", "\udcff"]), max_size=2),
    ),
    st.builds(lambda n: ["schema", n], arg_text),
    st.builds(
        lambda f: ["hooks", "list", "--config", f],
        st.sampled_from(["c.toml", "no-such.toml", "\udcff"]),
    ),
    st.builds(
        lambda j, p: ["hook", "test", "--hook", j, "--phase", p],
        json_text,
        st.sampled_from(["before", "onSuccess", "observe", "x"]),
    ),
    st.builds(
        lambda k, s: ["events", "--remote", "ws://127.0.0.1:1", "--kinds", k, "--since", s],
        arg_text,
        int_text,
    ),
    # The console's address of a server nobody serves, or of a hostile --remote.
    st.builds(
        lambda r: ["console", "--remote", r],
        st.one_of(st.just("ws://127.0.0.1:1"), arg_text),
    ),
    # Free words, but not a command that would run what they say.
    st.lists(arg_text, max_size=3).filter(
        lambda a: not a or a[0] not in ("exec", "serve", "demo", "hook", "events", "console")
    ),
    st.sampled_from([["--version"], ["--help"], ["exec", "--help"], [], ["serve", "--port"]]),
)


def serve_case(*flags: str) -> tuple[str, Any]:
    """A `serve` case as `serve_argv` draws them: `--flag=value` pairs."""
    pairs = dict(f.split("=", 1) for f in flags)
    pairs.setdefault("--host", "127.0.0.1")
    pairs.setdefault("--port", "0")
    argv = ["serve", "--no-auth"]
    for flag, value in pairs.items():
        argv.append(f"{flag}={value}")
    return "serve", (argv, pairs)


CliCase = tuple[str, Any]
#: Issue 11, case 8, and what the property found.
CLI_CASES: list[CliCase] = [
    serve_case("--port=70000"),
    serve_case("--port=-1"),
    serve_case("--port=" + "9" * 30),
    serve_case("--max-runs=0"),
    serve_case("--max-connections=0"),
    serve_case("--grace=-1"),
    serve_case("--max-message-bytes=0"),
    serve_case("--host=" + "a" * 300),
    # Found by this property: argparse gives `--flag=--` as a list, not a string; text from
    # undecodable argument bytes (a lone surrogate) printed back to a UTF-8 stdout; a URL
    # `urlsplit` refuses; a timeout trio refuses or `round` cannot take; a frame whose
    # encoding took the slow path, read back by `exec`.
    serve_case("--allow-origin=--"),
    ("input", "--"),
    ("input", "9" * 5000),
    ("input", deep(100_000)),
    ("other", ["validate", "\udcff"]),
    ("other", ["events", "--remote", "ws://127.0.0.1:1", "--kinds", "x\udc80y"]),
    ("exec", ["exec", "--remote", "ws://[::1", "--", "true"]),
    ("exec", ["exec", "--timeout=-1", "--", "true"]),
    ("exec", ["exec", "--timeout", "nan", "--", "true"]),
    ("exec", ["exec", "--timeout", "1e308", "--", "true"]),
    ("exec", ["exec", "--json", "-c", SLOW_PATH_EMIT]),
]


# `person` and `monkeypatch` are shared by the examples: each rewrites its files and makes
# the same patch.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@examples("case", CLI_CASES)
@given(
    case=st.one_of(
        st.tuples(st.just("serve"), serve_argv()),
        st.tuples(st.just("exec"), exec_argv()),
        st.tuples(st.just("input"), json_text),
        st.tuples(st.just("other"), other_argv),
    )
)
def test_cli_arguments(person: Path, monkeypatch: pytest.MonkeyPatch, case: CliCase) -> None:
    (person / "c.toml").write_text('[defaults]\nsandbox = "strict"\n')
    (person / "job.py").write_text("def main():\n    return 'job'\n")
    served: list[Any] = []

    async def listen_only(config: Any, options: Any, ready: Callable[[Any], Any]) -> None:
        """`run_service` up to listening, then done: a `serve` that would serve has shown
        it can listen, and the test goes on."""
        served.append(options)
        listeners = await trio.open_tcp_listeners(options.port, host=options.host)
        for listener in listeners:
            await listener.aclose()

    monkeypatch.setattr(server_module, "run_service", listen_only)
    kind, payload = case
    if kind == "serve":
        argv, flags = payload
        code, out, err = run_cli(argv)
        verdicts = {flag: flag_valid(flag, value) for flag, value in flags.items()}
        refused = [flag for flag, ok in verdicts.items() if ok is False]
        if refused:
            assert code == 2, (code, err)
            assert served == [], "serve listened with a flag it must refuse"
            # It names a flag it must refuse, or one it may (it stops at the first it finds).
            may = [flag for flag, ok in verdicts.items() if ok is None]
            assert any(flag in err for flag in refused + may), err
        elif all(ok is True for ok in verdicts.values()) and int(flags["--port"]) == 0:
            assert code == 0 and served, (code, err)  # any port on loopback can be had
        else:
            assert code in (0, 1, 2), (code, err)
    elif kind == "input":
        text = payload
        code, out, err = run_cli(["exec", f"--input={text}", "--", "true"])
        verdict = json_verdict(text)
        if verdict is False:
            assert code == 2 and "--input" in err, (code, err)
        elif verdict is True:
            assert code == 0, (code, out, err)
        else:
            assert code in (0, 2), (code, out, err)
    else:
        code, out, err = run_cli(payload)
        assert 0 <= code <= 255, code
        if kind == "exec" and "--json" in payload and "--remote" not in payload:
            for line in out.splitlines():  # NDJSON: each line one JSON object, strictly
                frame = json.loads(line, parse_constant=_not_json)
                assert isinstance(frame, dict), line


def _not_json(name: str) -> Any:
    raise AssertionError(f"exec --json printed {name}, which is not JSON")


def _refused(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_verdict(text: str) -> bool | None:
    """Whether `--input` must take the text (True), must refuse it (False), or either
    (JSON nested deeper than the documented limit of 128). A leading byte order mark is
    taken, as by every input; `NaN` and the infinities, which Python's `json` takes, are not
    JSON."""
    try:
        value = json.loads(text.removeprefix("\ufeff"), parse_constant=_refused)
    except (ValueError, RecursionError):
        return False
    return True if _depth(value) <= 128 else None


def _depth(value: Any) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest
