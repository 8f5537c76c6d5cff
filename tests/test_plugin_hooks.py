"""Plugin hooks: a tool call on a server we run, its args with placeholders, its answer read
as a hook's stdout, `isError` as a failure, `timeoutMs` enforced with a cancellation."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
from conftest import Marker

from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import (
    Action,
    Config,
    Failure,
    Hook,
    PluginAnswer,
    Profile,
    Provenance,
    SourceKind,
)
from mcpx_hooks.supervisor.core.placeholders import PlaceholderError, resolve, value_names
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools.servers import ServerManager, ToolServers

HERE = Path(__file__).parent
HOSTILE = str(HERE / "mcpservers" / "hostile.py")
SDKTOOLS = str(HERE / "mcpservers" / "sdktools.py")
EXAMPLES = str(HERE.parent / "supervisor" / "examples" / "tools")
RUN = RunInfo("r1", ("python3", "job.py"), "/tmp", "2026-01-01T00:00:00Z")


def test_a_whole_string_placeholder_keeps_its_json_type() -> None:
    names = {"input": {"n": 3, "tags": ["a", "b"]}, "team": "ops"}
    assert resolve({"n": "@input.n", "all": "@input", "t": "@input.tags.1"}, names) == {
        "n": 3,
        "all": {"n": 3, "tags": ["a", "b"]},
        "t": "b",
    }


def test_a_placeholder_inside_a_string_becomes_its_json_text() -> None:
    names = {"input": {"n": 3, "tags": ["a"]}, "team": "ops"}
    got = resolve(["n=@input.n of @team: @input.tags, mail@@example.org", 7, None], names)
    assert got == ['n=3 of "ops": ["a"], mail@example.org', 7, None]


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ("@result", "no placeholder named 'result' here (given: input, team)"),
        ("x @input.missing", "@input has no 'missing'"),
        ("@input.tags.9", "@input.tags has no '9'"),
    ],
)
def test_a_placeholder_that_names_nothing_is_an_error(args: str, why: str) -> None:
    with pytest.raises(PlaceholderError, match=why.replace("(", r"\(").replace(")", r"\)")):
        resolve({"a": args}, {"input": {"tags": []}, "team": "ops"})


def test_value_names_lists_what_args_use() -> None:
    assert value_names({"a": ["@input.x", "@@not", "@run and @team"]}) == {"input", "run", "team"}


@pytest.fixture
async def manager(no_leaks: None) -> AsyncIterator[ServerManager]:
    async with open_spawner() as spawner, open_servers(spawner, Bus(), Config()) as m:
        yield m
    assert psutil.Process().children(recursive=True) == []


def servers(manager: ServerManager, log: Path, marker: Marker) -> ToolServers:
    return ToolServers(
        manager,
        {
            "h": ServerSpec(
                "h",
                (sys.executable, HOSTILE, "good", str(log), marker),
                str(HERE),
                sandbox=Profile.NONE,
            ),
            "sdk": ServerSpec("sdk", (sys.executable, SDKTOOLS), str(HERE), sandbox=Profile.NONE),
            "mute": ServerSpec(
                "mute", (sys.executable, HOSTILE, "mute"), str(HERE), sandbox=Profile.NONE
            ),
            "words": ServerSpec(
                "words", (sys.executable, "wordtools.py"), EXAMPLES, sandbox=Profile.NONE
            ),
        },
    )


def plugin(target: str, args: dict[str, Any], **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "p",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.PLUGIN,
        "target": target,
        "declaring_dir": str(HERE),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "args": args,
        "timeout_ms": 5000,
    }
    base.update(fields)
    return Hook(**base)


async def run_plugin(
    manager: ServerManager, tmp_path: Path, marker: Marker, hook: Hook
) -> HookReport:
    ctx = HookContext(
        RUN, input=({"name": "world", "n": 2},), servers=servers(manager, tmp_path / "l", marker)
    )
    return await run_hook(manager.spawner, hook, ctx)


async def test_structured_content_is_the_answer_an_apply_with_typed_placeholders(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    hook = plugin("h.echo", {"apply": {"value": {"n": "@input.n", "who": "@run.argv"}}})
    report = await run_plugin(manager, tmp_path, marker, attrs.evolve(hook, effect=Effect.APPLY))
    frame = report.frame
    assert (frame.status, frame.server, frame.tool, frame.sandbox) == ("ok", "h", "echo", "none")
    assert frame.changed and frame.value == {"n": 2, "who": ["python3", "job.py"]}
    assert frame.original == {"name": "world", "n": 2}
    assert frame.exit_code is None and frame.resources is None


async def test_text_content_is_read_as_plain_text_advice(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    report = await run_plugin(
        manager, tmp_path, marker, plugin("words.shout", {"text": "check @input.name"})
    )
    assert report.frame.status == "ok" and report.frame.advice == ('CHECK "WORLD"',)


async def test_a_key_above_the_effect_is_dropped_as_from_any_hook(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    report = await run_plugin(
        manager, tmp_path, marker, plugin("h.echo", {"refuse": "no", "advise": "careful"})
    )
    assert report.frame.refused is None and report.frame.advice == ("careful",)
    assert [d.key for d in report.frame.dropped] == ["refuse"]


async def test_is_error_fails_the_hook_and_a_closed_gate_refuses(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    hook = plugin("h.fail", {"why": "broken"}, effect=Effect.ASK, failure=Failure.CLOSED)
    report = await run_plugin(manager, tmp_path, marker, hook)
    assert report.frame.status == HookStatus.FAILED
    assert report.frame.reason == 'the tool answered isError: {"why": "broken"}'
    assert report.frame.refused is not None and report.frame.refused.fail_closed


async def test_timeout_ms_cuts_the_call_short_and_cancels_it_on_the_server(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    report = await run_plugin(manager, tmp_path, marker, plugin("h.wait", {}, timeout_ms=400))
    assert report.frame.status == HookStatus.TIMEOUT
    assert "cancelled on the server (notifications/cancelled)" in (report.frame.reason or "")
    await run_plugin(manager, tmp_path, marker, plugin("h.echo", {}))  # after the cancel line
    said = [line.split()[0] for line in (tmp_path / "l").read_text().splitlines()]
    assert said == ["start", "waiting", "cancelled"]


async def test_a_timeout_while_the_server_still_starts_says_so_not_that_the_tool_hung(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    # A server that never answers `initialize`, within its startTimeoutMs (10 s): the hook's
    # 400 ms pass first, and the tool was never asked, so nothing was cancelled on it.
    report = await run_plugin(manager, tmp_path, marker, plugin("mute.echo", {}, timeout_ms=400))
    assert report.frame.status == HookStatus.TIMEOUT
    assert report.frame.reason == (
        "timed out after 400 ms while server mute was still starting (its startTimeoutMs is"
        " 10000 ms); the tool was not called"
    )


#: Long enough that a hook ended "at the timeout" cannot pass for one ended at once.
LONG_TIMEOUT_MS = 120_000


@pytest.mark.parametrize("id_last", [False, True])
async def test_an_answer_of_100_mb_ends_the_hook_at_once_as_too_large(
    manager: ServerManager, tmp_path: Path, marker: Marker, id_last: bool
) -> None:
    # 100 MB on one line, its id first (as Python servers write it) or last (TypeScript's).
    args = {"bytes": 100_000_000, "idLast": id_last}
    hook = plugin("h.big", args, timeout_ms=LONG_TIMEOUT_MS)
    frame = (await run_plugin(manager, tmp_path, marker, hook)).frame
    assert frame.status == HookStatus.KILLED
    assert frame.reason == (
        "the tool's answer is too large (server h: the answer is too large:"
        " a message over 16777216 bytes)"
    )
    assert frame.duration_ms < LONG_TIMEOUT_MS / 2  # not the timeout: a generous margin
    # The rest of the line was read and dropped: the server goes on serving (its answer
    # waits for the drop, which a loaded machine may take longer than a default timeout for).
    echo = plugin("h.echo", {}, timeout_ms=LONG_TIMEOUT_MS)
    after = await run_plugin(manager, tmp_path, marker, echo)
    assert (after.frame.status, after.answer.advice) == ("ok", ())
    assert (tmp_path / "l").read_text().splitlines() == ["start"]  # never restarted


@pytest.mark.parametrize(
    ("head", "rid"),
    [
        (b'{"jsonrpc": "2.0", "id": 3, "result": {"content": [{"text": "xx', 3),
        (b'{ "id" : "a\\"b" , "result": {', 'a"b'),
        # An `id` inside the result, or in a string, is not the message's.
        (b'{"result": {"id": 9, "t": "\\"id\\": 1, xx', None),
        (b'{"result": {"id": 9}, "id": -4, "jsonrpc": "2.0"}', -4),
        (b'{"result": {"content": [{"type": "text", "text": "xxxx', None),
    ],
)
def test_the_id_of_a_line_too_long_is_read_at_its_top_level(head: bytes, rid: Any) -> None:
    from mcpx_hooks.supervisor.tools.jsonlines import top_level_id

    assert top_level_id(head) == rid


async def test_an_answer_over_max_output_bytes_is_too_large(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    hook = plugin("h.big", {"bytes": 2_000_000}, timeout_ms=LONG_TIMEOUT_MS)
    frame = (await run_plugin(manager, tmp_path, marker, hook)).frame
    assert frame.status == HookStatus.KILLED
    assert frame.reason == "the tool's answer is too large: over maxOutputBytes (1048576)"


TIME = {"timezone": "Europe/Warsaw", "datetime": "2026-01-01T12:00:00+01:00", "is_dst": False}
TIME_TEXT = json.dumps(TIME, indent=2)  # as the SDK writes a structured answer's text


@pytest.mark.parametrize(
    ("tool", "args", "answer", "advice"),
    [
        # A plain structured answer (a time server's): its text is advice, no key dropped.
        ("get_current_time", {}, PluginAnswer.AUTO, (TIME_TEXT,)),
        ("get_current_time", {}, PluginAnswer.ADVICE, (TIME_TEXT,)),
        # Plain text (the SDK also gives it as `{"result": …}` structured): advice.
        ("say", {"text": "it is noon"}, PluginAnswer.AUTO, ("it is noon",)),
        # An object with the answer keys, structured or as JSON text only, is the answer.
        ("verdict", {"advise": "careful"}, PluginAnswer.AUTO, ("careful",)),
        ("verdict", {"advise": "careful"}, PluginAnswer.HOOK, ("careful",)),
        ("text_json", {"obj": {"advise": "from text"}}, PluginAnswer.AUTO, ("from text",)),
        # `advice`: even an answer object is only text.
        ("verdict", {"advise": "x"}, PluginAnswer.ADVICE, (json.dumps({"advise": "x"}, indent=2),)),
    ],
)
async def test_a_plugin_hook_reads_an_sdk_server_s_answer_by_its_answer_setting(
    manager: ServerManager,
    tmp_path: Path,
    marker: Marker,
    tool: str,
    args: dict[str, Any],
    answer: PluginAnswer,
    advice: tuple[str, ...],
) -> None:
    hook = plugin(f"sdk.{tool}", args, answer=answer, timeout_ms=30_000)
    frame = (await run_plugin(manager, tmp_path, marker, hook)).frame
    assert (frame.status, frame.advice, frame.dropped) == ("ok", advice, ())


async def test_an_answer_object_that_is_not_valid_is_said_as_the_tool_s(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    # It was said as a process's: "stdout does not match hook-output schema at /refuse".
    hook = plugin("sdk.text_json", {"obj": {"refuse": 5}}, timeout_ms=30_000)
    frame = (await run_plugin(manager, tmp_path, marker, hook)).frame
    assert frame.status == HookStatus.INVALID_OUTPUT, frame.reason
    assert (frame.reason or "").startswith(
        "the tool's answer does not match hook-output schema at /refuse:"
    ), frame.reason


@pytest.mark.parametrize(
    ("target", "args", "why"),
    [
        ("sdk.text_json", {"obj": {"refuse": "no", "extra": 1}}, "refuse it holds keys that"),
        ("h.echo", {"Refuse": "x"}, '"Refuse" is not refuse (answer keys are lower case)'),
    ],
)
async def test_an_auto_answer_that_looked_like_an_answer_object_says_it_was_advice(
    manager: ServerManager, tmp_path: Path, marker: Marker, target: str, args: Any, why: str
) -> None:
    """A tool answering `{"refuse": "no", "extra": 1}` or `{"Refuse": "x"}` was taken as
    advice (as `auto` does) with no word to its author that the refusal was not taken: the
    frame's `answerNote` says so, and why; the readable view shows it as a note."""
    from mcpx_hooks.supervisor.cli.view import hook_frame_lines
    from mcpx_hooks.supervisor.core.convert import frame_json

    hook = plugin(target, args, effect=Effect.ASK, timeout_ms=30_000)
    frame = (await run_plugin(manager, tmp_path, marker, hook)).frame
    assert frame.status == "ok" and frame.refused is None and len(frame.advice) == 1
    said = frame_json(frame).get("answerNote") or ""
    assert said.startswith('answer = "auto" took the tool\'s answer as advice'), said
    assert why in said, said
    assert f"  note: {said}" in hook_frame_lines(frame_json(frame))
    plain = plugin("sdk.text_json", {"obj": {"n": 1}}, timeout_ms=30_000)  # no answer's look
    assert "answerNote" not in frame_json(
        (await run_plugin(manager, tmp_path, marker, plain)).frame
    )


@pytest.mark.parametrize(
    ("tool", "args", "why"),
    [
        ("get_current_time", {}, "keys that are not answer keys (datetime, is_dst, timezone)"),
        ("say", {"text": "hi"}, "keys that are not answer keys (result)"),
        ("text_json", {"obj": {"n": 1}}, "keys that are not answer keys (n)"),
        # An answer key beside a stranger: only the stranger is named (both were, `refuse`
        # said to be no answer key).
        ("text_json", {"obj": {"refuse": "no", "extra": 1}}, "not answer keys (extra);"),
    ],
)
async def test_answer_hook_insists_on_an_answer_object(
    manager: ServerManager, tmp_path: Path, marker: Marker, tool: str, args: Any, why: str
) -> None:
    hook = plugin(f"sdk.{tool}", args, answer=PluginAnswer.HOOK, timeout_ms=30_000)
    frame = (await run_plugin(manager, tmp_path, marker, hook)).frame
    assert frame.status == HookStatus.INVALID_OUTPUT and why in (frame.reason or "")
    assert frame.advice == () and frame.stdout_head


@pytest.mark.parametrize(
    ("target", "args", "why"),
    [
        ("nope.tool", {}, "no tool server named 'nope' is declared ([servers.nope]"),
        ("h.echo", {"x": "@error.message"}, "no placeholder named 'error'"),
        ("h.missing", {}, "server h lists no tool 'missing'"),
    ],
)
async def test_what_cannot_be_called_fails_the_hook_with_why(
    manager: ServerManager, tmp_path: Path, marker: Marker, target: str, args: Any, why: str
) -> None:
    report = await run_plugin(manager, tmp_path, marker, plugin(target, args))
    assert report.frame.status == HookStatus.FAILED and why in (report.frame.reason or "")


async def test_without_tool_servers_a_plugin_hook_fails_not_hangs(tmp_path: Path) -> None:
    spawner: Spawner | None = None
    report = await run_hook(spawner, plugin("h.echo", {}), HookContext(RUN))  # type: ignore[arg-type]
    assert report.frame.status == HookStatus.FAILED
    assert report.frame.reason == "no tool servers where this hook runs"


def test_a_plugin_hook_on_an_undeclared_server_or_a_missing_placeholder_is_refused(
    tmp_path: Path,
) -> None:
    from mcpx_hooks.supervisor.config.loading import validate_files
    from mcpx_hooks.supervisor.core.errors import Problem

    path = tmp_path / "c.toml"
    path.write_text(
        '[servers.words]\ncommand = ["srv"]\n'
        '[[hooks]]\non = "script"\nphase = "before"\nplugin = "word.count"\n'
        'args = { a = "@result.value", b = "@input", c = "for @run.argv" }\n'
        '[[hooks]]\non = "server.start"\nphase = "before"\nplugin = "words.count"\n'
        'args = { a = "@run" }\n'
    )
    assert validate_files([path]) == [
        Problem(
            str(path),
            "/hooks/0/args",
            '"@result" names nothing a plugin hook has in script.before (it has: hook, input, run)',
        ),
        Problem(
            str(path),
            "/hooks/0/plugin",
            'expected a declared tool server: "word" has no [servers.word] (declared: words)',
        ),
        Problem(
            str(path),
            "/hooks/1/args",
            '"@run" names nothing a plugin hook has in server.start.before (it has: hook, input)',
        ),
    ]


def test_hook_test_runs_a_plugin_hook_on_its_server(tmp_path: Path) -> None:
    import json
    import os
    import shutil
    import subprocess

    tmp_path.chmod(0o755)
    shutil.copy(Path(EXAMPLES) / "wordtools.py", tmp_path)
    (tmp_path / "c.toml").write_text(
        f'[servers.words]\ncommand = ["{sys.executable}", "wordtools.py"]\n'
        '[[hooks]]\nname = "loud"\non = "script"\nphase = "before"\nplugin = "words.shout"\n'
        'args = { text = "input is @input" }\n'
    )
    (tmp_path / "event.json").write_text('{"input": {"a": 1}}')
    done = subprocess.run(
        [sys.executable, "-m", "mcpx_hooks.supervisor", "hook", "test", "loud",
         "--config", "c.toml", "--event", "event.json", "--json"],
        cwd=tmp_path, env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    frame = json.loads(done.stdout)
    assert (frame["status"], frame["server"], frame["tool"]) == ("ok", "words", "shout")
    assert frame["advice"] == ['INPUT IS {"A":1}']


def test_hook_test_redacts_the_secret_a_plugin_hook_s_server_says(tmp_path: Path) -> None:
    # The server's secrets were left out of `hook test`'s redaction (only the hook's own were
    # in it): a tool that said its token printed it, as advice or as its error.
    import json
    import os
    import subprocess

    hostile = Path(__file__).parent / "mcpservers" / "hostile.py"
    tmp_path.chmod(0o755)
    command = json.dumps([sys.executable, str(hostile), "leak"])
    (tmp_path / "c.toml").write_text(
        f'[servers.h]\ncommand = {command}\nsandbox = "none"\nsecrets = ["MCPX_TEST_TOKEN"]\n'
        '[[hooks]]\nname = "said"\non = "script"\nphase = "before"\nplugin = "h.echo"\n'
    )
    token = "hunter2-is-the-password"
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "MCPX_TEST_TOKEN": token}
    shown = []
    for json_flag in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "mcpx_hooks.supervisor", "hook", "test", "said",
             "--config", "c.toml", *json_flag],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr  # (the tool answers isError)
        shown.append(done.stdout + done.stderr)
    said = "the tool answered isError: no: [secret MCPX_TEST_TOKEN]"
    assert json.loads(shown[1])["reason"] == said
    assert said in shown[0]
    assert token not in "".join(shown)


def test_answer_is_a_plugin_hook_s_and_one_of_its_words(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.config.loading import load_config, validate_files
    from mcpx_hooks.supervisor.core.hooks import hook_json

    path = tmp_path / "c.toml"
    head = '[servers.words]\ncommand = ["srv"]\n[[hooks]]\non = "script"\nphase = "before"\n'
    path.write_text(head + 'plugin = "words.count"\nanswer = "advice"\n')
    environ = {"MCPX_HOOKS_NO_DISCOVERY": "1"}
    hook = load_config([path], cwd=tmp_path, environ=environ).hooks[0]
    assert (hook.answer, hook_json(hook)["answer"]) == (PluginAnswer.ADVICE, "advice")
    path.write_text(head + 'plugin = "words.count"\nanswer = "json"\n')
    problems = validate_files([path])
    assert [p.pointer for p in problems] == ["/hooks/0/answer"]
    path.write_text(head + 'run = ["true"]\nanswer = "hook"\n')
    problems = validate_files([path])
    assert [p.pointer for p in problems] == ["/hooks/0/answer"] and "plugin" in problems[0].message
