"""The run's timing decisions in virtual time (`autojump_clock`): a script's tool call cut
at its server's `callTimeoutMs`, calls served one after another, a plugin hook cut at its own
`timeoutMs` (never the server's `callTimeoutMs`), an `ask` settled by its default at its
deadline, and the observers waited for at most `[observe] drainMs`. None of these needs a
real process: a tool server here is a stand-in whose calls take a chosen time, so each
decision is asserted at the exact virtual time it must happen.

Timing that rides on a real process stays in real time where the process is the point: a
hook's or a script's timeout and the SIGTERM-to-SIGKILL grace (`test_hookrun.py`,
`test_adversarial.py`), a server's start timeout, idle stop and kill grace
(`test_servers.py`), the spawner's bounds (`test_spawn.py`). The server's backoff, the ask's
own wait and a prompt hook's timeout are in virtual time in `test_servers.py`,
`test_asking.py` and `test_prompt_run.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing
from mcp import types
from prompting import config, private_state

from mcpx_hooks.supervisor.core.effects import AnsweredBy, Effect
from mcpx_hooks.supervisor.core.events import EventKind
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Config, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.asking import Asks
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.calls import ScriptCalls
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookrun import run_hook
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.observe import serve_observers
from mcpx_hooks.supervisor.run.phases import PhaseHooks, RunState
from mcpx_hooks.supervisor.run.runtime import Runtime
from mcpx_hooks.supervisor.tools.serverentry import ServerEntry
from mcpx_hooks.supervisor.tools.servers import ServerManager, ToolServers

state = pytest.fixture(autouse=True)(private_state)

RUN = RunInfo("r1", ("python3", "job.py"), "/tmp", "2026-01-01T00:00:00Z")
#: No process anywhere here: the hooks are plugin and prompt hooks, the servers stand-ins.
NO_SPAWNER = cast(Spawner, object())


@attrs.define
class SlowServer:
    """A tool server stand-in (what `ToolServers.manager` is asked): each call answers
    `answer` after `delay_s` of (virtual) time; when each call began, ended and was
    cancelled is noted."""

    delay_s: float
    answer: Any = attrs.field(factory=lambda: {"ok": True})
    began: list[float] = attrs.field(factory=list)
    ended: list[float] = attrs.field(factory=list)
    cancelled: list[float] = attrs.field(factory=list)
    entries: dict[ServerSpec, ServerEntry] = attrs.field(factory=dict)

    async def call(
        self,
        spec: ServerSpec,
        tool: str,
        args: Mapping[str, Any],
        *,
        run_id: str | None = None,
        progress: object = None,
        log: object = None,
        meta: object = None,
    ) -> tuple[types.CallToolResult, ServerEntry]:
        self.began.append(trio.current_time())
        try:
            await trio.sleep(self.delay_s)
        except trio.Cancelled:
            self.cancelled.append(trio.current_time())
            raise
        self.ended.append(trio.current_time())
        result = types.CallToolResult(content=[], structured_content=self.answer, is_error=False)
        return result, ServerEntry(spec)


def tool_servers(server: SlowServer, call_timeout_ms: int = 60_000) -> ToolServers:
    spec = ServerSpec("h", ("unused",), "/", sandbox=Profile.NONE, call_timeout_ms=call_timeout_ms)
    return ToolServers(cast(ServerManager, server), {"h": spec})


def plugin(timeout_ms: int, effect: Effect = Effect.ADVISE) -> Hook:
    return Hook(
        name="p",
        on="script",
        phase=Phase.BEFORE,
        action=Action.PLUGIN,
        target="h.wait",
        declaring_dir="/",
        source=Provenance(SourceKind.COMMAND_LINE),
        args={},
        timeout_ms=timeout_ms,
        effect=effect,
    )


def phase_hooks(journal: RunJournal, *hooks: Hook, asks: Asks | None = None) -> PhaseHooks:
    return PhaseHooks(
        Config(hooks=hooks),
        NO_SPAWNER,
        Bus(),
        journal=journal,
        run_id="r1",
        asks=asks or Asks(),
    )


# ---- a script's tool calls: callTimeoutMs ------------------------------------------------------


async def calls_answered(
    server: SlowServer, lines: list[dict[str, Any]], call_timeout_ms: int
) -> list[tuple[float, dict[str, Any]]]:
    """Submits `lines` as a script's call lines at time 0; each answer line with the virtual
    time it came at."""
    journal = RunJournal("r1")
    ctx = HookContext(RUN, servers=tool_servers(server, call_timeout_ms))
    calls = ScriptCalls(config=Config(), hooks=phase_hooks(journal), ctx=ctx, journal=journal)
    send, receive = trio.testing.memory_stream_one_way_pair()
    start = trio.current_time()
    got: list[tuple[float, dict[str, Any]]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(calls.serve, send)
        for line in lines:
            calls.submit(line)
        buffered = b""
        while len(got) < len(lines):
            buffered += await receive.receive_some()
            *complete, buffered = buffered.split(b"\n")
            got += [(trio.current_time() - start, json.loads(c)) for c in complete]
        nursery.cancel_scope.cancel()
    return got


async def test_a_script_call_is_cut_at_its_call_timeout_exactly_and_cancelled_on_the_server(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = SlowServer(delay_s=3600)
    (answered,) = await calls_answered(server, [{"type": "call", "id": 1, "tool": "h.wait"}], 250)
    at, line = answered
    assert at == pytest.approx(0.25)
    assert line == {
        "id": 1,
        "ok": False,
        "error": "the call took longer than callTimeoutMs (250 ms); it was cancelled on the server",
    }
    assert server.cancelled == [pytest.approx(0.25 + server.began[0])]
    assert server.ended == []


async def test_a_script_call_answered_within_its_call_timeout_gets_its_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = SlowServer(delay_s=0.2, answer={"n": 7})
    (answered,) = await calls_answered(server, [{"type": "call", "id": 1, "tool": "h.wait"}], 250)
    assert answered == (pytest.approx(0.2), {"id": 1, "ok": True, "value": {"n": 7}})
    assert server.cancelled == []


async def test_script_calls_are_served_one_after_another_each_with_its_own_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = SlowServer(delay_s=3600)
    lines = [{"type": "call", "id": n, "tool": "h.wait"} for n in (1, 2, 3)]
    answered = await calls_answered(server, lines, 250)
    assert [(at, line["id"], line["ok"]) for at, line in answered] == [
        (pytest.approx(0.25), 1, False),
        (pytest.approx(0.5), 2, False),
        (pytest.approx(0.75), 3, False),
    ]
    # Each call began when the one before it was cut: never two at once.
    began = [b - server.began[0] for b in server.began]
    assert began == [pytest.approx(0), pytest.approx(0.25), pytest.approx(0.5)]


# ---- a plugin hook: its own timeoutMs ----------------------------------------------------------


async def test_a_plugin_hook_is_cut_at_its_timeout_ms_exactly_not_at_call_timeout_ms(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = SlowServer(delay_s=3600)
    # The server's callTimeoutMs (100 ms) bounds a script's calls, not a plugin hook's.
    ctx = HookContext(RUN, servers=tool_servers(server, call_timeout_ms=100))
    start = trio.current_time()
    frame = (await run_hook(NO_SPAWNER, plugin(timeout_ms=2000), ctx)).frame
    assert trio.current_time() - start == pytest.approx(2.0)
    assert frame.status is HookStatus.TIMEOUT
    assert frame.reason == (
        "the tool call timed out after 2000 ms; it was cancelled on the server"
        " (notifications/cancelled)"
    )
    assert server.cancelled == [pytest.approx(start + 2.0)]


async def test_a_plugin_hook_answered_before_its_timeout_ms_is_ok_when_it_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = SlowServer(delay_s=1.999, answer={"advise": "in time"})
    ctx = HookContext(RUN, servers=tool_servers(server))
    start = trio.current_time()
    report = await run_hook(NO_SPAWNER, plugin(timeout_ms=2000), ctx)
    assert trio.current_time() - start == pytest.approx(1.999)
    assert report.frame.status is HookStatus.OK and report.answer.advice == ("in time",)


# ---- an ask: its default at its deadline -------------------------------------------------------


def asking(default: str, deadline_ms: int) -> SlowServer:
    """A server whose tool answers at once with an `ask` of that default and deadline."""
    question = {"question": "go on?", "default": default, "deadlineMs": deadline_ms}
    return SlowServer(delay_s=0, answer={"ask": question})


@pytest.mark.parametrize(("default", "refused"), [("no", True), ("yes", False)])
async def test_an_unanswered_ask_takes_its_default_at_its_deadline_exactly(
    autojump_clock: trio.testing.MockClock, default: str, refused: bool
) -> None:
    journal = RunJournal("r1")
    hook = plugin(timeout_ms=5000, effect=Effect.ASK)
    hooks = phase_hooks(journal, hook)
    run = RunState(HookContext(RUN, servers=tool_servers(asking(default, 1500))))
    start = trio.current_time()
    await hooks.phase(Phase.BEFORE, run)
    assert trio.current_time() - start == pytest.approx(1.5)
    ask, frame = journal.frames
    assert (ask["type"], ask["deadlineMs"], ask["default"]) == ("ask", 1500, default)
    assert frame["asked"] == {"question": "go on?", "answer": default, "by": "deadline"}
    if refused:
        assert run.refused_by == "p"
        assert run.refusal == "go on? (unanswered by the deadline, default no)"
    else:
        assert run.refused_by is None


async def test_an_ask_answered_before_its_deadline_is_settled_when_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = RunJournal("r1")
    asks = Asks()
    hooks = phase_hooks(journal, plugin(timeout_ms=5000, effect=Effect.ASK), asks=asks)
    run = RunState(HookContext(RUN, servers=tool_servers(asking("no", 60_000))))
    start = trio.current_time()

    async def answer_after(seconds: float) -> None:
        await trio.sleep(seconds)
        assert asks.answer("ask-1", "yes", AnsweredBy.CLIENT) is None

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_after, 0.7)
        await hooks.phase(Phase.BEFORE, run)
    assert trio.current_time() - start == pytest.approx(0.7)
    assert run.refused_by is None
    assert journal.frames[-1]["asked"]["by"] == "client"


async def test_a_plugin_hook_cut_short_by_the_runs_cancellation_names_no_process_tree(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A plugin hook has no process of its own: its frame does not say a tree was killed.
    journal = RunJournal("r1")
    hooks = phase_hooks(journal, plugin(timeout_ms=60_000))
    run = RunState(HookContext(RUN, servers=tool_servers(SlowServer(delay_s=3600))))
    with trio.move_on_after(1.0):
        await hooks.phase(Phase.BEFORE, run)
    (frame,) = journal.frames
    assert (frame["status"], frame["reason"]) == (
        "killed",
        "the run was cancelled while the hook ran",
    )


# ---- the observers: [observe] drainMs ----------------------------------------------------------


async def test_the_observers_are_waited_for_at_most_drain_ms(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # An observer that takes far longer than the drain bound: a real process sleeping (a
    # prompt hook observes without asking its model now: its answer could not be used).
    observer = {
        "name": "watch",
        "on": "run.finished",
        "phase": "observe",
        "run": ["sleep", "30"],
        "timeoutMs": 60_000,
    }
    cfg = config(tmp_path, observer, observe={"drainMs": 750})
    bus = Bus()
    # The clock jumps only once the spawner has started (its report is read within a bound
    # that a jump would end at once).
    autojump_clock.autojump_threshold = math.inf
    async with open_spawner() as spawner, trio.open_nursery() as nursery:
        autojump_clock.autojump_threshold = 0
        stats = await nursery.start(
            lambda task_status: serve_observers(
                bus,
                spawner,
                cfg.hooks,
                caller_autonomy=Effect.RUN,
                supervisor_max=Effect.RUN,
                task_status=task_status,
            )
        )
        runtime = Runtime(cfg, spawner, bus, journals=cast(Any, None), observers=stats)
        bus.publish(EventKind.RUN_FINISHED, {"status": "ok"}, run_id="r1")
        start = trio.current_time()
        await runtime.wait_observers()
        # The hook's own timeout (60 s) is far off: the drain bound ended the wait.
        assert trio.current_time() - start == pytest.approx(0.75)
        assert not stats.idle and stats.events == 1
        nursery.cancel_scope.cancel()
    assert [u.name for u in stats.cut_short] == ["watch"]
