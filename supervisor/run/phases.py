"""A run's hook phases: what the run has become so far, and the hooks of each phase run one
after another in declaration order, each answer taken into the run (advice, proposals,
`apply`, a refusal, an `ask` waited on until its deadline).

A hook cut short by the run's cancellation still gets its frame, then the cancellation goes on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from ..core.answers import Refusal
from ..core.events import EventKind
from ..core.frames import ErrorCause, HookFrame
from ..core.hooks import Config, Hook
from ..core.points import Phase
from ..process.spawner import Spawner
from .bus import Bus
from .hookcontext import HookContext
from .hookrun import HookReport, cancelled_report, run_hook
from .journal import RunJournal

#: Who answers an `ask`: returns "yes"/"no", or None when nobody answered in time.
Asker = Callable[[str, HookFrame, float], Awaitable[str | None]]


async def nobody_answers(question: str, frame: HookFrame, deadline: float) -> str | None:
    """In-process runs have nobody to ask: the deadline passes, the default decides."""
    await trio.sleep(deadline)
    return None


@attrs.define
class RunState:
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
    """Runs the hooks of one phase, one after another in declaration order."""

    def __init__(
        self,
        config: Config,
        spawner: Spawner,
        bus: Bus,
        *,
        journal: RunJournal,
        run_id: str,
        asker: Asker,
    ) -> None:
        self.config = config
        self.spawner = spawner
        self.bus = bus
        self.journal = journal
        self.run_id = run_id
        self.asker = asker

    def of(self, phase: Phase) -> list[Hook]:
        return [h for h in self.config.hooks if h.on == "script" and h.phase is phase and h.enabled]

    async def phase(self, phase: Phase, state: RunState) -> None:
        for hook in self.of(phase):
            report = await self._one(hook, state.ctx)
            if self._take(phase, report, state):
                return  # a refusal ends its phase: later hooks of it do not run

    async def _one(self, hook: Hook, ctx: HookContext) -> HookReport:
        run_id = self.run_id
        started_data = {"name": hook.name, "on": hook.on, "phase": hook.phase.value}
        self.bus.publish(EventKind.HOOK_STARTED, started_data, run_id=run_id)
        started = time.perf_counter()
        try:
            report = await run_hook(self.spawner, hook, ctx)
            frame = report.frame
            if frame.ask is not None and frame.refused is None:
                frame = await self._resolve_ask(frame)
                report = attrs.evolve(report, frame=frame)
        except trio.Cancelled:
            # The run was cancelled while the hook ran (its tree is killed and reaped by now)
            # or while it waited for an answer: the hook still has its frame, then the
            # cancellation goes on.
            ms = round((time.perf_counter() - started) * 1000)
            self._record(cancelled_report(hook, ctx, ms).frame)
            raise
        self._record(frame)
        return report

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

    async def _resolve_ask(self, frame: HookFrame) -> HookFrame:
        """Waits for an answer up to the deadline; unanswered or "no" refuses."""
        asked = frame.ask
        assert asked is not None
        deadline = asked.deadline_ms / 1000
        answer = None
        with trio.move_on_after(deadline):
            answer = await self.asker(asked.question, frame, deadline)
        decided = answer or asked.default
        ask = attrs.evolve(asked, answer=decided, answered=answer is not None)
        if decided == "yes":
            return attrs.evolve(frame, ask=ask)
        how = "answered no" if answer is not None else f"unanswered, default {asked.default}"
        refusal = Refusal(f"{asked.question} ({how})", fail_closed=False)
        return attrs.evolve(frame, ask=ask, refused=refusal)

    def _take(self, phase: Phase, report: HookReport, state: RunState) -> bool:
        """What a hook's frame does to the run: advice, proposals, apply, refusal.

        Returns True when the hook refused the run."""
        frame = report.frame
        if phase is Phase.SUFFIX:
            return False  # after the outcome: it cannot change it (its effect is at most advise)
        state.advice.extend(frame.advice)
        state.proposals.extend({"hook": frame.name, **p} for p in frame.proposals)
        if frame.refused is not None:
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
