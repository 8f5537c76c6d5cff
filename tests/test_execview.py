"""`exec`'s live view in virtual time: the line for a hook still running after a second, and
what it says of observe hooks at the end."""

from __future__ import annotations

from functools import partial

import trio

from mcpx_hooks.supervisor.cli.execview import (
    STILL_RUNNING_S,
    Output,
    observer_lines,
    serve_still_running,
)
from mcpx_hooks.supervisor.cli.runview import RunView
from mcpx_hooks.supervisor.core.events import EventKind
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.observerstats import ObserverStats, Unwell

STARTED = {"name": "deps", "on": "script", "phase": "before"}


async def test_a_hook_running_past_a_second_gets_one_line(autojump_clock: trio.abc.Clock) -> None:
    bus, said = Bus(), []
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_still_running, bus, "r1", said.append)
        bus.publish(EventKind.HOOK_STARTED, {"name": "quick"}, run_id="r1")
        await trio.sleep(STILL_RUNNING_S / 2)
        bus.publish(EventKind.HOOK_FINISHED, {"name": "quick"}, run_id="r1")
        bus.publish(EventKind.HOOK_STARTED, STARTED, run_id="other")  # not this run's
        bus.publish(EventKind.HOOK_STARTED, STARTED, run_id="r1", caused_by_observer=True)
        bus.publish(EventKind.HOOK_STARTED, STARTED, run_id="r1")
        await trio.sleep(STILL_RUNNING_S * 0.99)
        assert said == []
        await trio.sleep(STILL_RUNNING_S * 5)
        assert said == ["hook deps (script.before): still running after 1 s..."]
        nursery.cancel_scope.cancel()


def test_observer_lines_name_each_and_count_the_rest() -> None:
    stats = ObserverStats()
    stats.failed.append(Unwell("a", "run.finished", "timeout", "timed out after 5 ms"))
    stats.cut_short.append(Unwell("b", "run.finished", "killed", "it had not started yet"))
    stats.unwell, stats.unread = 5, 2
    assert observer_lines(stats, 2000) == [
        "mcpx-hooks exec: observe hook a (on run.finished) failed [timeout]: timed out after 5 ms",
        "mcpx-hooks exec: observe hook b (on run.finished) was cut short: it had not started yet"
        " when [observe] drainMs (2000 ms) passed after the run's end; it was killed",
        "mcpx-hooks exec: and 3 more observe hooks like these",
        "mcpx-hooks exec: 2 events were not yet observed when [observe] drainMs (2000 ms) passed",
    ]
    assert observer_lines(ObserverStats(), 2000) == []


def test_output_after_a_closed_pipe_says_once_and_prints_nothing(monkeypatch) -> None:
    closed = []

    def broken(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError

    out = Output(on_closed=lambda: closed.append(True))
    monkeypatch.setattr("builtins.print", broken)
    monkeypatch.setattr("os.dup2", lambda a, b: None)  # keep pytest's own stdout
    out.line("a")
    out.line("b")
    assert out.closed and closed == [True]


def _failed(**fields: object) -> dict[str, object]:
    frame = {
        "name": "gate", "on": "script", "phase": "before", "action": "run", "sandbox": "strict",
        "status": "failed", "durationMs": 4, "effect": "advise", "requestedEffect": "advise",
        "clampedBy": [], "reason": "exited with status 1", "exitCode": 1,
    }  # fmt: skip
    return {**frame, **fields}


def test_a_failed_hook_s_view_ends_with_what_it_said() -> None:
    from mcpx_hooks.supervisor.cli.view import STDERR_LINES, hook_frame_lines

    said = "".join(f"line {n}\n" for n in range(1, 11))
    lines = hook_frame_lines(_failed(stdoutTail=said, stderrTail="oops\n"))
    shown = [f"    | line {n}" for n in range(11 - STDERR_LINES, 11)]
    assert lines[-(len(shown) + 3) :] == [
        "  stdout (last lines):", *shown, "  stderr (last lines):", "    | oops",
    ]  # fmt: skip
    # What the head shows already is not shown twice; a hook that did not fail shows none.
    head = _failed(status="invalid-output", stdoutHead="{oops\n", stdoutTail="{oops\n")
    assert sum("{oops" in line for line in hook_frame_lines(head)) == 1
    ok = _failed(status="ok", reason=None, exitCode=0, stderrTail="chatter\n")
    assert not any("chatter" in line for line in hook_frame_lines(ok))


def test_a_failed_hook_s_view_says_each_thing_once_and_only_what_is_so() -> None:
    from mcpx_hooks.supervisor.cli.view import hook_frame_lines
    from mcpx_hooks.supervisor.core.frames import RUN_CANCELLED_REASON

    # Its exit is its reason: said once.
    assert hook_frame_lines(_failed()) == [
        "hook gate (script.before, run, sandbox strict): FAILED [failed] in 4 ms",
        "  effect advise",
        "  why: exited with status 1",
        "  failure is open: the run carries on",
    ]
    # A reason of its own: the exit said too.
    timed = hook_frame_lines(_failed(status="timeout", reason="timed out after 50 ms"))
    assert "  exited with status 1" in timed
    # A `call` hook's failure lets the call go on; one the run's cancellation cut short lets
    # nothing go on.
    assert "  failure is open: the call carries on" in hook_frame_lines(_failed(on="call"))
    cut = _failed(status="killed", reason=RUN_CANCELLED_REASON, exitCode=None, signal=9)
    assert not any("carries on" in line for line in hook_frame_lines(cut))


async def test_a_hook_awaiting_its_ask_s_answer_is_not_still_running(
    autojump_clock: trio.abc.Clock,
) -> None:
    bus, said, asking = Bus(), [], {"deps"}
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(serve_still_running, asking=asking.__contains__), bus, "r1", said.append
        )
        bus.publish(EventKind.HOOK_STARTED, STARTED, run_id="r1")
        await trio.sleep(STILL_RUNNING_S * 5)
        assert said == []  # its process ended; the ask's line says the run waits
        nursery.cancel_scope.cancel()


def test_the_readable_view_says_the_wait_for_an_answer_and_how_exec_exits() -> None:
    view = RunView()
    ask = {"type": "ask", "askId": "ask-1", "hook": "q", "question": "go?", "default": "no",
           "deadlineMs": 3000, "at": "2026-01-01T00:00:00.100Z"}  # fmt: skip
    assert view.lines(ask) == ["ask from q: go? (default no in 3 s; waiting for an answer)"]
    assert view.waiting_for_answer("q")
    hook = {"type": "hook", "name": "q", "on": "script", "phase": "before", "action": "run",
            "sandbox": "strict", "status": "ok", "durationMs": 169, "effect": "ask",
            "requestedEffect": "ask", "clampedBy": [], "at": "2026-01-01T00:00:03.150Z",
            "refused": {"reason": "go? (unanswered)", "failClosed": False},
            "asked": {"question": "go?", "answer": "no", "by": "deadline"}}  # fmt: skip
    first = view.lines(hook)[0]
    assert first == (
        "hook q (script.before, run, sandbox strict): ok in 169 ms, then 3.0 s waiting for"
        " an answer"
    )
    assert not view.waiting_for_answer("q")
    error = {"type": "error", "message": "refused by q: go? (unanswered)", "refusedBy": "q",
             "cause": "refused"}  # fmt: skip
    assert view.lines(error) == ["ERROR refused by q: go? (unanswered)"]  # said once
    end = {"type": "end", "exitCode": None, "durationMs": 3200}
    assert view.lines(end) == ["end: refused, exec exits 3, 3200 ms"]
    assert RunView().lines({"type": "end", "exitCode": 4, "durationMs": 9}) == [
        "end: exit code 4, 9 ms"
    ]


def test_an_end_whose_exit_code_is_not_exec_s_says_both() -> None:
    # A failure an onError hook turned into a result: the script's 4, exec's 0.
    view = RunView()
    view.lines({"type": "result", "value": 0})
    assert view.lines({"type": "end", "exitCode": 4, "durationMs": 190}) == [
        "end: exit code 4, exec exits 0, 190 ms"
    ]
    # A success an onSuccess hook refused: the script's 0, exec's 3.
    view = RunView()
    view.lines({"type": "error", "message": "refused by no: nope", "cause": "refused"})
    assert view.lines({"type": "end", "exitCode": 0, "durationMs": 9}) == [
        "end: exit code 0, exec exits 3, 9 ms"
    ]
    # Where they agree, one code.
    view = RunView()
    view.lines({"type": "error", "message": "the script exited with status 5",
                "cause": "script", "exitCode": 5})  # fmt: skip
    assert view.lines({"type": "end", "exitCode": 5, "durationMs": 9}) == ["end: exit code 5, 9 ms"]


def test_an_end_without_an_exit_code_after_a_result_says_none_in_words() -> None:
    # A cluster run whose worker was lost in a suffix hook: its result stands, its `end`
    # (the gateway's) has no exit code. Not Python's "exit code None".
    view = RunView()
    view.lines({"type": "result", "value": None})
    assert view.lines({"type": "end", "exitCode": None, "durationMs": 8244}) == [
        "end: no exit code, exec exits 0, 8244 ms"
    ]


def test_a_hook_s_run_that_failed_says_its_exit_code() -> None:
    from mcpx_hooks.supervisor.cli.view import frame_lines

    hook = {"type": "hook", "name": "r", "on": "script", "phase": "onSuccess", "action": "run",
            "sandbox": "strict", "status": "ok", "durationMs": 9, "effect": "run",
            "requestedEffect": "run", "clampedBy": [],
            "ran": {"argv": ["sh", "-c", "exit 3"], "status": "failed", "exitCode": 3,
                    "durationMs": 6}}  # fmt: skip
    assert "  ran sh -c 'exit 3': failed (exit 3) in 6 ms" in frame_lines(hook)


def test_a_session_run_reads_as_a_session_its_cancelled_call_not_as_failed() -> None:
    # `runs show` of an MCP session read "call h.wait: FAILED: cancelled by the client…"
    # (the result counts no such call as failed) and "end: no exit code, exec exits 0" (no
    # exec ran: a client's session did).
    view = RunView()
    view.lines({"type": "start", "runId": "r1", "argv": ["mcp", "claude-code"], "cwd": "/w",
                "sandbox": "workspace"})  # fmt: skip
    cancelled = {"type": "call", "id": 7, "server": "h", "tool": "wait", "argsSha256": "ab",
                 "durationMs": 4, "ok": False,
                 "error": "cancelled by the client before its answer"}  # fmt: skip
    assert view.lines(cancelled) == [
        "call h.wait: CANCELLED by the client before its answer, in 4 ms"
    ]
    ended = {**cancelled, "error": "the session ended before its answer"}
    assert view.lines(ended) == [
        "call h.wait: CANCELLED: the session ended before its answer, in 4 ms"
    ]
    view.lines({"type": "result", "value": {"calls": 1, "refused": 0, "failed": 0}})
    assert view.lines({"type": "end", "exitCode": None, "durationMs": 1220}) == [
        "end: the session ended, 1220 ms"
    ]
