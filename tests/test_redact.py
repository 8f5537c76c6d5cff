"""Redaction and passing variables by name, without a loop or a process: the pure rules of
`core/redact.py` and `core/passenv.py`, the journal and the bus that apply them, and the
server's log filter."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from typing import Any

import orjson
import pytest
import trio
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mcpx_hooks.supervisor.core.frames import (
    EmitFrame,
    ErrorFrame,
    FrameType,
    HookStatus,
    OutputFrame,
    ResultFrame,
    StartFrame,
    blank,
)
from mcpx_hooks.supervisor.core.hookframes import HookFrame
from mcpx_hooks.supervisor.core.passenv import (
    pass_environment,
    reference_problem,
    secret_unset,
    wanted,
    withheld_matches,
)
from mcpx_hooks.supervisor.core.redact import NO_SECRETS, Redactor, mark
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.journal import RunJournal

TOKEN = "ghp_0123456789abcdef"


def test_every_form_of_a_value_is_replaced() -> None:
    r = Redactor({"TOKEN": TOKEN, "PASSWORD": 'pa"ss\\wörd'})
    assert r.text(f"a {TOKEN} b {TOKEN}") == "a [secret TOKEN] b [secret TOKEN]"
    # as a hook that prints JSON writes it: quote and backslash escaped, non-ASCII both ways
    assert r.text(json.dumps({"p": 'pa"ss\\wörd'})) == '{"p": "[secret PASSWORD]"}'
    assert r.text(json.dumps('pa"ss\\wörd', ensure_ascii=False)) == '"[secret PASSWORD]"'
    assert r.text("nothing here") == "nothing here"
    assert r.value({TOKEN: [TOKEN, 1, None, {"k": TOKEN}]}) == {
        "[secret TOKEN]": ["[secret TOKEN]", 1, None, {"k": "[secret TOKEN]"}]
    }
    assert NO_SECRETS.value({"a": TOKEN}) == {"a": TOKEN} and not NO_SECRETS.active


def test_a_value_of_several_lines_is_replaced_line_by_line_too() -> None:
    key = "-----BEGIN KEY-----\nMIIEowIBAAKCAQEA\nab\n-----END KEY-----"
    r = Redactor({"KEY": key})
    assert r.text(f"x{key}y") == "x[secret KEY]y"
    # output frames are lines: each long line of the value is caught on its own
    assert r.text("MIIEowIBAAKCAQEA") == "[secret KEY]"
    assert r.text("ab") == "ab"  # a line shorter than a secret may be is left


def test_the_longer_secret_wins_where_two_overlap() -> None:
    r = Redactor({"SHORT": "abcd", "LONG": "abcdefgh"})
    assert r.text("abcdefgh abcd") == "[secret LONG] [secret SHORT]"
    assert (r | NO_SECRETS) is r and (NO_SECRETS | r) is r
    assert (Redactor({"A": "aaaa"}) | Redactor({"B": "bbbb"})).text("aaaa bbbb") == (
        "[secret A] [secret B]"
    )


def test_a_text_cut_short_loses_the_start_of_a_secret_the_cut_took_the_rest_of() -> None:
    # The spawner cuts a start failure's report it cannot send whole (a long program name).
    r = Redactor({"TOKEN": TOKEN})
    assert r.text(f"cannot start '/x/{TOKEN[:9]} [...]'") == "cannot start '/x/ [...]'"
    assert r.text(f"/x/{TOKEN[:1]} [...]") == "/x/ [...]"  # one character is a start too
    assert r.text("/x/hp_0 [...]") == "/x/hp_0 [...]"  # not a start: kept
    assert r.text(f"{TOKEN} and {TOKEN[:4]} [...]") == "[secret TOKEN] and  [...]"
    escaped = Redactor({"P": 'pa"ss'})  # a JSON form's start too
    assert escaped.text('{"p": "pa\\" [...]') == '{"p": " [...]'
    assert NO_SECRETS.text(f"{TOKEN[:9]} [...]") == f"{TOKEN[:9]} [...]"
    many = f"{TOKEN[:5]} [...]" * 20  # (the first few cuts are looked at, no more)
    assert r.text(many).startswith(" [...]" * 8 + TOKEN[:5])


def test_the_spawner_marks_a_cut_as_redaction_looks_for_it() -> None:
    from mcpx_hooks.runners import protocol
    from mcpx_hooks.supervisor.core.redact import CUT

    assert protocol.CUT == CUT


def test_pass_environment_copies_globs_and_refuses_a_missing_or_short_secret() -> None:
    source = {"CI": "1", "GITHUB_SHA": "abc", "GITHUB_TOKEN": TOKEN, "HOME": "/root"}
    passed = pass_environment(["CI", "GITHUB_*"], ["GITHUB_TOKEN"], source)
    assert passed.values == {"CI": "1", "GITHUB_SHA": "abc", "GITHUB_TOKEN": TOKEN}
    assert passed.secrets == {"GITHUB_TOKEN": TOKEN} and passed.problem is None
    assert pass_environment([], ["NOPE"], source).problem == "secret NOPE is not set"
    assert secret_unset("X") == "secret X is not set"
    short = pass_environment([], ["CI"], source)
    assert short.problem is not None and "too short" in short.problem and "CI" in short.problem
    assert "1" not in short.problem.replace("(1 characters", "")  # the value is never said
    assert wanted(["GITHUB_*"], ["CI"], source) == {
        "CI": "1",
        "GITHUB_SHA": "abc",
        "GITHUB_TOKEN": TOKEN,
    }


def test_no_pass_env_glob_or_name_passes_the_supervisor_s_own_secrets() -> None:
    source = {"MCPX_HOOKS_TOKEN": TOKEN, "MCPX_X": "1", "OPENAI_API_KEY": "sk-key-1234"}
    keys = frozenset({"OPENAI_API_KEY"})
    for globs in (["MCPX_*"], ["*"], ["MCPX_HOOKS_TOKEN"], ["*KEY"]):
        passed = pass_environment(globs, [], source, withheld=keys)
        assert "MCPX_HOOKS_TOKEN" not in passed.values and "OPENAI_API_KEY" not in passed.values
        assert "MCPX_HOOKS_TOKEN" not in wanted(globs, [], source, withheld=keys)
    assert pass_environment(["*"], [], source, withheld=keys).values == {"MCPX_X": "1"}
    named = pass_environment([], ["MCPX_HOOKS_TOKEN"], source)  # named as a secret: redacted
    assert named.secrets == {"MCPX_HOOKS_TOKEN": TOKEN}
    assert wanted([], ["MCPX_HOOKS_TOKEN"], source) == {"MCPX_HOOKS_TOKEN": TOKEN}
    assert withheld_matches(["MCPX_*", "CI", "*_KEY"], keys) == [
        ("MCPX_*", "MCPX_HOOKS_TOKEN"),
        ("*_KEY", "OPENAI_API_KEY"),
    ]
    # The OpenTelemetry exporter's headers (an API key, often) are the supervisor's too.
    otel = {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k3y", "OTEL_SERVICE_NAME": "ci"}
    assert pass_environment(["OTEL_*"], [], otel).values == {"OTEL_SERVICE_NAME": "ci"}


def test_an_env_reference_says_what_to_write_instead() -> None:
    why = reference_problem("${GITHUB_TOKEN}")
    assert why is not None
    assert 'passEnv = ["GITHUB_TOKEN"]' in why and 'secrets = ["GITHUB_TOKEN"]' in why
    flags = reference_problem("Bearer ${T}", flags=True)
    assert flags is not None and "--pass-env T" in flags and "--secret T" in flags
    assert reference_problem("$HOME and $5 are literal") is None


async def test_the_journal_redacts_every_frame_type() -> None:
    journal = RunJournal("r")
    journal.redactor = Redactor({"TOKEN": TOKEN})
    journal.append(blank(StartFrame, argv=("sh", "-c", f"echo {TOKEN}"), cwd="/", sandbox="none"))
    journal.append(
        blank(
            HookFrame,
            name="h",
            on="script",
            phase="before",
            action="run",
            effect="apply",
            requested_effect="apply",
            clamped_by=(),
            status=HookStatus.OK,
            duration_ms=1,
            sandbox="none",
            changed=True,
            original={"v": TOKEN},
            value=TOKEN,
            advice=(f"token {TOKEN}",),
            stderr_tail=f"{TOKEN}\n",
        )
    )
    journal.offer(blank(OutputFrame, text=f"out {TOKEN}", type=FrameType.STDOUT))
    journal.offer(blank(EmitFrame, value={TOKEN: TOKEN}))
    journal.append(blank(ResultFrame, value=TOKEN, advice=(TOKEN,)))
    for line in journal.lines:
        assert TOKEN.encode() not in line
    frames = journal.frames
    assert frames[0]["argv"][2] == "echo [secret TOKEN]"
    assert frames[1]["original"] == {"v": "[secret TOKEN]"}
    assert frames[1]["stderrTail"] == "[secret TOKEN]\n"
    assert frames[3]["value"] == {"[secret TOKEN]": "[secret TOKEN]"}
    assert journal.outcome is not None and journal.outcome["value"] == "[secret TOKEN]"
    # a secret that looks like a field's name or a number leaves the frame whole
    named = RunJournal("s")
    named.redactor = Redactor({"A": "type", "B": "1234"})
    named.append(blank(ErrorFrame, message="type 1234", exit_code=1234))
    assert named.frames[0] == {
        "runId": "s",
        "seq": 0,
        "at": named.frames[0]["at"],
        "message": "[secret A] [secret B]",
        "exitCode": 1234,
        "type": "error",
    }


async def test_the_bus_redacts_the_events_of_a_run_and_its_own_secrets() -> None:
    bus = Bus(redactor=Redactor({"SUP": "supervisor-secret"}))
    with bus.redacting("r1", Redactor({"RUN": TOKEN})):
        during = bus.publish("run.started", {"argv": [TOKEN, "supervisor-secret"]}, run_id="r1")
        other = bus.publish("run.started", {"argv": [TOKEN]}, run_id="r2")
        assert bus.redact_text(f"{TOKEN} supervisor-secret") == "[secret RUN] [secret SUP]"
    assert during.data == {"argv": ["[secret RUN]", "[secret SUP]"]}
    assert other.data == {"argv": [TOKEN]}  # not that run's: its secret is not known there
    after = bus.publish("supervisor.stopping", {"x": "supervisor-secret"})
    assert after.data == {"x": "[secret SUP]"}


async def test_the_server_log_filter_redacts_messages_and_tracebacks(caplog: Any) -> None:
    from mcpx_hooks.supervisor.core.hooks import Config
    from mcpx_hooks.supervisor.run.runtime import open_runtime
    from mcpx_hooks.supervisor.service.logredact import LOGGER_NAME, redacting_log

    logger = logging.getLogger(LOGGER_NAME)
    async with open_runtime(Config()) as runtime:
        journal = runtime.journals.open("r")
        journal.redactor = Redactor({"TOKEN": TOKEN})
        with caplog.at_level(logging.DEBUG, LOGGER_NAME), redacting_log(runtime):
            try:
                raise ValueError(f"bad {TOKEN}")
            except ValueError as exc:
                logger.error("run failed: %s", exc, exc_info=exc)
        await trio.lowlevel.checkpoint()
    text = caplog.text
    assert TOKEN not in text and "run failed: bad [secret TOKEN]" in text
    assert "ValueError: bad [secret TOKEN]" in text


@pytest.mark.parametrize("debug", [False, True])
async def test_any_library_s_log_line_is_one_redacted_line_without_its_traceback(
    debug: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP SDK logs a failed handler with `logger.exception`: the operator reads one line,
    the secret redacted; the traceback (redacted too) only with MCPX_HOOKS_DEBUG=1."""
    from mcpx_hooks.supervisor.core.hooks import Config
    from mcpx_hooks.supervisor.core.loglines import LogLines
    from mcpx_hooks.supervisor.run.runtime import open_runtime
    from mcpx_hooks.supervisor.service.logredact import redacting_log

    monkeypatch.setenv("MCPX_HOOKS_DEBUG", "1" if debug else "0")
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(LogLines("mcpx-hooks serve", debug))
    logging.getLogger().addHandler(handler)
    try:
        async with open_runtime(Config()) as runtime:
            runtime.journals.open("r").redactor = Redactor({"TOKEN": TOKEN})
            with redacting_log(runtime):
                try:
                    raise ValueError(f"bad {TOKEN}")
                except ValueError:
                    logging.getLogger("mcp.server.x").exception("Error handling %s", TOKEN)
    finally:
        logging.getLogger().removeHandler(handler)
    text = written.getvalue()
    first = "mcpx-hooks serve: Error handling [secret TOKEN]: ValueError: bad [secret TOKEN]"
    assert TOKEN not in text
    if debug:
        # (the traceback's lines go on indented under the log's line)
        assert text.startswith("mcpx-hooks serve: Error handling [secret TOKEN]\n    Traceback")
        assert text.endswith("ValueError: bad [secret TOKEN]\n")
    else:
        assert text == f"{first} (a bug: MCPX_HOOKS_DEBUG=1 logs its traceback)\n"


def test_a_log_line_without_the_runtime_has_no_traceback_either() -> None:
    from mcpx_hooks.supervisor.core.loglines import LogLines

    record = logging.LogRecord("mcp", logging.ERROR, __file__, 1, "failed %d", (7,), None)
    try:
        raise KeyError("k")
    except KeyError as exc:
        record.exc_info = (KeyError, exc, exc.__traceback__)
    line = LogLines("mcpx-hooks mcp", debug=False).format(record)
    assert line.startswith("mcpx-hooks mcp: failed 7: KeyError: 'k' (a bug:") and "\n" not in line


def test_a_log_line_writes_others_control_characters_as_escapes() -> None:
    """What a library logs may quote a collector or a server: an escape sequence in it is
    written as its escape, and a line break starts an indented line, not one of the log's."""
    from mcpx_hooks.supervisor.core.loglines import LogLines

    said = "reason: \x1b]52;c;b3duZWQ=\x07\rok\nmcpx-hooks serve: all good"
    record = logging.LogRecord("otel", logging.ERROR, __file__, 1, "%s", (said,), None)
    assert LogLines("mcpx-hooks serve", debug=False).format(record).split("\n") == [
        "mcpx-hooks serve: reason: \\x1b]52;c;b3duZWQ=\\x07\\rok",
        "    mcpx-hooks serve: all good",
    ]


@pytest.mark.parametrize("debug", ["0", "1"])
def test_a_python_warning_is_one_log_line(debug: str) -> None:
    """A library's warning (the MCP SDK's deprecations) is a line of the log like any other,
    not the two lines (the message, then the source line) `warnings` writes by itself."""
    code = (
        "from mcpx_hooks.supervisor.core.loglines import log_to_stderr\n"
        "import warnings\n"
        "log_to_stderr('mcpx-hooks serve')\n"
        "warnings.warn('this is going away', DeprecationWarning)  # shown: in __main__\n"
        "warnings.warn('and so is this', UserWarning)\n"
    )
    env = {**os.environ, "MCPX_HOOKS_DEBUG": debug, "PYTHONWARNINGS": ""}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stderr.splitlines() == [
        "mcpx-hooks serve: <string>:4: DeprecationWarning: this is going away",
        "mcpx-hooks serve: <string>:5: UserWarning: and so is this",
    ]


# ---- the property -------------------------------------------------------------------------

#: Secret values as an environment holds them: no NUL, no lone surrogate. Without `[` and
#: `]`, so an occurrence cannot be made of a mark and the text beside it.
_SECRET_CHARS = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\x00[]", max_codepoint=0x2FFF
)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), max_size=40)


def _frames(texts: list[str]) -> list[Any]:
    a, b, c = texts
    return [
        blank(StartFrame, argv=("sh", a, b), cwd="/", sandbox="none"),
        blank(OutputFrame, text=a, type=FrameType.STDOUT),
        blank(OutputFrame, text=b, type=FrameType.STDERR),
        blank(EmitFrame, value={a: [b, {"k": c}], "n": 1}),
        blank(ErrorFrame, message=c, advice=(a, json.dumps(b), json.dumps(c, ensure_ascii=False))),
    ]


@settings(max_examples=300, deadline=None)
@given(
    secrets=st.lists(st.text(_SECRET_CHARS, min_size=4, max_size=24), min_size=1, max_size=3),
    around=st.lists(_TEXT, min_size=6, max_size=6),
    picks=st.lists(st.integers(0, 2), min_size=3, max_size=3),
)
def test_no_frame_holds_a_secret(secrets: list[str], around: list[str], picks: list[int]) -> None:
    named = {f"S{i}": value for i, value in enumerate(secrets)}
    marks = "".join(mark(name) for name in named)
    for value in secrets:
        assume(value not in marks)  # a secret that is part of its own replacement
    texts = [
        around[2 * i] + secrets[pick % len(secrets)] + around[2 * i + 1]
        for i, pick in enumerate(picks)
    ]
    # What the frames hold besides the texts (field names, the envelope) holds no secret.
    bare = RunJournal("run")
    for frame in _frames(["", "", ""]):
        bare.append(frame)
    for value in secrets:
        assume(all(value.encode() not in line for line in bare.lines))
        # nor the text around them, as it is written (`\u0000` holds "0000")
        assume(all(value.encode() not in orjson.dumps(json.dumps(t)) for t in around))
    journal = RunJournal("run")
    journal.redactor = Redactor(named)
    for frame in _frames(texts):
        journal.append(frame)
    for line in journal.lines:
        orjson.loads(line)  # still one JSON object
        for value in secrets:
            assert value.encode() not in line
            assert orjson.dumps(value)[1:-1] not in line
