"""Properties (Hypothesis) of the service's ways in: hostile `/v1/exec` messages and endpoint
paths over real sockets, the `hooks` of an exec request, and the console's pages, whatever a
request holds. The live service and its invariants: `props_service.py`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import example, given, note
from hypothesis import strategies as st
from live_service import LiveService, exchange, run
from props import (
    Raw,
    deep,
    deep_json,
    effect_word,
    examples,
    hook_object,
    hostile_argv,
    hostile_env,
    hostile_json,
    hostile_text,
    huge_int,
    near_json,
    profile_word,
    python_code,
    render,
    source_line,
)
from props_service import (
    CWD,
    SANDBOX_ESCAPE,
    SERVER_SETTINGS,
    at_cwd,
    check_seen,
    service_for_module,
    serving,
    text_at_cwd,
)

live = pytest.fixture(scope="module")(service_for_module)


# ---- requests on the wire -----------------------------------------------------------------------


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


# ---- wire requests ------------------------------------------------------------------------------


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
@examples("batch", WIRE_CASES)
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


# ---- per-call hooks -----------------------------------------------------------------------------


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
    per_call(cwd="\ud800"),  # (a lone surrogate: no path, it cannot even be encoded)
    per_call(cwd="/tmp\x00/x"),
    per_call(timeoutMs=Raw("9" * 5000)),
]


@SERVER_SETTINGS
@examples("requests", HOOK_CASES)
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
@example(path="/console/", host=b":\xb2", cookie=b"", tag=b"")  # a digit `int` refuses
def test_console_pages_take_any_request(path: str, host: bytes, cookie: bytes, tag: bytes) -> None:
    """A hostile path, `Host`, `Cookie` or `If-None-Match` gets a clear answer: a shipped file,
    the page, the way in, or a JSON error; never a file that is not shipped, never a crash,
    and the cookie a `Cookie` header holds admits nothing without the token."""
    from mcpx_hooks.supervisor.service import pages
    from mcpx_hooks.supervisor.service.protocolevents import Request
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
