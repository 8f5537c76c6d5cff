"""Properties (Hypothesis) of what a run reads from its children: hostile lines on the frames
channel (and a Python `main()` returning or emitting hostile values), and hostile hook stdout
under the `strict` sandbox, through a live service. The live service and its invariants:
`props_service.py`.
"""

from __future__ import annotations

import binascii
import json
from typing import Any

import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st
from live_service import LiveService, run
from props import (
    PY,
    deep,
    examples,
    hostile_argv,
    hostile_json,
    hostile_text,
    huge_int,
    near_json,
    plain_json,
    plain_text,
    render,
)
from props_service import SERVER_SETTINGS, check_seen, service_for_module, serving

live = pytest.fixture(scope="module")(service_for_module)


# ---- frames-channel lines -----------------------------------------------------------------------

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
@examples("scripts", FRAMES_CASES)
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


# ---- hook stdout (strict) -----------------------------------------------------------------------

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
@examples("hooks", STDOUT_CASES)
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
