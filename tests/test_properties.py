"""Properties (Hypothesis): hostile inputs through every way in, and what must always hold.

Each way in has one property, driving the real thing:

- wire requests: `/v1/exec` messages and endpoint paths, over real sockets to a real service;
- per-call hooks: the `hooks` of an exec request, run by that service;
- frames-channel lines: a tiny script writing them on `MCPX_FRAMES_FD` (and a Python
  `main()` returning or emitting hostile values), run by that service;
- hook stdout: tiny hook processes printing it, under the `strict` sandbox;
- config files: `load_config`, `validate_files`, `mcpx-hooks validate` and `hooks list`;
- the trust state file: `load_config`, `hooks list`, `trust`, `trust --list` and `untrust`;
- the prompt cache: hostile entries and hostile files to promote into, through `prompts
  list|show|promote|clear`;
- CLI arguments: `cli.main([...])` with its stdout and stderr captured;
- a plugin hook's `args` with hostile placeholders (`core/placeholders.resolve`), and floods of
  hostile tool-call lines a script may write (`run/calls.ScriptCalls`, each answered once).

What must hold after each example (a batch of inputs, for the service's ways in):
(a) the service still serves: `{"argv": ["true"]}` completes with `result` and `end`;
(b) a run started before the hostile inputs (a script printing a line every few ms) finishes
    with every line, its frames in order (`check_order`);
(c) every stream that got a `start` ends with exactly one `result`/`error`, then `end`, and a
    replay of the run gives the same frames; a refused request gets an error message
    (`{"type": "error", "code": …}`) and a close code 4400-4499, 1003 or 1009, never an
    abrupt close (1006);
(d) memory: what each retained run's output frames cost in its journal (counted as they
    really cost, `live_service.output_cost`) stays within the run's budget, and the
    process's RSS stays within `RSS_GROWTH` of where the service started;
(e) no traceback reaches a person: none in an error message, a close reason, a frame, or the
    CLI's stdout/stderr, and no ERROR record from the `mcpx_hooks` loggers (the service logs
    one when a connection handler or a run crashes: exactly what must never happen);
(f) the service's default sandbox is `strict`: no run and no hook of any request runs
    under `none`.

How: one service per module, in a thread with its own `trio.run` (`live_service.py`). That
is the simplest robust way to keep a service across examples: pytest-trio runs each example
of an async test in a fresh `trio.run`, which would start the service (and its spawner)
again for every example, and a module-scoped Trio fixture is not something it offers. Each
property is a synchronous `@given` test whose example is a batch of inputs, sent from this
thread with a synchronous client; before each example the service is checked and, if the
last one left it not serving, started again, so that each example (and each shrinking step)
starts from a service that serves, and a failure shrinks to the input that broke it.

Every property first runs the cases of issue 11 for its way in, and the inputs it found
failing before they were fixed, as explicit examples (`*_CASES`): the same in every profile,
before anything generated. Generated text may be any string literal of the code under test
(Hypothesis draws from them), so text that is executed (a program, Python source, a hook's
command) is never drawn freely: programs come from a list that cannot run long or print
without end, and hostile text reaches Python as a string literal or a comment.

Profiles (tests/conftest.py): the default one (`make test`) runs 40 examples per property,
derandomized, so CI and a developer see the same examples; `--hypothesis-profile=long` runs
hundreds, at random, and remembers failures.
"""

from __future__ import annotations

import binascii
import contextlib
import io
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import pytest
import trio
from hypothesis import HealthCheck, assume, example, given, note, settings
from hypothesis import strategies as st
from live_service import (
    Follower,
    LiveService,
    Seen,
    StrictUnavailable,
    exchange,
    output_cost,
    retained_journals,
    run,
    run_budget,
    tracebacks,
)

from mcpx_hooks.supervisor.cli import main as cli
from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.core.errors import ConfigError, Problem
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.service import server as server_module

PY = sys.executable
#: The per-run budget of what the journal holds (`[runs] runBytes`), lowered from its default
#: so that outputs of a few MB reach it.
RUN_BYTES = 1024 * 1024
#: How much the test process may grow past where the service started.
RSS_GROWTH = 400 * 1024 * 1024
#: The service's config: hooks and runs default to `strict`; few runs retained.
SERVE_TOML = f"""
[defaults]
sandbox = "strict"
timeoutMs = 5000

[runs]
retain = 32
runBytes = {RUN_BYTES}
"""
#: Close codes a refused request may get (besides 1000 for a complete stream).
REFUSED = frozenset(range(4400, 4500)) | {1003, 1009}
#: The service's properties share function-scoped fixtures across examples on purpose
#: (`caplog`, cleared at each example's start; `live` is module-scoped) and their examples
#: are processes and sockets (slow) with inputs up to a few MB (large): no health check for
#: either.
SERVER_SETTINGS = settings(
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


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
#: the text of each message as it is sent.
CWD = "/@service-cwd@"


def at_cwd(live: LiveService, message: str | bytes) -> str | bytes:
    return message.replace(CWD, str(live.cwd)) if isinstance(message, str) else message


def text_at_cwd(live: LiveService, text: str) -> str:
    return text.replace(CWD, str(live.cwd))


@st.composite
def exec_request(draw: st.DrawFn) -> Any:
    """An `/v1/exec` request object: the fields a request has, hostile values, unknown ones."""
    obj: dict[str, Any] = {}
    what = draw(st.sampled_from(["argv", "argv", "python", "file", "none", "two"]))
    if what in ("argv", "two"):
        obj["argv"] = draw(hostile_argv)
    if what in ("python", "two"):
        obj["python"] = draw(python_code)
    if what == "file":
        obj["file"] = draw(
            st.one_of(
                st.sampled_from(["job.py", "../../../etc/passwd", "/etc/passwd", "."]),
                hostile_text,
                hostile_json,
            )
        )
    optional: dict[str, st.SearchStrategy[Any]] = {
        "stdin": st.one_of(hostile_text, hostile_json),
        "input": hostile_json,
        "env": hostile_env,
        "cwd": st.one_of(
            st.sampled_from([CWD, "/", "rel", "/no/such", "/etc/passwd", "/proc/self"]),
            hostile_text,
        ),
        "timeoutMs": st.one_of(st.integers(-2, 5000), huge_int, st.floats(), hostile_json),
        "sandbox": profile_word,
        "hooks": st.one_of(st.lists(hook_object(), max_size=2), hostile_json),
        "script": st.one_of(
            st.dictionaries(
                st.sampled_from(["before", "prefix", "onSuccess", "onError", "suffix", "x"]),
                st.lists(source_line, max_size=2),
                max_size=2,
            ),
            hostile_json,
        ),
        "autonomy": effect_word,
        "cancelOnDisconnect": st.one_of(st.booleans(), hostile_json),
        "passEnv": st.lists(hostile_text, max_size=2),
        "secrets": st.lists(hostile_text, max_size=2),
        "placeholders": hostile_json,
    }
    for key in draw(st.sets(st.sampled_from(sorted(optional)), max_size=4)):
        obj[key] = draw(optional[key])
    obj.update(draw(st.dictionaries(hostile_text, hostile_json, max_size=1)))
    return obj


@st.composite
def wire_input(draw: st.DrawFn) -> tuple[str, list[str | bytes], list[str | bytes]]:
    """One socket's worth: a path, the messages sent at once, and those sent after `start`."""
    kind = draw(st.sampled_from(["exec", "exec", "exec", "near", "raw", "path"]))
    path = "/v1/exec"
    if kind == "path":  # one message: an exec socket waits for its request
        return draw(hostile_path), [draw(st.one_of(hostile_text, st.binary()))], []
    if kind == "raw":
        message: str | bytes = draw(
            st.one_of(
                deep_json.map(str),
                st.binary(max_size=64),
                st.sampled_from(["", "null", "[]", "{}", "1", '"x"', "\ufeff{}", "{}{}", "\x00"]),
                st.integers(1024 * 1024 - 64, 1024 * 1024 + 64).map(lambda n: "x" * n),
                st.builds(
                    lambda n: '{"argv": ["true"], "stdin": "' + "y" * n + '"}',
                    st.integers(1024 * 1024 - 64, 1024 * 1024 + 64),
                ),
                st.builds(lambda x: '{"argv":["true"],"argv":' + render(x) + "}", hostile_json),
            )
        )
    else:
        text = render(draw(exec_request()))
        message = draw(near_json(st.just(text))) if kind == "near" else text
    later = draw(
        st.lists(
            st.one_of(
                st.just('{"type": "cancel"}'),
                st.builds(
                    lambda x: render({"type": "answer", "askId": x, "answer": x}), hostile_json
                ),
                # Well formed, or nearly: an ask that may not exist, a word that may not be one.
                st.builds(
                    lambda i, a: render({"type": "answer", "askId": i, "answer": a}),
                    st.one_of(st.sampled_from(["ask-1", "ask-2", ""]), hostile_text),
                    st.one_of(st.sampled_from(["yes", "no", "YES"]), hostile_text),
                ),
                st.builds(lambda x: render({"type": "cancel", "x": x}), hostile_json),
                hostile_text,
                st.binary(max_size=16),
                deep_json.map(str),
            ),
            max_size=2,
        )
    )
    return path, [message], later


def _quoted(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


hostile_path = st.one_of(
    st.builds(lambda q: "/v1/exec?" + q, st.text(max_size=8).map(_quoted)),
    st.builds(
        lambda run_id, start: f"/v1/runs/{_quoted(run_id)}?from={_quoted(start)}",
        hostile_text,
        st.one_of(hostile_text, huge_int.map(str), st.sampled_from(["-1", "0", "1e3", ""])),
    ),
    st.builds(
        lambda kinds, since: f"/v1/events?kinds={_quoted(kinds)}&since={_quoted(since)}",
        st.one_of(st.sampled_from(["hooks", "", ",", "x"]), hostile_text),
        st.one_of(huge_int.map(str), st.sampled_from(["-1", "99999999", "x", ""])),
    ),
    st.sampled_from(["/v1/hooks?x=1", "/v1/nope", "/", "/v1/", "/v1/exec/x", "/%00", "/%ff"]),
    st.builds(lambda t: "/" + _quoted(t), hostile_text),
)


# ---- the service and the invariants ---------------------------------------------------------

#: The run in flight during each example: "ready", then 40 numbered lines, 3 ms apart.
LONG_LINES = 40
LONG_RUN = {
    "argv": [
        PY,
        "-c",
        "import time\nprint('ready', flush=True)\n"
        f"for i in range({LONG_LINES}):\n    time.sleep(0.003)\n    print(i, flush=True)\n",
    ],
    "timeoutMs": 60_000,
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    """One service for the module's properties, `strict` by default (which needs every
    isolation mechanism; the properties are skipped where the spawner lacks one)."""
    cwd = tmp_path_factory.mktemp("live")
    cwd.chmod(0o755)  # a declaring directory: readable by a sandboxed hook's own user
    (cwd / "hook.py").write_text("def hook(payload):\n    return {'advise': 'module hook'}\n")
    (cwd / "job.py").write_text("def main():\n    return 'job'\n")
    service = LiveService(cwd, SERVE_TOML)
    try:
        service.start()
    except StrictUnavailable as exc:
        pytest.skip(f"the strict sandbox cannot be enforced here: {exc}")
    service.rss_start = psutil.Process().memory_info().rss
    yield service
    service.stop()
    _, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=10)
    assert alive == [], alive


def serves(live: LiveService) -> Seen:
    """(a) A plain run completes."""
    seen = run(live.url, {"argv": ["true"]})
    assert seen.code == 1000, str(seen)
    check_order(seen.frames)
    assert [f["type"] for f in seen.frames] == ["start", "result", "end"], seen.frames
    return seen


def ensure_serving(live: LiveService) -> None:
    """Starts a fresh service if the last example left this one not serving."""
    try:
        serves(live)
    except Exception as exc:  # whatever it was, the last example has failed on it already
        note(f"the service had stopped serving ({exc!r}); started again")
        live.restart()
        serves(live)


def check_seen(live: LiveService, seen: Seen) -> None:
    """(c), (e), (f) for one socket; a stream that started is replayed and compared."""
    found = tracebacks(seen.objects, seen.reason, seen.body.decode("utf-8", "replace"))
    assert not found, f"{seen}: a traceback reaches the client: {found}"
    if seen.status is not None:  # refused at the upgrade, with an HTTP status
        assert 400 <= seen.status < 600, str(seen)
        if seen.body:
            try:
                error = json.loads(seen.body)
            except ValueError:
                raise AssertionError(f"a refusal that is no error message: {seen}") from None
            assert error.get("type") == "error" and error.get("code") == seen.status, error
        return
    assert seen.code not in (None, 1006), f"closed without a close frame: {seen}"
    for frame in seen.frames:
        if frame.get("type") in ("start", "hook"):
            assert frame.get("sandbox") != "none", f"a request lowered the sandbox: {frame}"
    # An answer refused (its ask unknown, settled, or past) is told with its `askId`, and
    # the socket stays open; every other error message ends its socket.
    refused_answers = [e for e in seen.errors if "askId" in e]
    closing = [e for e in seen.errors if "askId" not in e]
    for error in refused_answers:
        assert error.get("code") == 4400 and error["message"].startswith("answer refused: "), error
    if seen.code == 1000:
        assert closing == [], seen.errors
        if seen.path.startswith("/v1/exec") or seen.path.startswith("/v1/runs/"):
            check_order(seen.frames)
    else:
        assert seen.code in REFUSED, f"not a close code for a refusal: {seen}"
        assert len(closing) == 1, f"expected one error message: {seen}"
        (error,) = closing
        assert error.get("code") == seen.code, error
        assert isinstance(error.get("message"), str) and error["message"], error
    if seen.run_id is not None and seen.path.startswith("/v1/exec"):
        replay = exchange(live.url, f"/v1/runs/{seen.run_id}")
        assert replay.code == 1000, f"the replay of run {seen.run_id}: {replay}"
        check_order(replay.frames)
        assert replay.frames[: len(seen.frames)] == seen.frames, "the replay differs"


def check_memory(live: LiveService) -> None:
    """(d) Every retained run's output is within its budget; the process within bounds."""

    def measure() -> list[tuple[str, int, int]]:
        assert live.runtime is not None
        return [
            (j.run_id, output_cost(j), run_budget(j, RUN_BYTES))
            for j in retained_journals(live.runtime)
        ]

    over = [(run_id, cost, budget) for run_id, cost, budget in live.call(measure) if cost > budget]
    assert not over, f"runs whose output frames cost more than their budget: {over}"
    grown = psutil.Process().memory_info().rss - live.rss_start
    assert grown < RSS_GROWTH, f"the process grew by {grown / 2**20:.0f} MiB"


def _examples(name: str, cases: Sequence[Any]) -> Callable[[Any], Any]:
    """`@example(name=case)` for each case: run first, in every profile, before any
    generated example."""

    def decorate(test: Any) -> Any:
        for case in reversed(cases):
            test = example(**{name: case})(test)
        return test

    return decorate


#: Issue 11, case 1: a per-call hook that asks for no sandbox on a server whose default is
#: strict, and would read what only root may.
SANDBOX_ESCAPE = {
    "on": "script",
    "phase": "before",
    "sandbox": "none",
    "run": ["sh", "-c", "id -u"],
}


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}\n{r.exc_text or ''}"[:3000]
        for r in caplog.records
        if r.name.startswith("mcpx_hooks") and r.levelno >= logging.ERROR
    ]


@contextlib.contextmanager
def serving(live: LiveService, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """One example's frame: a serving service, a long run in flight; after the body, every
    invariant."""
    ensure_serving(live)
    caplog.clear()
    long_run = Follower(live.url, LONG_RUN)
    try:
        long_run.read_until(lambda o: o.get("text") == "ready")
        yield
        seen = long_run.finish()
    finally:
        long_run.close()
    assert seen.code == 1000, f"the run in flight: {seen}"
    check_order(seen.frames)
    lines = [f["text"] for f in seen.frames if f["type"] == "stdout"]
    assert lines == ["ready", *map(str, range(LONG_LINES))], lines
    assert seen.frames[-2]["type"] == "result", seen.frames[-2:]
    serves(live)
    check_memory(live)
    logged = server_errors(caplog)
    assert not logged, "the service logged errors:\n" + "\n".join(logged)


# ---- 1. wire requests -------------------------------------------------------------------------


WireBatch = list[tuple[str, list[str | bytes], list[str | bytes]]]
#: The cases of issue 11 that come in on the wire, and what the properties found (each one
#: example, run first in every profile).
WIRE_CASES: list[WireBatch] = [
    # A message that is only a lone surrogate: found by this property (it goes as bytes).
    [("/v1/exec?", ["\ud800"], [])],
    [("/v1/exec", [json.dumps({"argv": ["true"], "cwd": CWD, "hooks": [SANDBOX_ESCAPE]})], [])],
    [
        ("/v1/exec", [render({"argv": ["true", "a\x00b"]})], []),
        ("/v1/exec", [render({"argv": ["true"], "env": {"A=B": "x", "C\x00": "y"}})], []),
    ],
    [
        ("/v1/exec", [render({"argv": ["echo", "\ud800"]})], []),
        ("/v1/exec", ['{"argv": ["true"], "timeoutMs": ' + "9" * 5000 + "}"], []),
    ],
    [
        ("/v1/exec", [deep(10_000)], []),
        ("/v1/exec", ['{"argv": ["true"], "input": ' + deep(10_000, "{") + "}"], []),
    ],
    # Found by this property: a `from` or `since` of 5,000 digits ends the socket with 1006
    # (the handler's `int()` raises past the digit limit, and the service logs the crash).
    [("/v1/runs/x?from=" + "9" * 5000, [""], [])],
    [("/v1/events?since=" + "9" * 5000, [""], [])],
]


@SERVER_SETTINGS
@_examples("batch", WIRE_CASES)
@given(batch=st.lists(wire_input(), min_size=1, max_size=3))
def test_wire_requests(
    live: LiveService, caplog: pytest.LogCaptureFixture, batch: WireBatch
) -> None:
    with serving(live, caplog):
        for path, messages, later in batch:
            sent = [at_cwd(live, m) for m in messages]
            seen = exchange(live.url, path, sent, after_start=later, recv_s=20)
            note(f"{path}: {seen.code} {seen.errors or seen.status}")
            check_seen(live, seen)


# ---- 2. per-call hooks ------------------------------------------------------------------------


def per_call(**hook: Any) -> list[dict[str, Any]]:
    """One request with one `before` hook (`run = ["true"]` unless given)."""
    return [{"argv": ["true"], "cwd": CWD, "hooks": [{"on": "script", "phase": "before",
                                                      "run": ["true"], **hook}]}]  # fmt: skip


#: Issue 11, cases 1 and 2, as per-call hooks.
HOOK_CASES: list[list[dict[str, Any]]] = [
    [{"argv": ["true"], "cwd": CWD, "hooks": [SANDBOX_ESCAPE]}],
    per_call(sandbox="net"),
    per_call(run=["true", "a\x00b"]),
    per_call(run=["true\ud800"]),
    per_call(env={"A=B": "x"}),
    per_call(env={"A\x00": "x", "B": "\x00"}),
    per_call(env={"\ud800": "x"}),
    per_call(timeoutMs=Raw("9" * 5000)),
]


@SERVER_SETTINGS
@_examples("requests", HOOK_CASES)
@given(
    requests=st.lists(
        st.fixed_dictionaries(
            {
                "argv": st.sampled_from([["true"], ["false"], ["echo", "x"]]),
                "cwd": st.just(CWD),
                "hooks": st.lists(hook_object(), min_size=1, max_size=3),
            },
            optional={"sandbox": profile_word, "input": hostile_json},
        ),
        min_size=1,
        max_size=2,
    )
)
def test_per_call_hooks(
    live: LiveService, caplog: pytest.LogCaptureFixture, requests: list[dict[str, Any]]
) -> None:
    with serving(live, caplog):
        for request in requests:
            seen = run(live.url, text_at_cwd(live, render(request)), recv_s=30)
            note(f"{seen.code} {seen.errors}")
            check_seen(live, seen)


# ---- 3. frames-channel lines ------------------------------------------------------------------

#: A script that writes what its stdin says to the frames channel and to stdout, then exits.
FRAMES_WRITER = """
import binascii, json, os, sys
plan = json.load(sys.stdin)
def out(fd, pieces):
    for hx, n in pieces:
        view = memoryview(binascii.unhexlify(hx) * n)
        while view:
            view = view[os.write(fd, view):]
out(int(os.environ["MCPX_FRAMES_FD"]), plan["frames"])
out(1, plan["stdout"])
sys.exit(plan["exit"])
"""

Pieces = list[tuple[bytes, int]]


def line(text: str) -> Pieces:
    return [(text.encode("utf-8", "surrogatepass") + b"\n", 1)]


def frame_line(kind: str, **fields: Any) -> str:
    return render({"type": kind, **fields})


#: Pieces of the frames channel: (bytes, times). Long ones repeat a short piece.
frames_piece: st.SearchStrategy[Pieces] = st.one_of(
    st.builds(lambda v: line(frame_line("emit", value=v)), hostile_json),
    st.builds(
        lambda lvl, msg, a: line(frame_line("log", level=lvl, message=msg, attrs=a)),
        st.one_of(st.sampled_from(["info", "warning", "error"]), hostile_json),
        st.one_of(hostile_text, hostile_json),
        hostile_json,
    ),
    st.builds(lambda v: line(frame_line("result", value=v)), hostile_json),
    st.builds(lambda t, x: line(render({"type": t, "value": x})), hostile_text, hostile_json),
    st.builds(line, near_json(st.builds(lambda v: frame_line("emit", value=v), plain_json))),
    st.binary(max_size=64).map(lambda b: [(b + b"\n", 1)]),
    st.just([(b'{"type":"emit","value":"\xff\xfe\x00\xed\xa0\x80"}\n', 1)]),
    st.integers(1, 60_000).map(lambda n: [(b"\n", n)]),
    st.integers(1, 20_000).map(lambda n: [(b'{"type":"emit","value":1}\n', n)]),
    st.integers(1, 20_000).map(lambda n: [(b'{"type":"log","message":"m"}\n', n)]),
    st.builds(
        lambda kind, n: [(f'{{"type":"{kind}","value":"'.encode(), 1), (b"q", n), (b'"}\n', 1)],
        st.sampled_from(["emit", "result"]),
        st.integers(60_000, 300_000),
    ),
    st.integers(60_000, 300_000).map(lambda n: [(b"z", n), (b"\n", 1)]),
    st.builds(
        lambda n, kind: [
            (b'{"type":"' + kind + b'","value":', 1),
            (b"[", n),
            (b"]", n),
            (b"}\n", 1),
        ],
        st.sampled_from([129, 1000, 10_000, 100_000]),
        st.sampled_from([b"emit", b"result"]),
    ),
    st.builds(
        lambda n, kind: [(b'{"type":"' + kind + b'","value":', 1), (b"9", n), (b"}\n", 1)],
        st.integers(4290, 6000),
        st.sampled_from([b"emit", b"result"]),
    ),
    st.just(line('{"type":"emit","value":"\\ud800"}')),
    st.just(line('{"type":"result","value":{"\\udfff":"\\ud83d"}}')),
    st.just([(b'{"type":"emit","value":"no newline at the end"}', 1)]),
)


def hexed(pieces: Pieces) -> list[tuple[str, int]]:
    return [(binascii.hexlify(b).decode(), n) for b, n in pieces]


#: What a Python script's `main()` may return or emit, as code, and what the result must
#: then be (`...`: no exact expectation, only the invariants).
PY_VALUES: list[tuple[str, Any]] = [
    ("'q' * 70_000", "q" * 70_000),
    ("[1] * 200_000", [1] * 200_000),
    ("'\\ud800'", ...),
    ("{'k\\ud800': ['\\udfff']}", ...),
    ("10 ** 5000", ...),
    ("-(10 ** 5000)", ...),
    ("functools.reduce(lambda a, _: [a], range(10_000), 0)", ...),
    ("functools.reduce(lambda a, _: [a], range(100_000), 0)", ...),
    ("functools.reduce(lambda a, _: {'a': a}, range(129), 0)", ...),
    ("float('nan')", ...),
    ("b'\\xff'", ...),
    ("object()", ...),
    ("{1: 2, None: 3}", ...),
    ("'\\x00' * 10", "\x00" * 10),
]
py_value = st.one_of(
    st.sampled_from(PY_VALUES),
    plain_json.map(lambda v: (repr(v), v)),
    hostile_text.map(lambda t: (repr(t), ...)),
)


@st.composite
def frames_script(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    """A run whose frames channel carries hostile lines, and the result it must end with
    (`...`: none in particular)."""
    expected: Any
    if draw(st.booleans()):
        emitted = draw(st.lists(py_value, max_size=2))
        value, expected = draw(py_value)
        code = "import functools, mcpx\ndef main():\n"
        for expr, _ in emitted:
            code += f"    mcpx.emit({expr})\n    mcpx.log('x', v={expr})\n"
        code += f"    return {value}\n"
        return {"python": code, "timeoutMs": 60_000}, expected
    pieces = [p for piece in draw(st.lists(frames_piece, min_size=1, max_size=4)) for p in piece]
    assume(sum(len(b) * n for b, n in pieces) < 4 * 1024 * 1024)
    expected = ...
    if draw(st.booleans()):  # a last `result` line that must come back intact
        expected = draw(st.one_of(plain_json, st.integers(0, 300_000).map(lambda n: "r" * n)))
        # On a line of its own, whatever the pieces before it ended with.
        pieces += [(b"\n", 1), *line(frame_line("result", value=expected))]
    stdout = draw(st.one_of(st.just([]), frames_piece))
    exit_code = draw(st.sampled_from([0, 0, 1]))
    if exit_code != 0:
        expected = ...
    return writer(pieces, stdout, exit_code), expected


def writer(frames: Pieces, stdout: Pieces | None = None, exit_code: int = 0) -> dict[str, Any]:
    """The request that runs `FRAMES_WRITER` on these pieces."""
    plan = {"frames": hexed(frames), "stdout": hexed(stdout or []), "exit": exit_code}
    return {"argv": [PY, "-c", FRAMES_WRITER], "stdin": json.dumps(plan), "timeoutMs": 60_000}


def main_returning(expr: str) -> dict[str, Any]:
    return {"python": f"import functools\ndef main():\n    return {expr}\n", "timeoutMs": 60_000}


ScriptCase = list[tuple[dict[str, Any], Any]]
#: Issue 11, cases 3, 4, 5 and 7, as frames-channel lines and `main()` return values.
FRAMES_CASES: list[ScriptCase] = [
    [(main_returning("'q' * 70_000"), "q" * 70_000)],
    [(writer([(b'{"type":"result","value":"', 1), (b"q", 70_000), (b'"}\n', 1)]), "q" * 70_000)],
    [
        (writer(line(frame_line("emit", value="\ud800"))), ...),
        (writer(line(frame_line("result", value={"\udfff": "\ud800"}))), ...),
        (main_returning("'\\ud800'"), ...),
    ],
    [
        (
            writer(
                [(b'{"type":"emit","value":', 1), (b"[", 100_000), (b"]", 100_000), (b"}\n", 1)]
            ),
            ...,
        )
    ],
    [(writer([(b'{"type":"emit","value":', 1), (b"9", 5000), (b"}\n", 1)]), ...)],
    [(writer([(b"\n", 300_000), *line(frame_line("result", value="whole"))]), "whole")],
    # Found: a value that takes the encoder's slow path (a lone surrogate, an integer past
    # 64 bits) with an infinity in it went out as `-Infinity`, which is not JSON.
    [(writer(line('{"type":"emit","value":[-1e999,"\\ud800",18446744073709551616]}')), ...)],
]


@SERVER_SETTINGS
@_examples("scripts", FRAMES_CASES)
@given(scripts=st.lists(frames_script(), min_size=1, max_size=2))
def test_frames_channel_lines(
    live: LiveService, caplog: pytest.LogCaptureFixture, scripts: ScriptCase
) -> None:
    with serving(live, caplog):
        for request, expected in scripts:
            seen = run(live.url, {**request, "cwd": str(live.cwd)}, recv_s=60)
            check_seen(live, seen)
            outcome = seen.frames[-2]
            note(f"outcome: {json.dumps(outcome)[:300]}")
            if expected is not ...:
                assert outcome["type"] == "result", outcome
                assert outcome.get("value") == expected, "the result did not come back intact"


# ---- 4. hook stdout (strict) ------------------------------------------------------------------

#: A hook that reads its input (or not), writes what its argv says to stdout and stderr,
#: and exits with the status it says.
HOOK_WRITER = """
import binascii, json, os, sys
plan = json.loads(sys.argv[1])
if plan["read"]:
    sys.stdin.buffer.read()
for fd, pieces in ((1, plan["out"]), (2, plan["err"])):
    for hx, n in pieces:
        view = memoryview(binascii.unhexlify(hx) * n)
        while view:
            view = view[os.write(fd, view):]
sys.exit(plan["exit"])
"""

answer_value = st.one_of(
    st.fixed_dictionaries(
        {"advise": st.one_of(hostile_text, st.lists(hostile_text, max_size=3), hostile_json)}
    ),
    st.fixed_dictionaries(
        {"refuse": st.one_of(hostile_text, st.fixed_dictionaries({"reason": hostile_json}))}
    ),
    st.fixed_dictionaries(
        {
            "ask": st.fixed_dictionaries(
                {"question": hostile_text},
                optional={
                    "default": st.one_of(st.sampled_from(["yes", "no"]), hostile_json),
                    "deadlineMs": st.one_of(st.integers(-1, 300), huge_int, hostile_json),
                },
            )
        }
    ),
    st.fixed_dictionaries(
        {"propose": st.fixed_dictionaries({"value": hostile_json}, optional={"note": hostile_text})}
    ),
    st.fixed_dictionaries({"apply": st.fixed_dictionaries({"value": hostile_json})}),
    st.fixed_dictionaries({"run": st.fixed_dictionaries({"argv": hostile_argv})}),
    st.dictionaries(hostile_text, hostile_json, max_size=3),
)


def text_pieces(text: str) -> Pieces:
    return [(text.encode("utf-8", "surrogatepass"), 1)]


hook_stdout: st.SearchStrategy[Pieces] = st.one_of(
    answer_value.map(lambda a: text_pieces(render(a))),
    answer_value.map(lambda a: text_pieces("\ufeff \n" + render(a) + "\n\n")),
    near_json(answer_value.map(render)).map(text_pieces),
    hostile_text.map(text_pieces),
    st.binary(max_size=64).map(lambda b: [(b, 1)]),
    hostile_json.map(lambda v: text_pieces(render(v))),
    st.integers(1024 * 1024 - 16, 1024 * 1024 + 16).map(lambda n: [(b"x", n)]),
    st.integers(1, 900_000).map(lambda n: [(b'{"advise": "', 1), (b"a", n), (b'"}', 1)]),
    st.sampled_from([10_000, 100_000]).map(
        lambda n: [(b'{"apply": {"value": ', 1), (b"[", n), (b"]", n), (b"}}", 1)]
    ),
    st.integers(4290, 6000).map(lambda n: [(b'{"apply": {"value": ', 1), (b"9", n), (b"}}", 1)]),
    st.just(text_pieces('{"advise": "\\ud800", "apply": {"value": "\\udfff"}}')),
    st.just([(b"[1, 2]", 1)]),
    st.just([(b"", 1)]),
)


@st.composite
def stdout_hook(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """A hook printing hostile stdout; the advice it must give when its answer is clean."""
    advice = None
    if draw(st.integers(0, 4)) == 0:  # a clean answer, which must come through
        advice = draw(plain_text.filter(lambda t: t.strip() != ""))
        out = text_pieces(json.dumps({"advise": advice}))
        exit_code = 0
    else:
        out = draw(hook_stdout)
        exit_code = draw(st.sampled_from([0, 0, 0, 1, 2]))
    plan = {
        "read": draw(st.booleans()),
        "out": hexed(out),
        "err": hexed(draw(st.one_of(st.just([]), hook_stdout))),
        "exit": exit_code,
    }
    hook = {
        "on": "script",
        "phase": draw(st.sampled_from(["before", "onSuccess", "onError", "suffix"])),
        "run": [PY, "-c", HOOK_WRITER, json.dumps(plan)],
        "effect": draw(st.sampled_from(["advise", "ask", "propose", "apply", "run"])),
        "timeoutMs": 10_000,
    }
    if draw(st.booleans()):
        hook["failure"] = "closed"
    return hook, advice


def printing(out: Pieces, *, phase: str = "before", effect: str = "apply") -> dict[str, Any]:
    """A hook (as `stdout_hook` makes them) that reads its input and prints `out`."""
    plan = {"read": True, "out": hexed(out), "err": [], "exit": 0}
    run_ = [PY, "-c", HOOK_WRITER, json.dumps(plan)]
    return {"on": "script", "phase": phase, "run": run_, "effect": effect, "timeoutMs": 10_000}


HookCase = list[tuple[dict[str, Any], str | None]]
#: Issue 11, case 3 (a lone surrogate in a hook's JSON output) and the JSON limits.
STDOUT_CASES: list[HookCase] = [
    [(printing(text_pieces('{"advise": "\\ud800", "apply": {"value": "\\udfff"}}')), None)],
    [(printing(text_pieces('{"apply": {"value": ' + deep(100_000) + "}}")), None)],
    [(printing(text_pieces('{"apply": {"value": ' + "9" * 5000 + "}}")), None)],
    [(printing(text_pieces('{"advise": "fine"}'), effect="advise"), "fine")],
]


@SERVER_SETTINGS
@_examples("hooks", STDOUT_CASES)
@given(hooks=st.lists(stdout_hook(), min_size=1, max_size=3))
def test_hook_stdout_strict(
    live: LiveService, caplog: pytest.LogCaptureFixture, hooks: HookCase
) -> None:
    argv = ["false"] if any(h["phase"] == "onError" for h, _ in hooks) else ["true"]
    request = {"argv": argv, "cwd": str(live.cwd), "hooks": [h for h, _ in hooks]}
    with serving(live, caplog):
        seen = run(live.url, request, recv_s=60)
        check_seen(live, seen)
        if seen.code == 1000:
            frames = [f for f in seen.frames if f["type"] == "hook"]
            for frame in frames:
                assert frame.get("sandbox") == "strict", frame
            for (_, advice), frame in _matched(hooks, frames):
                if advice is not None:
                    assert frame["status"] == "ok", frame
                    assert advice in frame.get("advice", []), frame


def _matched(
    hooks: list[tuple[dict[str, Any], str | None]], frames: list[dict[str, Any]]
) -> list[tuple[tuple[dict[str, Any], str | None], dict[str, Any]]]:
    """Each hook with its frame, for the phases where every hook left one: the hooks of a
    phase run one after another in declaration order."""
    out: list[tuple[tuple[dict[str, Any], str | None], dict[str, Any]]] = []
    for phase in {h["phase"] for h, _ in hooks}:
        ours = [pair for pair in hooks if pair[0]["phase"] == phase]
        theirs = [f for f in frames if f.get("phase") == phase]
        if len(ours) == len(theirs):
            out += zip(ours, theirs, strict=True)
    return out


# ---- 5. config files --------------------------------------------------------------------------


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


@pytest.fixture
def person(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A person's shell for the CLI: a working directory of its own, no discovery, user
    config and state directories that are empty."""
    home = tmp_path / "person"
    home.mkdir()
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    monkeypatch.delenv("MCPX_HOOKS_TOKEN", raising=False)
    monkeypatch.delenv("MCPX_HOOKS_TRUST", raising=False)
    monkeypatch.chdir(home)
    return home


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
@_examples("file", CONFIG_CASES)
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


# ---- 5b. The prompt cache ---------------------------------------------------------------------

#: The project a cache entry may point at: a prompt hook `promote` can rewrite.
PROMPT_PROJECT = '# keep\n[[hooks]]\nname = "deps"\non = "script"\nphase = "before"\nprompt = "check"\neffect = "run"\n'  # noqa: E501


@st.composite
def prompt_cache_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """A prompt cache entry as a hostile hand (or a model) left it: junk bytes, JSON of any
    shape, an entry near the real document with hostile fields, or not a file at all. The
    text `@project` stands for the project file of the example."""
    argv = draw(
        st.one_of(
            st.lists(st.one_of(hostile_text, st.just("\u001b[2J")), min_size=1, max_size=3),
            hostile_json,
        )
    )
    doc = {
        "version": draw(st.one_of(st.just(1), hostile_json)),
        "key": "@key",
        "hook": draw(st.one_of(st.just("deps"), hostile_text, hostile_json)),
        "file": draw(st.one_of(st.just("@project"), st.none(), hostile_text)),
        "pointer": draw(st.sampled_from(["/hooks/0", "/hooks/9", None, "", "/x"])),
        "prompt": draw(st.one_of(st.just("check"), hostile_text)),
        "effect": draw(st.one_of(st.just("run"), hostile_text)),
        "model": draw(st.one_of(st.just({"name": "default"}), hostile_json)),
        "answer": draw(
            st.one_of(
                st.fixed_dictionaries({"run": st.fixed_dictionaries({"argv": st.just(argv)})}),
                st.fixed_dictionaries({"propose": st.fixed_dictionaries({"value": hostile_json})}),
                hostile_json,
            )
        ),
        "created": draw(st.one_of(st.just(1000.0), odd_number, hostile_json)),
    }
    text = render(doc)
    kind = draw(st.sampled_from(["json", "json", "bytes", "mutated", "fifo", "dir", "0666"]))
    if kind == "bytes":
        return kind, draw(st.binary(max_size=200))
    if kind == "mutated":
        how = draw(st.sampled_from(["cut", "insert", "drop", "quote", "trail"]))
        text = mutate(text, draw(st.integers(0, 400)), how, draw(hostile_text))
    return kind, text.encode("utf-8", "surrogatepass")


# `person` is one directory for all examples (each a project of its own under it).
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(entry=prompt_cache_file())
def test_a_hostile_prompt_cache_entry_never_crashes_a_command(
    person: Path, entry: tuple[str, bytes]
) -> None:
    from mcpx_hooks.supervisor.models.promptcache import CachedAnswer, PromptCache

    kind, data = entry
    project = person / f"p{len(list(person.iterdir()))}" / ".mcpx-hooks.toml"
    project.parent.mkdir()
    project.write_text(PROMPT_PROJECT)
    cache = PromptCache.open(os.environ)
    assert cache is not None
    key = binascii.hexlify(os.urandom(32)).decode()
    cache.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = cache.path(key)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        data = data.replace(b"@key", key.encode()).replace(b"@project", str(project).encode())
        path.write_bytes(data)
        path.chmod(0o666 if kind == "0666" else 0o600)
    try:
        got = cache.get(key)
        assert got is None or isinstance(got, CachedAnswer)
        assert (got is not None) == (key in [k for k, _ in cache.entries()])
        for argv in (["prompts", "list"], ["prompts", "show", key]):
            code, out, err = run_cli(argv)
            assert code == (0 if got is not None or argv[1] == "list" else 2), (code, err)
            assert "\u001b" not in out + err and not tracebacks(out, err), (out, err)
        code, out, err = run_cli(["prompts", "list", "--json"])
        assert code == 0 and len(json.loads(out)) == (got is not None), (code, err)
        code, out, err = run_cli(["prompts", "promote", key])
        assert code in (0, 2), (code, out, err)
        assert "\u001b" not in out + err and not tracebacks(out, err), (out, err)
        if code == 0:  # it was the project's hook, with a command: the file is a run hook now
            assert validate_files([project]) == []
            assert "prompt" not in project.read_text() and project.read_text().startswith("# keep")
        else:
            assert project.read_text() == PROMPT_PROJECT
    finally:
        if path.is_dir():
            code, out, err = run_cli(["prompts", "clear"])  # it cannot remove a directory
            assert code == 1 and "Is a directory" in err, (code, out, err)
            path.rmdir()
        assert run_cli(["prompts", "clear"])[0] == 0
    assert not path.exists()


#: Config texts a prompt hook named `deps` (prompt "check") may sit in, each way TOML and
#: JSON can say it; the property breaks them in one place.
PROMOTE_TEXTS = [
    PROMPT_PROJECT,
    '[[hooks]]\nname = "first"\non = "script"\nphase = "suffix"\nrun = ["true"]\n\n'
    + PROMPT_PROJECT.replace("# keep\n", "")
    + '[hooks.vars]\na = 1\n[hooks.when]\nargv = ["*"]\n',
    'hooks = [ { name = "deps", on = "script", phase = "before", prompt = "check",'
    ' effect = "run", vars.a = 1 } ]  # inline\n',
    '[[hooks]]\nname = "deps"\non = "script"\nphase = "before"\nprompt = """check"""\n'
    'effect = "run"\nvars.a = 1\nvars.b = "x"\ntimeoutMs = 5\n',
]


@st.composite
def promote_target(draw: st.DrawFn) -> tuple[str, str]:
    """A file that holds (or nearly holds) the prompt hook an entry names."""
    if draw(st.booleans()):
        doc = {"hooks": [{"name": "deps", "on": "script", "phase": "before", "prompt": "check",
                          "effect": "run", "vars": draw(hostile_json),
                          draw(hostile_text): draw(hostile_json)}]}  # fmt: skip
        text = render(doc)
        suffix = ".json"
    else:
        text = draw(st.sampled_from(PROMOTE_TEXTS))
        suffix = ".toml"
    if draw(st.booleans()):
        how = draw(st.sampled_from(["cut", "insert", "drop", "quote", "trail", "bom"]))
        text = mutate(text, draw(st.integers(0, 300)), how, draw(hostile_text))
    return suffix, text


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    target=promote_target(),
    to=st.one_of(st.none(), promote_target(), st.just(("", "")), st.just((".json", ""))),
)
def test_promote_on_a_hostile_file_writes_a_valid_file_or_nothing(
    person: Path, target: tuple[str, str], to: tuple[str, str] | None
) -> None:
    from mcpx_hooks.supervisor.models.promptcache import CachedAnswer, PromptCache, cache_key

    suffix, text = target
    directory = person / f"q{len(list(person.iterdir()))}"
    directory.mkdir()
    path = directory / f".mcpx-hooks{suffix}"
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes(data)
    # `--to`: none, a file of its own (hostile too), or one that is not there yet.
    other = directory / f"other{to[0] if to is not None and to[0] else '.toml'}"
    if to is not None and to[1]:
        other.write_bytes(to[1].encode("utf-8", "surrogatepass"))
    other_before = other.read_bytes() if other.exists() else None
    cache = PromptCache.open(os.environ)
    assert cache is not None
    key = cache_key("deps", "check", "run", "default", "m", {})
    answer = {"run": {"argv": ["sh", "-c", "echo '\"ok\"' \\\\ $HOME"]}}
    cache.put(key, CachedAnswer("deps", str(path), "/hooks/0", "check", "run", {}, answer, 1.0))
    flags = [] if to is None else ["--to", str(other)]
    code, out, err = run_cli(["prompts", "promote", key, *flags])
    assert code in (0, 2), (code, out, err)
    assert not tracebacks(out, err), (out, err)
    written = path if to is None else other
    if code == 0:
        assert validate_files([written]) == [], written.read_text()
        config = load_config([written], cwd=directory, environ={}, discover=False)
        commands = [list(h.target) for h in config.hooks if h.name == "deps"]
        assert commands == [answer["run"]["argv"]]
    else:
        assert (other.read_bytes() if other.exists() else None) == other_before
    if to is not None or code != 0:
        assert path.read_bytes() == data
    made = other_before is not None or (to is not None and code == 0)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        {path.name} | ({other.name} if made else set())
    )
    cache.clear()


# ---- 6. CLI arguments -------------------------------------------------------------------------

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
@_examples("case", CLI_CASES)
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
            assert any(flag in err for flag in refused), err
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


def json_verdict(text: str) -> bool | None:
    """Whether `--input` must take the text (True), must refuse it (False), or either
    (JSON nested deeper than the documented limit of 128). A leading byte order mark is
    taken, as by every input."""
    try:
        value = json.loads(text.removeprefix("\ufeff"))
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


# ---- the console's pages ---------------------------------------------------------------------

#: Header values as a client may send them: any byte but CR, LF and NUL (h11 refuses those).
header_value = st.binary(max_size=300).map(
    lambda b: b.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"").strip()
)


@given(
    path=st.one_of(
        st.builds(lambda t: "/console/" + _quoted(t), hostile_text),
        st.builds(lambda t: "/?token=" + _quoted(t), hostile_text),
        st.sampled_from(["/console/..%2F..%2Fetc%2Fpasswd", "/console/%00", "/console//", "/"]),
    ),
    host=header_value,
    cookie=header_value,
    tag=header_value,
)
def test_console_pages_take_any_request(path: str, host: bytes, cookie: bytes, tag: bytes) -> None:
    """A hostile path, `Host`, `Cookie` or `If-None-Match` gets a clear answer: a shipped file,
    the page, the way in, or a JSON error; never a file that is not shipped, never a crash,
    and the cookie a `Cookie` header holds admits nothing without the token."""
    from mcpx_hooks.supervisor.service import pages
    from mcpx_hooks.supervisor.service.protocol import Request
    from mcpx_hooks.supervisor.service.routes import Answer, answer

    headers = ((b"host", host), (b"cookie", cookie), (b"if-none-match", tag))
    request = Request("GET", path, headers, websocket=False)
    got = answer(request, token="the-token", origins=frozenset(), stopping=False)
    assert isinstance(got, Answer)
    shipped = {f.body for f in pages.shipped().values()}
    assert got.status in (200, 303, 304, 401, 404), got
    if got.status == 200:
        assert got.body in shipped
    elif got.status in (401, 404):
        assert got.body in shipped or json.loads(got.body)["code"] == got.status
    for name, value in got.headers:
        assert b"\r" not in value and b"\n" not in value, (name, value)
    runs = Request("GET", "/v1/runs", headers, websocket=False)
    assert answer(runs, token="the-token", origins=frozenset(), stopping=False).status == 401


# ---- model replies: what a model server answers a prompt hook ----------------------------

#: Replies no model should give, as (HTTP status, body or the name of one in `_BIG_REPLIES`):
#: over the cap, nested past any parser's depth, not UTF-8, the protocol's shape with every
#: part wrong.
MODEL_REPLY_CASES: list[tuple[int, bytes | str]] = [
    (200, "huge"),
    (200, "deep-list"),
    (200, "deep-object"),
    (200, "huge-content"),
    (200, "deep-content"),
    (200, b"\xff\xfe{}"),
    (200, json.dumps({"choices": [{"message": {"content": '{"run": 1}'}}]}).encode()),
    (200, b'{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": true}}'),
    (200, b'{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": -5}}'),
    (200, b'{"choices": {"0": 1}}'),
    (500, b'{"error": "sk-in-the-body"}'),
    (204, b""),
]
_BIG_REPLIES: dict[str, Callable[[], bytes]] = {
    "huge": lambda: b"x" * (3 * 1024 * 1024),
    "deep-list": lambda: deep(100_000).encode(),
    "deep-object": lambda: deep(100_000, "{").encode(),
    "huge-content": lambda: (
        b'{"choices": [{"message": {"content": "' + b"a" * (2 * 1024 * 1024) + b'"}}]}'
    ),
    "deep-content": lambda: json.dumps(
        {"choices": [{"message": {"content": deep(10_000)}}]}
    ).encode(),
}


@st.composite
def model_reply(draw: st.DrawFn) -> tuple[int, bytes]:
    status = draw(st.sampled_from([200, 200, 200, 201, 400, 429, 500, 503]))
    kind = draw(st.sampled_from(["bytes", "json", "content", "content"]))
    if kind == "bytes":
        return status, draw(st.binary(max_size=256))
    if kind == "json":
        return status, render(draw(hostile_json)).encode("utf-8", "surrogatepass")
    content = draw(
        st.one_of(
            hostile_text,
            hostile_json.map(render),
            st.sampled_from(['{"advise": 1}', '{"propose": {}}', '```json\n{"advise": "x"}\n```']),
        )
    )
    usage = draw(st.one_of(st.just({"prompt_tokens": 1, "completion_tokens": 2}), hostile_json))
    body = {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": usage}
    return status, render(body).encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def reply_server() -> Iterator[Any]:
    from loopmodel import LoopModel

    with LoopModel() as server:
        yield server


_REPLIES = iter(range(10**9))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@_examples("reply", MODEL_REPLY_CASES)
@given(reply=model_reply())
def test_model_replies(person: Path, reply_server: Any, reply: tuple[int, bytes | str]) -> None:
    """Whatever a model server answers, the prompt hook ends in a frame with a status (never
    a raise), a failure says why in our words (never the body), and memory stays bounded
    (the reply is read no further than its cap)."""
    from typing import cast

    from loopmodel import Reply

    from mcpx_hooks.supervisor.core.frames import HookStatus
    from mcpx_hooks.supervisor.process.spawner import Spawner
    from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
    from mcpx_hooks.supervisor.run.hookrun import run_hook

    status, given = reply
    body = _BIG_REPLIES[given]() if isinstance(given, str) else given
    reply_server.default = Reply(status=status, raw=body)
    doc = {
        "models": {"default": {"provider": "openai", "url": reply_server.url}},
        "hooks": [{"name": "p", "on": "script", "phase": "onError", "prompt": "@error",
                   "effect": "apply", "maxOutputBytes": 1024 * 1024}],
    }  # fmt: skip
    (person / "models.json").write_text(json.dumps(doc))
    (hook,) = load_config(["models.json"], cwd=person, environ={}, discover=False).hooks
    # A fresh error each example: a cached answer from an earlier one is never reused.
    ctx = HookContext(
        RunInfo("r", ("job",), str(person), "t"), error={"message": f"boom {next(_REPLIES)}"}
    )
    before = psutil.Process().memory_info().rss
    frame = trio.run(run_hook, cast(Spawner, object()), hook, ctx).frame
    assert isinstance(frame.status, HookStatus) and frame.status is not HookStatus.SKIPPED
    if frame.status.is_failure:
        assert frame.reason and not tracebacks(frame.reason)
        assert "sk-in-the-body" not in frame.reason
    if status >= 400:
        assert frame.status is HookStatus.FAILED and f"HTTP {status}" in (frame.reason or "")
    assert frame.ran is None  # apply: a `run` key is dropped, never executed
    assert psutil.Process().memory_info().rss - before < 64 * 1024 * 1024


# ---- Tool servers: plugin hooks' args, scripts' call lines ----------------------------------

from mcpx_hooks.supervisor.core.placeholders import (  # noqa: E402
    BUILT_INS,
    PlaceholderError,
    resolve,
)

placeholder_text = st.one_of(
    hostile_text,
    st.builds(
        "".join,
        st.lists(
            st.one_of(
                st.sampled_from(["@", "@@", ".", "@input", "@input.a.0", "@team", "@run.", "@9"]),
                plain_text,
            ),
            max_size=6,
        ),
    ),
)
placeholder_args = st.recursive(
    st.one_of(placeholder_text, st.none(), st.integers(), st.booleans()),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(placeholder_text, kids, max_size=4)
    ),
    max_leaves=12,
)


@given(
    args=placeholder_args,
    names=st.dictionaries(st.sampled_from([*BUILT_INS, "team", "a"]), plain_json, max_size=5),
)
def test_plugin_args_resolve_or_say_which_placeholder(args: Any, names: dict[str, Any]) -> None:
    """Any args with any placeholders: a JSON value, or a `PlaceholderError` naming it."""
    try:
        value = resolve(args, names)
    except PlaceholderError as exc:
        assert str(exc).startswith("@") and "Traceback" not in str(exc)
        return
    json.dumps(value)


call_line = st.fixed_dictionaries(
    {"type": st.just("call")},
    optional={
        "id": st.one_of(st.integers(), plain_text, plain_json),
        "tool": st.one_of(st.sampled_from(["h.echo", "nope.x", "h.", ".x", "h"]), hostile_text),
        "args": st.one_of(plain_json, st.just({"big": "x" * (1024 * 1024 + 1)})),
    },
)


@given(lines=st.lists(call_line, max_size=200))
def test_script_call_lines_each_get_one_answer_and_stay_bounded(
    lines: list[dict[str, Any]],
) -> None:
    """Every call line a script may write gets exactly one answer line (JSON, `ok` false
    here: no tool server is declared), and what waits is bounded whatever the flood."""
    import trio.testing

    from mcpx_hooks.supervisor.core.hooks import Config
    from mcpx_hooks.supervisor.run.asking import Asks
    from mcpx_hooks.supervisor.run.bus import Bus
    from mcpx_hooks.supervisor.run.calls import MAX_PENDING, ScriptCalls
    from mcpx_hooks.supervisor.run.hookcontext import HookContext
    from mcpx_hooks.supervisor.run.journal import RunJournal
    from mcpx_hooks.supervisor.run.phases import PhaseHooks

    async def main() -> list[dict[str, Any]]:
        journal = RunJournal("r")
        hooks = PhaseHooks(
            Config(),
            None,
            Bus(),
            journal=journal,
            run_id="r",
            asks=Asks(),  # type: ignore[arg-type]
        )
        calls = ScriptCalls(config=Config(), hooks=hooks, ctx=HookContext(None), journal=journal)
        send, receive = trio.testing.memory_stream_one_way_pair()
        got = bytearray()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(calls.serve, send)
            for line in lines:
                calls.submit(line)
            assert calls._pending.statistics().current_buffer_used <= MAX_PENDING
            with trio.fail_after(30):
                while got.count(b"\n") < len(lines):
                    got.extend(await receive.receive_some())
            nursery.cancel_scope.cancel()
        return [json.loads(line) for line in got.splitlines()]

    answers = trio.run(main)
    assert len(answers) == len(lines)
    assert all(a["ok"] is False and isinstance(a["error"], str) for a in answers)


# ---- the cluster: what comes off NATS (a queued request, a run's subject) ---------------------

CLUSTER_MESSAGE_CASES = (
    b"",
    b"\xff\xfe",
    b"[]",
    b"{" * 5000,
    b'{"runId": "a.b", "request": "{}"}',
    b'{"runId": ">", "request": 1}',
    b'{"runId": "ok", "request": "not json"}',
    b'{"type": "end", "seq": 0}',
)


@example(data=CLUSTER_MESSAGE_CASES[0], seq="0")
@given(
    data=st.one_of(st.sampled_from(CLUSTER_MESSAGE_CASES), st.binary(max_size=2000)),
    seq=st.one_of(st.just("0"), st.just("-1"), st.just("x"), st.text(max_size=8)),
)
def test_hostile_cluster_messages_are_dropped_never_taken(data: bytes, seq: str) -> None:
    """A worker takes only a request a gateway signed, naming a subject-safe run id (an
    unsigned message, whatever it holds, is never a request to run); a gateway's mirror
    takes only a frame at the next seq, and never past its `end`."""
    from mcpx_hooks.supervisor.cluster.jet import Stored
    from mcpx_hooks.supervisor.cluster.mirror import MirrorJournal
    from mcpx_hooks.supervisor.cluster.names import RUN_ID
    from mcpx_hooks.supervisor.cluster.sealing import ClusterKey, unpack_request

    key = ClusterKey(bytes(32))
    for headers in ({}, {"Mcpx-Signature": seq}, {"Mcpx-Signature": key.sign(data)}):
        unpacked = unpack_request(key, data, headers)
        assert unpacked.run_id is None or RUN_ID.fullmatch(unpacked.run_id)
        if not headers:
            assert unpacked.text is None
    journal = MirrorJournal("run", 1 << 20)
    for _ in range(3):
        journal.take(Stored(data, {"Mcpx-Seq": seq}, 1))
    assert len(journal) <= 1
    if len(journal):
        assert int(seq) == 0 and journal.lines[0] == data


# ---- the cluster's artifacts: what a gateway reads of the bucket and of a request ------------


@given(description=st.one_of(st.none(), st.text(), st.binary().map(repr), st.integers()))
@example(description='{"name": "a.txt", "mime": "text/plain\\r\\nX-Evil: 1"}')
@example(description='{"name": 3, "mime": ["x"]}')
def test_a_hostile_object_description_gives_a_name_and_one_line_type(description: Any) -> None:
    from mcpx_hooks.supervisor.cluster.objects import described

    name, mime = described(description, "r.a0")
    assert isinstance(name, str) and name
    assert isinstance(mime, str) and mime.isprintable() and mime


@given(run_id=st.text(max_size=80), artifact_id=st.text(max_size=80))
def test_hostile_artifact_ids_on_a_gateway_are_404_or_looked_up(
    run_id: str, artifact_id: str
) -> None:
    from mcpx_hooks.supervisor.cluster.artifacts import ClusterArtifact, ClusterRoutes
    from mcpx_hooks.supervisor.cluster.names import RUN_ID
    from mcpx_hooks.supervisor.cluster.watch import RunsIndex
    from mcpx_hooks.supervisor.run.artifacts import ArtifactGone

    routes = ClusterRoutes(RunsIndex(4), None)  # type: ignore[arg-type]
    try:
        found = routes.find_artifact(run_id, artifact_id)
    except ArtifactGone as exc:
        assert str(exc)
        return
    assert isinstance(found, ClusterArtifact)
    assert RUN_ID.fullmatch(run_id) and RUN_ID.fullmatch(artifact_id)
