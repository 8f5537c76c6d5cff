"""A run's hook phases: what the run has become so far, and the hooks of each phase run one
after another in declaration order (consecutive `parallel` ones at once, their frames still
in that order), each answer taken into the run (advice, proposals, `apply`, a refusal, an
`ask` waited on until its deadline).

A hook cut short by the run's cancellation still gets its frame, then the cancellation goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..core.changes import ChangedFiles
from ..core.effects import YES, AnsweredBy
from ..core.egress import HostsSaid
from ..core.events import EventKind
from ..core.frames import ErrorCause, blank
from ..core.hooks import Config, Hook
from ..core.points import Phase
from ..core.records import Record
from ..core.when import RunFacts, run_mismatch
from ..core.whenindex import script_hooks
from ..process.spawner import Spawner
from .asking import Asks
from .bus import Bus
from .hookcontext import HookContext, RunInfo
from .journal import RunJournal

if TYPE_CHECKING:
    from ..core.answers import Ask
    from ..core.hookframes import HookFrame
    from .hookframe import HookReport


@attrs.define(repr=False)
class RunState(Record):
    """What the run has become so far, phase by phase."""

    ctx: HookContext
    advice: list[str] = attrs.field(factory=list)
    proposals: list[dict[str, Any]] = attrs.field(factory=list)
    refused_by: str | None = None
    refusal: str | None = None
    #: `(value,)` once the run is a success; otherwise the error message.
    value: tuple[Any] | None = None
    message: str = ""
    exit_code: int | None = None
    stderr_tail: str = ""
    stdout_tail: str = ""
    #: Set where the run learns it: a timeout, a cancellation (the rest follow from the state).
    cause: ErrorCause | None = None


class PhaseHooks:
    """Runs the hooks of one phase, one after another in declaration order; consecutive
    `parallel = true` hooks at once, their frames written in declaration order when the last
    of them ends (`run_hooks`)."""

    #: The files `when.files` matches for the run (`scriptrun.changed_files`).
    changed: ChangedFiles | None = None

    def __init__(
        self,
        config: Config,
        spawner: Spawner,
        bus: Bus,
        *,
        journal: RunJournal,
        run_id: str,
        asks: Asks,
    ) -> None:
        self.config = config
        self.spawner = spawner
        self.bus = bus
        self.journal = journal
        self.run_id = run_id
        self.asks = asks
        #: The hosts an `egress` frame has named in this run (one frame per host per run).
        self.egress_said = HostsSaid()

    def of(self, phase: Phase, run: RunInfo | None = None) -> list[Hook]:
        """The hooks of `phase` that fire: enabled, and their `when` matching `run`'s (a
        hook whose `when` does not match is not run and leaves no frame). Only the hooks
        whose `when.argv` may match are checked (`whenindex.py`)."""
        index = script_hooks(self.config).get(phase)
        if index is None:
            return []
        if run is None:
            return [h for h in index.hooks if not h.when]
        facts = self._facts(run)
        return [
            h
            for h in index.candidates(run.argv)
            if not h.when or run_mismatch(h.when, facts) is None
        ]

    def _facts(self, run: RunInfo) -> RunFacts:
        return RunFacts(run.argv, run.cwd, self.changed)

    async def phase(self, phase: Phase, state: RunState) -> None:
        await self.run_hooks(self.of(phase, state.ctx.run), phase, state)

    async def run_hooks(self, hooks: list[Hook], phase: Phase, state: RunState) -> None:
        """Runs `hooks` (of `phase`, of any point) into `state`: one after another, but each
        run of consecutive `parallel` hooks at once (`_together`)."""
        for group in together_groups(hooks):
            if len(group) == 1:
                refused_by = state.refused_by if phase is Phase.ON_ERROR else None
                reports = [await self._one(group[0], state.ctx, refused_by=refused_by)]
            else:
                reports = await self._together(group, state.ctx)
            for report in reports:
                if self._take(phase, report, state):
                    return  # a refusal ends its phase: later hooks of it do not run

    async def _together(self, group: list[Hook], ctx: HookContext) -> list[HookReport]:
        """Runs `group` at once, then writes their frames in declaration order, each whole.
        Their effect in force is at most advise (the config refuses more), so none can ask,
        refuse or replace: none waits on another. Cancelled, each still gets its frame (a
        cancelled one for those cut short), in order, then the cancellation goes on."""
        frames: list[HookFrame | None] = [None] * len(group)
        reports: list[HookReport | None] = [None] * len(group)

        async def one(index: int, hook: Hook) -> None:
            def keep(frame: HookFrame) -> None:
                frames[index] = frame

            reports[index] = await self._one(hook, ctx, keep)

        try:
            async with trio.open_nursery() as nursery:
                for index, hook in enumerate(group):
                    nursery.start_soon(one, index, hook)
        finally:
            for frame in frames:
                if frame is not None:
                    self._record(frame)
        return [r for r in reports if r is not None]

    async def _one(
        self,
        hook: Hook,
        ctx: HookContext,
        record: Callable[[HookFrame], None] | None = None,
        *,
        refused_by: str | None = None,
    ) -> HookReport:
        """Runs `hook`; its frame goes to `record` (default: the journal, now). `refused_by`:
        the hook that refused the run (or the call), whose refusal an `apply` (of `onError`)
        cannot undo."""
        # The hook runners load with the first hook: a run with none never needs them.
        from .hookrun import frame_builder, run_hook

        record = record or self._record
        run_id = self.run_id
        started_data = {"name": hook.name, "on": hook.on, "phase": hook.phase.value}
        self.bus.publish(EventKind.HOOK_STARTED, started_data, run_id=run_id)
        started = time.perf_counter()
        report: HookReport | None = None
        builder = frame_builder(hook, ctx)
        try:
            report = await run_hook(self.spawner, hook, ctx, builder)
            frame = report.frame
            if frame.asked is not None and report.answer.ask is not None:
                frame = await self._resolve_ask(frame, report.answer.ask)
                report = attrs.evolve(report, frame=frame)
        except trio.Cancelled:
            # The run was cancelled while the hook ran (its tree is killed and reaped by now)
            # or while its question waited for an answer: the hook still has its frame, then
            # the cancellation goes on.
            if report is not None:
                why = "the run was cancelled while the question waited for an answer"
                record(attrs.evolve(report.frame, reason=why))
            else:
                ms = round((time.perf_counter() - started) * 1000)
                record(builder.cut_short(ms).frame)
            raise
        if refused_by is not None and frame.changed:
            frame = _unapplied(frame, refused_by)
            report = attrs.evolve(report, frame=frame)
        self._egress(hook, report)
        record(frame)
        return report

    def _egress(self, hook: Hook, report: HookReport) -> None:
        """An `egress` frame for each host the proxy refused the hook's child that no frame
        of this run has named yet."""
        from ..core.egress import blocked_message, refusal
        from ..core.hookframes import EgressFrame
        from ..core.selection import locker

        declared = f"the network of hook {hook.name} ({locker(hook)})"

        words = dict(zip((host for host, _ in report.refused), report.frame.egress, strict=False))
        self.egress_said.unsaid += report.unkept
        for host, port in report.refused:
            if self.egress_said.take(host):
                note = words.get(host)
                note = None if note == blocked_message(host) else note
                why = refusal(host, port, note, declared)
                self.journal.append(
                    blank(EgressFrame, host=host, port=port, hook=hook.name, why=why)
                )

    def _record(self, frame: HookFrame) -> None:
        """The hook's frame in the journal (which stamps it), and its events on the bus."""
        run_id = self.run_id
        wire = self.journal.append(frame)
        self.bus.publish(EventKind.HOOK_FINISHED, wire, run_id=run_id)
        if frame.status.is_failure:
            self.bus.publish(EventKind.HOOK_FAILED, wire, run_id=run_id)
        if frame.dropped:
            self.bus.publish(
                EventKind.HOOK_DROPPED,
                {"name": frame.name, "dropped": wire["dropped"]},
                run_id=run_id,
            )

    async def _resolve_ask(self, frame: HookFrame, ask: Ask) -> HookFrame:
        """Puts the `ask` frame in the stream and waits for an answer up to the deadline;
        unanswered, the default applies; "no" refuses."""
        from ..core.answers import Asked, Refusal
        from ..core.hookframes import AskFrame

        ask_id = self.asks.new_id()
        self.journal.append(
            blank(
                AskFrame,
                ask_id=ask_id,
                hook=frame.name,
                question=ask.question,
                default=ask.default,
                deadline_ms=ask.deadline_ms,
            )
        )
        settled = await self.asks.wait(ask_id, ask.default, ask.deadline_ms / 1000)
        asked = Asked(ask.question, settled.answer, settled.by)
        if settled.answer == YES:
            return attrs.evolve(frame, asked=asked)
        how = (
            f"unanswered by the deadline, default {settled.answer}"
            if settled.by is AnsweredBy.DEADLINE
            else f"answered {settled.answer} by the {settled.by}"
        )
        refusal = Refusal(f"{ask.question} ({how})", fail_closed=False)
        return attrs.evolve(frame, asked=asked, refused=refusal)

    def _take(self, phase: Phase, report: HookReport, state: RunState) -> bool:
        """What a hook's frame does to the run: advice, proposals, apply, refusal.

        Returns True when the hook refused the run."""
        frame = report.frame
        if phase is Phase.SUFFIX:
            return False  # after the outcome: it cannot change it (its effect is at most advise)
        state.advice.extend(frame.advice)
        state.proposals.extend({"hook": frame.name, **p} for p in frame.proposals)
        if frame.refused is not None:
            if state.refused_by is None:  # an onError "no" after a refusal leaves the first
                state.refused_by = frame.name
                state.refusal = frame.refused.reason
                state.value = None
                state.message = f"refused by {frame.name}: {state.refusal}"
            return True
        if not frame.changed:
            return False
        if phase is Phase.BEFORE:
            state.ctx = attrs.evolve(state.ctx, input=(frame.value,))
        elif phase is Phase.ON_SUCCESS:
            state.value = (frame.value,)
            state.ctx = attrs.evolve(state.ctx, result={"value": frame.value})
        elif phase is Phase.ON_ERROR and state.refused_by is None:
            state.value = (frame.value,)
        return False


def _unapplied(frame: HookFrame, refused_by: str) -> HookFrame:
    """`frame` with its `apply` dropped: a refusal is never turned into a result, and the
    frame says so rather than "applies"."""
    from ..core.answers import Dropped

    why = f"refused by {refused_by}: a refusal is never turned into a result"
    dropped = (*frame.dropped, Dropped("apply", why))
    return attrs.evolve(frame, changed=False, original=None, value=None, dropped=dropped)


def together_groups(hooks: list[Hook]) -> list[list[Hook]]:
    """`hooks` in runs to start together: each run of consecutive `parallel` hooks one group,
    every other hook a group of its own, in declaration order."""
    groups: list[list[Hook]] = []
    for hook in hooks:
        if hook.parallel and groups and groups[-1][-1].parallel:
            groups[-1].append(hook)
        else:
            groups.append([hook])
    return groups
