"""Observe hooks: subscribers of the event bus that run hooks after the fact.

They never hold anything up: a run publishes its events and carries on; `serve_observers`
reads them from its own subscription and hands each (event, hook) pair to a fixed pool of
workers. Their results go back on the bus as `hook.*` events marked `caused_by_observer`,
which never trigger observe hooks again (no loops).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.convert import to_json
from ..core.effects import Effect
from ..core.events import Event, EventKind, Gap, kind_matches
from ..core.frames import FrameType, HookStatus, stamp
from ..core.hooks import Hook
from ..core.points import Phase
from ..core.records import Record
from ..core.when import event_mismatch
from ..process.spawner import Spawner
from .bus import Bus
from .hookcontext import HookContext, RunInfo
from .observerstats import ObserverStats, Unwell, observe_hooks
from .telemetry import Told

if TYPE_CHECKING:
    from .hookframe import HookReport

#: How many observe hooks run at once.
DEFAULT_CONCURRENCY: Final = 8

#: How many runs' command lines the observers remember, for `when.runArgv` (the oldest
#: forgotten first: an event of a run forgotten, or whose start they missed, matches no
#: `runArgv`).
RUN_ARGV_MEMORY: Final = 1024


def observes(hook: Hook, event: Event, run_argv: Sequence[str] | None = None) -> bool:
    """Whether `hook` runs for `event`: an enabled observe hook whose `on` is the event's
    kind or a dot-boundary prefix of it, whose `when` matches (`core/when.py`: `kinds`, one
    of the kind prefixes; `runArgv`, the command line `run_argv` of the event's run), on an
    event not caused by an observe hook.
    """
    if not hook.enabled or hook.phase is not Phase.OBSERVE or event.caused_by_observer:
        return False
    if not kind_matches(event.kind, (hook.on,)):
        return False
    return event_mismatch(hook.when, event.kind, run_argv) is None


#: What a worker is handed: a hook, the event it observes, and the run of that event (if
#: its `run.started` was seen).
_Job = tuple[Hook, Event, "RunInfo | None"]


def _argv(run: RunInfo | None) -> tuple[str, ...] | None:
    return None if run is None else run.argv


@attrs.define(repr=False)
class _Runs(Record):
    """The runs started lately, from their `run.started` events: what an observe hook of an
    event of theirs gets as its input's `run`, and `when.runArgv` matches."""

    runs: dict[str, RunInfo] = attrs.field(factory=dict)

    def note(self, event: Event) -> None:
        argv, cwd = event.data.get("argv"), event.data.get("cwd")
        if event.kind != EventKind.RUN_STARTED or not event.run_id or not isinstance(argv, list):
            return
        where = cwd if isinstance(cwd, str) else ""
        info = RunInfo(event.run_id, tuple(str(a) for a in argv), where, event.at)
        self.runs[event.run_id] = info
        if len(self.runs) > RUN_ARGV_MEMORY:
            del self.runs[next(iter(self.runs))]

    def of(self, event: Event) -> RunInfo | None:
        return self.runs.get(event.run_id) if event.run_id else None


async def serve_observers(
    bus: Bus,
    spawner: Spawner,
    hooks: Sequence[Hook],
    *,
    caller_autonomy: Effect,
    supervisor_max: Effect,
    concurrency: int = DEFAULT_CONCURRENCY,
    telemetry: Told | None = None,
    withheld: frozenset[str] = frozenset(),
    task_status: trio.TaskStatus[ObserverStats] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the observe hooks among `hooks` on the bus's events, until cancelled; each
    hook's frame is also told to `telemetry` (`telemetry.py`). No hook's `passEnv` passes
    the `withheld` variables (the config's model keys, `Models.key_names`).

    Started (`task_status.started(stats)`) once subscribed: every event published after that
    is seen, unless the observers fall behind. Under load: at most `concurrency` hooks run at
    once; while all are busy no further event is taken, so the subscription's buffer (the
    bus's `buffer`, 256 by default) fills and then drops; the observers skip what was
    dropped, and `stats.gaps`/`stats.missed` count it. Events are never queued without bound.
    The observers' own `hook.*` events are not even buffered for them, so they cannot crowd
    out the events they follow.

    On cancellation the running hooks are cancelled: their process trees are killed and
    reaped before this returns, and they publish nothing more.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    observers = observe_hooks(hooks)
    stats = ObserverStats()
    if not observers:
        task_status.started(stats)
        await trio.sleep_forever()
    # `run.started` too: each run's command line and place, for the hooks of its events.
    kinds = tuple(dict.fromkeys((*(h.on for h in observers), EventKind.RUN_STARTED.value)))
    runs = _Runs()
    ctx = HookContext(
        run=None,
        caller_autonomy=caller_autonomy,
        supervisor_max=supervisor_max,
        withheld=withheld,
    )
    # Unbuffered: a pair is handed over only when a worker is free to run it.
    send, receive = trio.open_memory_channel[_Job](0)
    async with trio.open_nursery() as nursery, send, receive:
        for _ in range(concurrency):
            work = functools.partial(_work, telemetry=telemetry)
            nursery.start_soon(work, bus, spawner, ctx, receive.clone(), stats)
        async with bus.subscribe(kinds=kinds, skip_observer_caused=True) as sub:
            stats._sub = sub
            task_status.started(stats)
            try:
                async for item in sub:
                    stats._settle(+1)  # handing over: not idle until every match is taken
                    if isinstance(item, Gap):
                        stats.gaps += 1
                        stats.missed += item.to_seq - item.from_seq + 1
                    else:
                        stats.events += 1
                        runs.note(item)
                        for hook in observers:
                            if observes(hook, item, _argv(runs.of(item))):
                                stats._settle(+1)
                                await _hand_over(send, hook, item, runs.of(item), stats)
                    stats._settle(-1)
            finally:
                stats.unread = sub.pending


async def _hand_over(
    send: trio.MemorySendChannel[_Job],
    hook: Hook,
    event: Event,
    run: RunInfo | None,
    stats: ObserverStats,
) -> None:
    try:
        await send.send((hook, event, run))
    except trio.Cancelled:
        stats._note(
            stats.cut_short,
            Unwell(hook.name, event.kind, HookStatus.KILLED, "it had not started yet"),
        )
        raise


async def _work(
    bus: Bus,
    spawner: Spawner,
    ctx: HookContext,
    jobs: trio.MemoryReceiveChannel[_Job],
    stats: ObserverStats,
    *,
    telemetry: Told | None,
) -> None:
    async with jobs:
        async for hook, event, run in jobs:
            try:
                of_run = ctx if run is None else attrs.evolve(ctx, run=run)
                failure = await _observe(bus, spawner, hook, event, of_run, telemetry=telemetry)
            except trio.Cancelled:
                stats._note(
                    stats.cut_short,
                    Unwell(hook.name, event.kind, HookStatus.KILLED, "it was still running"),
                )
                raise
            finally:
                stats.runs += 1
                stats._settle(-1)
            if failure is not None:
                stats._note(stats.failed, Unwell(hook.name, event.kind, *failure))


async def _observe(
    bus: Bus,
    spawner: Spawner,
    hook: Hook,
    event: Event,
    ctx: HookContext,
    *,
    telemetry: Told | None,
) -> tuple[str, str] | None:
    """Runs one observe hook on one event and publishes what happened; returns its status
    and why, when it failed."""
    trigger = {"seq": event.seq, "kind": event.kind}

    def publish(kind: EventKind, data: Mapping[str, Any]) -> None:
        bus.publish(
            kind, {**data, "trigger": trigger}, run_id=event.run_id, caused_by_observer=True
        )

    publish(
        EventKind.HOOK_STARTED,
        {"name": hook.name, "on": hook.on, "phase": hook.phase.value, "action": hook.action},
    )
    from .hookrun import run_hook  # with the first observe hook: a run with none never needs it

    try:
        report = await run_hook(spawner, hook, attrs.evolve(ctx, event=to_json(event)))
    except OSError as exc:
        # run_hook describes a broken hook in its frame; what is left is the host failing
        # around it (no scratch directory, no file descriptors). Report it and carry on.
        publish(
            EventKind.HOOK_FAILED,
            {"name": hook.name, "status": HookStatus.FAILED.value, "reason": str(exc)},
        )
        return HookStatus.FAILED, str(exc)
    frame = _frame_json(report, event)
    if report.frame.status.is_failure:
        publish(EventKind.HOOK_FAILED, frame)
    if report.frame.dropped:
        publish(EventKind.HOOK_DROPPED, frame)
    publish(EventKind.HOOK_FINISHED, frame)
    if telemetry is not None:
        telemetry(FrameType.HOOK, frame)
    if report.frame.status.is_failure:
        return report.frame.status, report.frame.reason or ""
    return None


def _frame_json(report: HookReport, event: Event) -> dict[str, Any]:
    # The hook ran outside any run's journal: its frame is stamped here, with the run of the
    # event it observed.
    return to_json(stamp(report.frame, event.run_id or "", 0))
