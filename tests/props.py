"""Shared parts of the property suite (Hypothesis): hostile values, the parts of a request,
and a person's shell for the CLI. The properties themselves are in one file per room:

- `test_properties_service.py`: wire requests (`/v1/exec` messages and endpoint paths, over
  real sockets to a real service), per-call hooks (the `hooks` of an exec request, run by that
  service), and the console's pages;
- `test_properties_run.py`: frames-channel lines (a tiny script writing them on
  `MCPX_FRAMES_FD`, and a Python `main()` returning or emitting hostile values) and hook stdout
  (tiny hook processes printing it, under the `strict` sandbox), run by that service;
- `test_properties_config.py`: config files (`load_config`, `validate_files`, `mcpx-hooks
  validate` and `hooks list`) and the trust state file (`load_config`, `hooks list`, `trust`,
  `trust --list` and `untrust`);
- `test_properties_models.py`: the prompt cache (hostile entries and hostile files to promote
  into, through `prompts list|show|promote|clear`) and what a model server replies;
- `test_properties_cli.py`: CLI arguments (`cli.main([...])` with its stdout and stderr
  captured);
- `test_properties_tools.py`: a plugin hook's `args` with hostile placeholders
  (`core/placeholders.resolve`), and floods of hostile tool-call lines a script may write
  (`run/calls.ScriptCalls`, each answered once);
- `test_properties_cluster.py`: what comes off NATS, and what a gateway reads of the bucket;
- `test_properties_frontdoor.py`: the bytes any client on `serve`'s port may send (request
  heads, bodies, WebSocket frames), to the front door's protocol and to a live server;
- `test_properties_remote.py`: the CLI's remote commands against a hostile WebSocket and
  HTTP server (any messages, frames of any shape, any close, any refusal);
- `test_properties_mcp.py`: the MCP face (`mcpx-hooks mcp` and `/mcp`) under hostile clients,
  tool servers and plugin-hook answers.
- pure ones, no process: `test_properties_remotewords.py` (what the remote commands say of a
  refusal or a close), `test_properties_liveness.py` (the bound on silence, virtual time),
  `test_properties_effects.py` (the clamp), `test_properties_seccomp.py` (the filter, run by
  a cBPF interpreter), `test_properties_tool_answer.py` (a plugin hook's tool answer),
  `test_properties_remoteread.py` (how the remote client reads a server's messages),
  `test_properties_egress.py` (how the proxy names a host, and the items it suggests),
  `test_properties_execview.py` (a batch of output frames printed as one by one).

The service's properties share one live service per module and the invariants it must keep
after each example (`props_service.py`).

Every property first runs the cases of issue 11 for its way in, and the inputs it found
failing before they were fixed, as explicit examples (`*_CASES`, `examples`): the same in every
profile, before anything generated. Generated text may be any string literal of the code under
test (Hypothesis draws from them), so text that is executed (a program, Python source, a hook's
command) is never drawn freely: programs come from a list that cannot run long or print
without end, and hostile text reaches Python as a string literal or a comment.

Profiles (tests/conftest.py): the default one (`make test`) runs 40 examples per property,
derandomized, so CI and a developer see the same examples; `--hypothesis-profile=long` runs
hundreds, at random, and remembers failures.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example
from hypothesis import strategies as st
from live_service import tracebacks

from mcpx_hooks.supervisor.cli import main as cli

PY = sys.executable

# ---- hostile values ---------------------------------------------------------------------------


class Raw(str):
    """JSON text put into a document as it is (what `json.dumps` would refuse or change)."""


def render(value: Any) -> str:
    """A value as JSON text: `Raw` as is, lone surrogates as `\\ud800` escapes, NUL as
    `\\u0000`, NaN and infinities as Python writes them."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(render(v) for v in value) + "]"
    return json.dumps(value)


def deep(levels: int, kind: str = "[") -> str:
    if kind == "[":
        return "[" * levels + "]" * levels
    return '{"a":' * levels + "1" + "}" * levels


SURROGATES = st.sampled_from(["\ud800", "\udfff", "a\udc80b", "\ud83d", "x\udcff"])
WEIRD_TEXT = st.sampled_from(
    [
        "",
        "\x00",
        "a\x00b",
        "A=B",
        "=x",
        "\ufeff",
        "\u2028",
        "\n",
        "\r\n",
        "\\",
        '"',
        "ünï",
        "\U0001f600",
        "\x7f",
        "-",
        "--",
        "../..",
        "/",
        "$HOME",
        "${X}",
        " ",
        "\t",
    ]
)
ANY_CHAR = st.one_of(st.characters(), st.characters(categories=["Cs"]))
hostile_text = st.one_of(st.text(ANY_CHAR, max_size=24), SURROGATES, WEIRD_TEXT)
#: A 5,000-digit integer (or near): past what Python converts to or from text by default.
huge_int = st.builds(
    lambda n, sign: Raw(sign + "9" * n), st.integers(4290, 6000), st.sampled_from(["", "-"])
)
odd_number = st.sampled_from(
    [
        Raw("1e999"),
        Raw("-1e999"),
        Raw("NaN"),
        Raw("Infinity"),
        Raw("-0"),
        Raw("1E400"),
        Raw("0." + "0" * 400 + "1"),
        Raw("18446744073709551616"),
        Raw("-9223372036854775809"),
    ]
)
#: JSON nested 129 levels (just past the documented limit) up to 10,000 and more.
deep_json = st.builds(
    lambda n, kind: Raw(deep(n, kind)),
    st.one_of(st.just(129), st.just(10_000), st.integers(129, 12_000)),
    st.sampled_from(["[", "{"]),
)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**80), 2**80),
    st.floats(),
    hostile_text,
    huge_int,
    odd_number,
    deep_json,
)
hostile_json = st.recursive(
    json_leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(hostile_text, kids, max_size=4)
    ),
    max_leaves=10,
)
#: JSON values that survive every encoding unchanged (what a result must come back as).
plain_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
plain_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), plain_text),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(plain_text, kids, max_size=4)
    ),
    max_leaves=12,
)


def mutate(text: str, at: int, how: str, junk: str) -> str:
    """Near-JSON: valid JSON text, broken in one place."""
    at = at % (len(text) + 1)
    return {
        "cut": text[:at],
        "insert": text[:at] + junk + text[at:],
        "drop": text[:at] + text[at + 1 :],
        "quote": text.replace('"', "'"),
        "trail": text + junk,
        "comma": text[:-1] + ",}" if text.endswith("}") else text + ",",
        "bom": "\ufeff" + text,
        "comment": "// hi\n" + text,
    }[how]


def near_json(of: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        mutate,
        of,
        st.integers(0, 10_000),
        st.sampled_from(["cut", "insert", "drop", "quote", "trail", "comma", "bom", "comment"]),
        st.text(max_size=3),
    )


# ---- requests ---------------------------------------------------------------------------------

#: Programs a hostile argv may start with: none that runs long or writes without end.
SAFE_PROGRAMS = [
    "true",
    "false",
    "echo",
    "/bin/echo",
    "no-such-program",
    "",
    "./",
    "/",
    "A=B",
    "\x00",
    "\ud800",
    "true\x00x",
    "cat",
]


def _runnable(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(x, str) for x in value)


#: Generated text may be any string literal of the code under test (Hypothesis draws from
#: them), "yes" or a test's "time.sleep(60)" among them: text that is run (a program, Python
#: source) is therefore never drawn freely, only arguments, and Python as string literals or
#: comments.
hostile_argv = st.one_of(
    st.builds(
        lambda first, rest: [first, *rest],
        st.sampled_from(SAFE_PROGRAMS),
        st.lists(hostile_text, max_size=3),
    ),
    hostile_json.filter(lambda v: not _runnable(v)),
)


def as_comment(text: str) -> str:
    """Hostile text as Python that does nothing (a NUL in it still makes it unparsable)."""
    return "# " + text.replace("\r", "\\r").replace("\n", "\\n")


env_name = st.one_of(
    st.sampled_from(
        [
            "A=B",
            "=",
            "",
            "A\x00",
            "\x00",
            "\ud800",
            "PATH",
            "LD_PRELOAD",
            "HOME",
            "MCPX_FRAMES_FD",
            "MCPX_HOOK_NAME",
            "A" * 300,
        ]
    ),
    hostile_text,
)
hostile_env = st.one_of(st.dictionaries(env_name, hostile_text, max_size=3), hostile_json)
profile_word = st.one_of(
    st.sampled_from(["strict", "workspace", "net", "none", "", "STRICT", "bogus"]), hostile_json
)
effect_word = st.one_of(
    st.sampled_from(["off", "advise", "ask", "propose", "apply", "run", "", "max"]), hostile_json
)
python_code = st.one_of(
    st.sampled_from(
        [
            "print(1)",
            "def main():\n    return 1",
            "raise SystemExit(3)",
            "1/0",
            "x = (",
            "import sys; sys.stdout.write('\\x00\\xff')",
            "def main():\n    return '\\ud800'",
        ]
    ),
    st.builds(lambda t: f"print({t!r})", hostile_text),
    hostile_text.map(as_comment),
)
source_line = st.one_of(
    st.none(),
    st.sampled_from(
        ["import os", "print('x')", "raise SystemExit(3)", "1/0", "x = (", "\x00", "  x", "\ud800"]
    ),
    hostile_text.map(repr),
    hostile_text.map(as_comment),
)


@st.composite
def hook_object(draw: st.DrawFn, run: st.SearchStrategy[Any] | None = None) -> Any:
    """A per-call hook: mostly the keys a hook has, with hostile values; sometimes junk."""
    if draw(st.integers(0, 9)) == 0:
        return draw(hostile_json)
    hook: dict[str, Any] = {
        "on": draw(st.one_of(st.just("script"), st.just("script"), st.sampled_from(["call", "x"]))),
        "phase": draw(
            st.one_of(
                st.sampled_from(["before", "onSuccess", "onError", "suffix"]),
                st.sampled_from(["observe", "prefix", "Before"]),
                hostile_json,
            )
        ),
    }
    action = draw(st.sampled_from(["run", "run", "run", "module", "source", "prompt", "two"]))
    if action in ("run", "two"):
        hook["run"] = draw(run if run is not None else hook_argv)
    if action in ("module", "two"):
        hook["module"] = draw(
            st.one_of(
                st.sampled_from(["hook.py", "os:system", "../x.py", ":x", "x\x00.py"]), hostile_json
            )
        )
    if action == "source":
        hook["source"] = draw(st.lists(source_line, max_size=2))
    if action == "prompt":
        hook["prompt"] = draw(
            st.one_of(
                hostile_text,
                st.sampled_from(["@input", "@result", "@error.x.0", "@team @@ a@b.c", "@"]),
            )
        )
        if draw(st.booleans()):
            hook["vars"] = draw(
                st.one_of(st.dictionaries(hostile_text, hostile_json, max_size=2), hostile_json)
            )
        if draw(st.booleans()):
            hook["model"] = draw(st.one_of(st.sampled_from(["default", "a b", ""]), hostile_json))
    optional: dict[str, st.SearchStrategy[Any]] = {
        "name": hostile_text,
        "effect": effect_word,
        "failure": st.one_of(st.sampled_from(["open", "closed", "x"]), hostile_json),
        "timeoutMs": st.one_of(st.integers(-2, 3000), huge_int, hostile_json),
        "killGraceMs": st.one_of(st.integers(-2, 500), huge_int),
        "maxOutputBytes": st.one_of(st.integers(-1, 2048), huge_int),
        "env": hostile_env,
        "sandbox": profile_word,
        "when": st.one_of(
            st.fixed_dictionaries({"argv": st.lists(hostile_text, max_size=2)}), hostile_json
        ),
        "enabled": st.one_of(st.booleans(), hostile_json),
        "cwd": st.one_of(st.sampled_from(["/", "/no/such", "rel", "/etc/passwd"]), hostile_text),
        "passEnv": st.lists(hostile_text, max_size=2),
        "locked": st.booleans(),
    }
    for key in draw(st.sets(st.sampled_from(sorted(optional)), max_size=4)):
        hook[key] = draw(optional[key])
    hook.update(draw(st.dictionaries(hostile_text, hostile_json, max_size=1)))
    return hook


#: A hook that answers with `advise`, reading its input first.
ADVISE_HOOK = (
    'import sys; sys.stdin.buffer.read(); sys.stdout.write(\'{"advise": "hook says hi"}\')'
)
hook_argv = st.one_of(
    st.sampled_from(
        [
            ["true"],
            ["false"],
            ["cat"],
            [PY, "-c", ADVISE_HOOK],
            ["sh", "-c", "exit 3"],
            [PY, "-c", "import time; time.sleep(0.5)"],
            ["sh", "-c", "id -u"],
            "ls -l",
            [],
        ]
    ),
    st.builds(lambda rest: ["echo", *rest], st.lists(hostile_text, max_size=3)),
    hostile_argv,
)


#: Where a request names the service's own directory (known only once it runs): replaced in


# ---- cases first, and a person's shell -------------------------------------------------------


def examples(name: str, cases: Sequence[Any]) -> Callable[[Any], Any]:
    """`@example(name=case)` for each case: run first, in every profile, before any
    generated example."""

    def decorate(test: Any) -> Any:
        for case in reversed(cases):
            test = example(**{name: case})(test)
        return test

    return decorate


class Captured:
    """stdout and stderr as a person's terminal has them: stdout strict UTF-8 (so a lone
    surrogate printed is an error, as it is there), stderr with backslash escapes."""

    def __init__(self) -> None:
        self._bytes = (io.BytesIO(), io.BytesIO())
        self.out = io.TextIOWrapper(self._bytes[0], "utf-8", "strict", write_through=True)
        self.err = io.TextIOWrapper(self._bytes[1], "utf-8", "backslashreplace", write_through=True)

    def text(self) -> tuple[str, str]:
        out, err = (b.getvalue().decode("utf-8", "replace") for b in self._bytes)
        return out, err


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """`cli.main(argv)` as a person runs it: the exit code, stdout, stderr. Anything but a
    return or `SystemExit` would be a traceback on their terminal, and fails the test."""
    captured = Captured()
    with contextlib.redirect_stdout(captured.out), contextlib.redirect_stderr(captured.err):
        try:
            code: Any = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:
            out, err = captured.text()
            shown = f"stdout: {out[-1000:]}\nstderr: {err[-2000:]}"
            raise AssertionError(f"a traceback reaches a person: {exc!r}\n{shown}") from exc
    out, err = captured.text()
    code = 0 if code is None else code
    assert isinstance(code, int), code
    for where, text in (("stdout", out), ("stderr", err)):
        found = supervisor_tracebacks(text)
        assert not found, f"a traceback reaches a person on {where}: {found}\n{text[-3000:]}"
    return code, out, err


def supervisor_tracebacks(text: str) -> list[str]:
    """Lines of CLI output with a traceback, but for a child's own output, which the view
    shows as such (`| ` stdout, `! ` stderr, an indented `| ` stderr tail) and NDJSON frames
    hold under their own keys (`live_service.CHILD_TEXT_KEYS`)."""
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith(("| ", "! ")) or line.lstrip() in ("|", "!"):
            continue
        try:
            frame = json.loads(line)
        except ValueError:
            frame = None
        if isinstance(frame, dict):
            found += tracebacks(frame)
        elif "Traceback" in line or "Exceptions from Trio nursery" in line:
            found.append(line)
    return found


def person_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fixture (`person = pytest.fixture(person_shell)`): a person's shell for the CLI, a
    working directory of its own, no discovery, user config and state directories that are
    empty."""
    home = tmp_path / "person"
    home.mkdir()
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    monkeypatch.delenv("MCPX_HOOKS_TOKEN", raising=False)
    monkeypatch.delenv("MCPX_HOOKS_TRUST", raising=False)
    monkeypatch.chdir(home)
    return home
