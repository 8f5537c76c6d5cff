"""Observe hooks: real tiny processes run from bus events, results back on the bus, no loops."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.events import Event, EventKind, Gap
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.bus import Bus, Subscription
from mcpx_hooks.supervisor.run.observe import observes, serve_observers
from mcpx_hooks.supervisor.run.observerstats import ObserverStats

pytestmark = pytest.mark.usefixtures("no_leaks")

# Appends what the hook saw to $OUT, one JSON line per run, and answers a key its effect
# (always `off` for observe hooks) does not allow.
RECORD = """
    import json, os, sys
    seen = {"stdin": json.load(sys.stdin),
            "env": {k: v for k, v in os.environ.items() if k.startswith("MCPX_HOOK_")}}
    with open(os.environ["OUT"], "a") as f:
        f.write(json.dumps(seen) + "\\n")
    print(json.dumps({"advise": "noted"}))
"""


@pytest.fixture
async def spawner() -> AsyncIterator[Spawner]:
    async with open_spawner() as sp:
        yield sp
    assert psutil.Process().children(recursive=True) == []


def observer(tmp_path: Path, on: str, code: str = RECORD, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": f"watch-{on}",
        "on": on,
        "phase": Phase.OBSERVE,
        "action": Action.RUN,
        "target": (sys.executable, "-I", "-S", "-c", textwrap.dedent(code)),
        "declaring_dir": str(tmp_path),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.NONE,
        "timeout_ms": 5000,
        "env": {"OUT": str(tmp_path / "seen.jsonl")},
    }
    base.update(fields)
    return Hook(**base)


def event(kind: str, data: dict[str, Any] | None = None, *, by_observer: bool = False) -> Event:
    return Event(0, kind, "2026-01-01T00:00:00.000Z", data or {}, None, by_observer)


def seen(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def collect(sub: Subscription, n_finished: int) -> list[Event]:
    """Events of `sub` up to and including the `n_finished`-th `hook.finished` published by
    an observer."""
    got: list[Event] = []
    while n_finished:
        item = await sub.__anext__()
        assert not isinstance(item, Gap)
        got.append(item)
        n_finished -= item.kind == EventKind.HOOK_FINISHED and item.caused_by_observer
    return got


async def start(
    nursery: trio.Nursery, bus: Bus, spawner: Spawner, hooks: Sequence[Hook]
) -> ObserverStats:
    # One worker: runs happen in event order, so when the last expected run has finished
    # every run an earlier event could have caused has finished too.
    stats: ObserverStats = await nursery.start(
        lambda task_status: serve_observers(
            bus,
            spawner,
            hooks,
            caller_autonomy=Effect.RUN,
            supervisor_max=Effect.RUN,
            concurrency=1,
            task_status=task_status,
        )
    )
    return stats


def test_observes_matches_kind_prefix_and_when(tmp_path: Path) -> None:
    on_run = observer(tmp_path, "run")
    assert observes(on_run, event("run.finished"))
    assert not observes(on_run, event("runs.x"))
    exact = observer(tmp_path, "run.finished")
    assert observes(exact, event("run.finished"))
    assert not observes(exact, event("run.started"))
    kinds = observer(tmp_path, "run", when={"kinds": ["hook", "run.finished"]})
    assert observes(kinds, event("run.finished"))
    assert not observes(kinds, event("run.started"))
    of_runs = observer(tmp_path, "run", when={"runArgv": ["pytest", "make test*"]})
    assert observes(of_runs, event("run.finished"), ("/usr/bin/pytest", "-q"))  # basename
    assert observes(of_runs, event("run.finished"), ("make", "test", "-j4"))  # command line
    assert not observes(of_runs, event("run.finished"), ("make", "lint"))
    assert not observes(of_runs, event("run.finished"), None)  # of no run it knows
    assert not observes(on_run, event("run.finished", by_observer=True))
    assert not observes(observer(tmp_path, "run", enabled=False), event("run.finished"))
    assert not observes(observer(tmp_path, "run", phase=Phase.SUFFIX), event("run.finished"))


async def test_observer_runs_once_per_matching_event(spawner: Spawner, tmp_path: Path) -> None:
    bus = Bus()
    hook = observer(tmp_path, "run.finished")
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook"]) as results:
        stats = await start(nursery, bus, spawner, [hook])
        started = bus.publish(EventKind.RUN_STARTED, {"argv": ["job"], "cwd": "/w"}, run_id="r1")
        finished = bus.publish(EventKind.RUN_FINISHED, {"exitCode": 0}, run_id="r1")
        got = await collect(results, 1)
        nursery.cancel_scope.cancel()

    assert [e.kind for e in got] == ["hook.started", "hook.dropped", "hook.finished"]
    assert all(e.caused_by_observer and e.run_id == "r1" for e in got)
    frame = got[-1].data
    assert frame["name"] == "watch-run.finished" and frame["status"] == "ok"
    assert frame["runId"] == "r1"
    assert frame["trigger"] == {"seq": finished.seq, "kind": "run.finished"}
    # The effect is always `off` for observe hooks: the phase clamps it; its answer is dropped.
    assert (frame["effect"], frame["requestedEffect"]) == ("off", "advise")
    assert frame["clampedBy"] == ["phase"]
    assert not frame.get("advice")
    assert [d["key"] for d in frame["dropped"]] == ["advise"]
    assert got[1].data == frame

    [run] = seen(tmp_path)
    assert run["stdin"]["event"] == to_json(finished)
    # The run of the event it observes, as its `run.started` said (which no hook matches).
    assert run["stdin"]["run"] == {
        "runId": "r1",
        "argv": ["job"],
        "cwd": "/w",
        "startedAt": started.at,
    }
    assert run["stdin"]["hook"]["phase"] == "observe"
    assert run["env"]["MCPX_HOOK_EVENT_KIND"] == "run.finished"
    assert run["env"]["MCPX_HOOK_EVENT_SEQ"] == str(finished.seq)
    assert run["env"]["MCPX_HOOK_EFFECT"] == "off"
    assert stats.events == 2 and stats.runs == 1 and stats.gaps == 0  # run.started: read


async def test_observer_gets_the_event_run_id(spawner: Spawner, tmp_path: Path) -> None:
    bus = Bus()
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook"]) as results:
        await start(nursery, bus, spawner, [observer(tmp_path, "run")])
        bus.publish(EventKind.RUN_FINISHED, {}, run_id="r1")
        await collect(results, 1)
        nursery.cancel_scope.cancel()
    env = seen(tmp_path)[0]["env"]
    assert env["MCPX_HOOK_RUN_ID"] == "r1"
    assert env["MCPX_HOOK_ON"] == "run.finished"  # the event kind, not the declared prefix
    assert seen(tmp_path)[0]["stdin"]["hook"]["on"] == "run.finished"


async def test_wait_idle_returns_once_published_events_are_handled(
    spawner: Spawner, tmp_path: Path
) -> None:
    bus = Bus()
    async with trio.open_nursery() as nursery:
        stats = await start(nursery, bus, spawner, [observer(tmp_path, "run")])
        bus.publish(EventKind.RUN_FINISHED, {}, run_id="r1")
        bus.publish(EventKind.RUN_FINISHED, {}, run_id="r2")
        assert not stats.idle
        await stats.wait_idle()
        assert stats.runs == 2 and len(seen(tmp_path)) == 2
        nursery.cancel_scope.cancel()


async def test_when_kinds_filters(spawner: Spawner, tmp_path: Path) -> None:
    bus = Bus()
    hook = observer(tmp_path, "run", when={"kinds": ["run.finished"]})
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook.finished"]) as results:
        await start(nursery, bus, spawner, [hook])
        bus.publish(EventKind.RUN_STARTED, {})
        bus.publish(EventKind.RUN_FINISHED, {})
        bus.publish(EventKind.RUN_STARTED, {})
        bus.publish(EventKind.RUN_FINISHED, {})
        got = await collect(results, 2)
        nursery.cancel_scope.cancel()
    assert [e.data["trigger"]["seq"] for e in got] == [1, 3]
    assert [r["env"]["MCPX_HOOK_EVENT_SEQ"] for r in seen(tmp_path)] == ["1", "3"]


async def test_when_run_argv_follows_the_runs_command_line(
    spawner: Spawner, tmp_path: Path
) -> None:
    bus = Bus()
    hook = observer(tmp_path, "run.finished", when={"runArgv": ["pytest*"]})
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook.finished"]) as results:
        await start(nursery, bus, spawner, [hook])
        bus.publish(EventKind.RUN_STARTED, {"argv": ["make", "test"]}, run_id="r1")
        bus.publish(EventKind.RUN_STARTED, {"argv": ["pytest", "-q"]}, run_id="r2")
        bus.publish(EventKind.RUN_FINISHED, {}, run_id="r1")
        bus.publish(EventKind.RUN_FINISHED, {}, run_id="r3")  # its start was never seen
        bus.publish(EventKind.RUN_FINISHED, {}, run_id="r2")
        got = await collect(results, 1)
        nursery.cancel_scope.cancel()
    assert [e.run_id for e in got] == ["r2"]
    assert [r["env"]["MCPX_HOOK_RUN_ID"] for r in seen(tmp_path)] == ["r2"]


async def test_failing_observer_on_hook_does_not_trigger_itself(
    spawner: Spawner, tmp_path: Path
) -> None:
    bus = Bus()
    failing = observer(tmp_path, "hook", RECORD.replace("print(", "sys.exit(3) or print("))
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook"]) as results:
        stats = await start(nursery, bus, spawner, [failing])
        # Hook events as a run would publish them: not caused by an observer.
        bus.publish(EventKind.HOOK_FAILED, {"name": "deps"}, run_id="r1")
        got = await collect(results, 1)
        # Everything the first run published comes before this one on the bus; with one
        # worker, a run it had caused would have finished before this one's.
        bus.publish(EventKind.HOOK_FINISHED, {"name": "deps"}, run_id="r1")
        got += await collect(results, 1)
        nursery.cancel_scope.cancel()

    ours = [e for e in got if e.caused_by_observer]
    assert [e.kind for e in ours] == ["hook.started", "hook.failed", "hook.finished"] * 2
    assert [e.data["trigger"]["seq"] for e in ours if e.kind == "hook.finished"] == [0, 4]
    failed = ours[1].data
    assert failed["status"] == "failed" and failed["exitCode"] == 3
    assert len(seen(tmp_path)) == 2  # runs == non-observer hook events published
    assert stats.events == 2 and stats.runs == 2


async def test_broken_observer_does_not_stop_the_others(spawner: Spawner, tmp_path: Path) -> None:
    bus = Bus()
    broken = observer(tmp_path, "run", name="broken", target=(str(tmp_path / "missing"),))
    good = observer(tmp_path, "run", name="good")
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook.finished"]) as results:
        await start(nursery, bus, spawner, [broken, good])
        bus.publish(EventKind.RUN_FINISHED, {})
        got = await collect(results, 2)
        nursery.cancel_scope.cancel()
    assert {e.data["name"]: e.data["status"] for e in got} == {"broken": "failed", "good": "ok"}


async def test_no_observers_just_starts(spawner: Spawner, tmp_path: Path) -> None:
    bus = Bus()
    async with trio.open_nursery() as nursery:
        await start(nursery, bus, spawner, [observer(tmp_path, "run", enabled=False)])
        assert bus.subscriber_count == 0
        nursery.cancel_scope.cancel()


async def test_cancel_kills_a_running_observer(spawner: Spawner, tmp_path: Path) -> None:
    bus = Bus()
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    code = """
        import os, time
        with open(os.environ["READY"], "w") as f:
            f.write("up\\n")
        time.sleep(60)
    """
    hook = observer(tmp_path, "run", code, env={"READY": str(fifo)})
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        await start(nursery, bus, spawner, [hook])
        bus.publish(EventKind.RUN_FINISHED, {})
        async with await trio.open_file(fifo) as ready:
            assert await ready.readline() == "up\n"
        nursery.cancel_scope.cancel()
    assert time.monotonic() - started < 10
    # run.finished and hook.started only: a cancelled observer publishes nothing more.
    assert bus.next_seq == 2


async def test_a_busy_observer_misses_events_and_counts_the_gap(
    spawner: Spawner, tmp_path: Path
) -> None:
    bus = Bus(buffer=2)
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(ready)
    os.mkfifo(go)
    code = """
        import os
        if os.environ["MCPX_HOOK_EVENT_SEQ"] == "0":
            with open(os.environ["READY"], "w") as f:
                f.write("up\\n")
            with open(os.environ["GO"]) as f:
                f.read()
    """
    hook = observer(tmp_path, "run", code, env={"READY": str(ready), "GO": str(go)})
    async with trio.open_nursery() as nursery, bus.subscribe(kinds=["hook.finished"]) as results:
        stats = await start(nursery, bus, spawner, [hook])
        first = bus.publish(EventKind.RUN_FINISHED, {})
        async with await trio.open_file(ready) as f:
            assert await f.readline() == "up\n"
        # The only worker is busy with the first: the observers' buffer (2) takes the next
        # two and drops three. Publishing does not wait for it.
        burst = [bus.publish(EventKind.RUN_FINISHED, {}) for _ in range(5)]
        assert bus.dropped == 3
        async with await trio.open_file(go, "w") as f:
            await f.write("go\n")
        last = bus.publish(EventKind.RUN_FINISHED, {})  # read after the gap
        got = await collect(results, 4)
        nursery.cancel_scope.cancel()
    ran = [first, *burst[:2], last]
    assert [e.data["trigger"]["seq"] for e in got] == [e.seq for e in ran]
    assert (stats.gaps, stats.missed, stats.runs) == (1, 3, 4)
