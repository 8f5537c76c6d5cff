"""One script run with the `script` point's hooks around it, as frames in their fixed order.

`execute` never raises for anything a script or hook does: every outcome ends in exactly one
`result` or `error` frame, then the `suffix` hooks, then `end`. Cancellation (`Run.cancel`, or
the caller's scope) ends the run in `error` ("cancelled"); the suffix hooks still run and
`end` is still sent, under a shielded scope bounded by the hooks' own timeouts.
"""

from __future__ import annotations

import json
import os
import site
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from . import sandbox
from .bus import Bus, EventKind
from .effects import Effect
from .errors import ProfileUnavailable, SpawnError
from .frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    HookFrame,
    ResultFrame,
    StartFrame,
    WarningFrame,
    blank,
    now_rfc3339,
)
from .hookrun import HookContext, HookReport, RunInfo, cancelled_report, new_run_id, run_hook
from .hooks import PROCESS_ACTIONS, Config, Hook, Profile
from .journal import RunJournal
from .points import Phase
from .scratch import scratch_dir
from .script import (
    Script,
    ScriptOutcome,
    artifact_frames,
    run_script,
    script_argv,
    script_environment,
)
from .spawn import ChildSpec, Spawner

#: A script's timeout when the request names none.
DEFAULT_SCRIPT_TIMEOUT_MS: Final = 3_600_000
SCRIPT_KILL_GRACE_MS: Final = 500
#: How much of the script's stderr `onError` hooks get as `error.stderrTail`.
STDERR_TAIL_IN_ERROR: Final = 4096

#: Who answers an `ask`: returns "yes"/"no", or None when nobody answered in time.
Asker = Callable[[str, HookFrame, float], Awaitable[str | None]]


async def nobody_answers(question: str, frame: HookFrame, deadline: float) -> str | None:
    """In-process runs have nobody to ask: the deadline passes, the default decides."""
    await trio.sleep(deadline)
    return None


@attrs.frozen
class RunRequest:
    script: Script
    cwd: str
    stdin: bytes = b""
    #: `(value,)` when the request has an input (so `null` is a value).
    input: tuple[Any] | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    timeout_ms: int = DEFAULT_SCRIPT_TIMEOUT_MS
    #: The caller's `hooks.autonomy`; it can only lower the config's.
    autonomy: Effect | None = None
    sandbox: Profile | None = None
    sources: Mapping[Phase, tuple[str, ...]] = attrs.field(factory=dict)
    run_id: str = attrs.field(factory=new_run_id)
    #: Whether `cwd` is the operator's grant (docs/sandbox.md): true for `exec`; for the
    #: service, only within the directory it serves from.
    cwd_granted: bool = True


@attrs.define
class _State:
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


class Run:
    """A run in progress: its journal, and a handle to cancel it."""

    def __init__(self, request: RunRequest, journal: RunJournal) -> None:
        self.request = request
        self.journal = journal
        self.cancel_scope = trio.CancelScope()

    def cancel(self) -> None:
        self.cancel_scope.cancel()


async def execute(
    run: Run,
    *,
    config: Config,
    spawner: Spawner,
    bus: Bus,
    asker: Asker = nobody_answers,
) -> None:
    """Runs `run.request` to its `end` frame; see the module docstring for the guarantees."""
    req = run.request
    started = time.perf_counter()
    profile = req.sandbox or config.script_sandbox
    caller = min(req.autonomy, config.autonomy_hooks) if req.autonomy else config.autonomy_hooks
    info = RunInfo(req.run_id, req.script.shown_argv, req.cwd, now_rfc3339())
    state = _State(
        HookContext(info, caller, config.autonomy_max, input=req.input, cwd_granted=req.cwd_granted)
    )
    hooks = _Hooks(config, spawner, bus, run, asker)
    run.journal.append(blank(StartFrame, argv=info.argv, cwd=req.cwd, sandbox=profile.value))
    bus.publish(EventKind.RUN_STARTED, {"argv": list(info.argv)}, run_id=req.run_id)
    state.ctx = attrs.evolve(state.ctx, warned=_warn_unavailable(run, config, spawner, profile))
    with run.cancel_scope:
        await _body(run, state, hooks, profile)
    if run.cancel_scope.cancelled_caught:
        state.value, state.message = None, "cancelled"
    with trio.CancelScope(shield=True):
        outcome = _outcome_frame(state)
        run.journal.append(outcome)
        ctx = attrs.evolve(
            state.ctx,
            outcome="success" if state.value is not None else "error",
            result={"value": state.value[0]} if state.value is not None else None,
            error=None if state.value is not None else _error_input(state),
        )
        await hooks.phase(Phase.SUFFIX, attrs.evolve(state, ctx=ctx))
        duration = round((time.perf_counter() - started) * 1000)
        run.journal.append(blank(EndFrame, exit_code=state.exit_code, duration_ms=duration))
        bus.publish(
            EventKind.RUN_FINISHED,
            {"outcome": outcome.type.value, "exitCode": state.exit_code, "durationMs": duration},
            run_id=req.run_id,
        )


async def _body(run: Run, state: _State, hooks: _Hooks, profile: Profile) -> None:
    await hooks.phase(Phase.BEFORE, state)
    if state.refused_by is None:
        await _run_script(run, state, hooks.spawner, profile, hooks.config)
    landing = Phase.ON_SUCCESS if state.value is not None else Phase.ON_ERROR
    if state.value is not None:
        state.ctx = attrs.evolve(state.ctx, result={"value": state.value[0]})
    else:
        state.ctx = attrs.evolve(state.ctx, error=_error_input(state))
    await hooks.phase(landing, state)


async def _run_script(
    run: Run, state: _State, spawner: Spawner, profile: Profile, config: Config
) -> None:
    req = run.request
    with scratch_dir("run-") as scratch:
        artifacts = os.path.join(scratch, "artifacts")
        os.mkdir(artifacts)
        input_path = None
        if state.ctx.input is not None:
            input_path = os.path.join(scratch, "input.json")
            _write(input_path, json.dumps(state.ctx.input[0]))
        plan_path = os.path.join(scratch, "plan.json")
        if req.script.argv is None:
            _write(plan_path, json.dumps(_plan(req)))
        try:
            rlimits, confinement = sandbox.plan(
                profile,
                spawner,
                scratch=scratch,
                dirs=(req.cwd,),
                workdir=req.cwd,
                granted=(req.cwd,) if req.cwd_granted else (),
                paths=config.sandbox_paths,
                limits=config.limits,
                return_scratch=True,
            )
            spec = ChildSpec(
                script_argv(req.script, plan_path),
                req.cwd,
                script_environment(scratch, artifacts, req.env, input_path),
                rlimits,
                confinement,
            )
            sandbox.check_program(
                spec.argv[0], cwd=req.cwd, env=spec.env, plan=confinement, profile=profile
            )
            outcome = ScriptOutcome()
            with trio.move_on_after(req.timeout_ms / 1000) as deadline:
                await run_script(
                    spawner,
                    spec,
                    outcome,
                    stdin=req.stdin,
                    kill_grace=SCRIPT_KILL_GRACE_MS / 1000,
                    journal=run.journal,
                )
            outcome.timed_out = deadline.cancelled_caught
        except SpawnError as exc:
            warned = isinstance(exc, ProfileUnavailable) and exc.profile in state.ctx.warned
            said = exc.short if isinstance(exc, ProfileUnavailable) and warned else str(exc)
            state.message = f"the script could not start: {said}"
            return
        if run.journal.dropped_frames:
            run.journal.append(_dropped_note(run.journal))
        for frame in await trio.to_thread.run_sync(artifact_frames, artifacts):
            run.journal.append(frame)
        process = outcome.process
        state.exit_code = process.exit_code
        if outcome.succeeded:
            state.value = (outcome.result_value(python=req.script.argv is None),)
        elif outcome.timed_out:
            state.message = f"the script timed out after {req.timeout_ms} ms; its tree was killed"
        elif outcome.exception:
            state.message = outcome.exception
        elif process.lost:
            state.message = (
                "the spawner died while the script ran, and the script's tree with it; a new "
                "spawner serves the next run (this one is not retried)"
            )
        elif process.signal is not None:
            state.message = f"the script was killed by signal {process.signal}"
        else:
            state.message = f"the script exited with status {process.exit_code}"
        state.stderr_tail = bytes(process.stderr_tail[-STDERR_TAIL_IN_ERROR:]).decode(
            errors="replace"
        )


def _warn_unavailable(
    run: Run, config: Config, spawner: Spawner, profile: Profile
) -> frozenset[str]:
    """One `warning` frame for each profile the run needs (its own, its hooks') that this
    machine cannot enforce, with the whole message; the profiles warned of."""
    needed = [profile] + [
        h.sandbox
        for h in config.hooks
        if h.on == "script" and h.enabled and h.action in PROCESS_ACTIONS
    ]
    warned: set[str] = set()
    for each in dict.fromkeys(needed):
        try:
            sandbox.require(each, spawner)
        except ProfileUnavailable as exc:
            run.journal.append(blank(WarningFrame, message=str(exc)))
            warned.add(each.value)
    return frozenset(warned)


def _plan(req: RunRequest) -> dict[str, Any]:
    return {
        "file": os.path.join(req.cwd, req.script.python_file) if req.script.python_file else None,
        "code": req.script.python_code,
        "sources": {phase.value: list(lines) for phase, lines in req.sources.items()},
        "paths": site.getsitepackages(),
    }


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class _Hooks:
    """Runs the hooks of one phase, one after another in declaration order."""

    def __init__(self, config: Config, spawner: Spawner, bus: Bus, run: Run, asker: Asker) -> None:
        self.config = config
        self.spawner = spawner
        self.bus = bus
        self.run = run
        self.asker = asker

    def of(self, phase: Phase) -> list[Hook]:
        return [h for h in self.config.hooks if h.on == "script" and h.phase is phase and h.enabled]

    async def phase(self, phase: Phase, state: _State) -> None:
        for hook in self.of(phase):
            report = await self._one(hook, state.ctx)
            if self._take(phase, report, state):
                return  # a refusal ends its phase: later hooks of it do not run

    async def _one(self, hook: Hook, ctx: HookContext) -> HookReport:
        run_id = self.run.request.run_id
        self.bus.publish(EventKind.HOOK_STARTED, {"name": hook.name}, run_id=run_id)
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
        """The hook's frame in the journal, and its events on the bus."""
        run_id = self.run.request.run_id
        wire = self.run.journal.append(frame)
        self.bus.publish(EventKind.HOOK_FINISHED, wire, run_id=run_id)
        if frame.status.is_failure:
            self.bus.publish(EventKind.HOOK_FAILED, wire, run_id=run_id)
        if frame.dropped:
            self.bus.publish(
                EventKind.HOOK_DROPPED,
                {"name": frame.name, "dropped": list(frame.dropped)},
                run_id=run_id,
            )

    async def _resolve_ask(self, frame: HookFrame) -> HookFrame:
        """Waits for an answer up to the deadline; unanswered or "no" refuses."""
        assert frame.ask is not None
        question, default = frame.ask["question"], frame.ask["default"]
        deadline = frame.ask["deadlineMs"] / 1000
        answer = None
        with trio.move_on_after(deadline):
            answer = await self.asker(question, frame, deadline)
        ask = {**frame.ask, "answer": answer or default, "answered": answer is not None}
        if (answer or default) == "yes":
            return attrs.evolve(frame, ask=ask)
        how = "answered no" if answer is not None else f"unanswered, default {default}"
        return attrs.evolve(
            frame, ask=ask, refused={"reason": f"{question} ({how})", "failClosed": False}
        )

    def _take(self, phase: Phase, report: HookReport, state: _State) -> bool:
        """What a hook's frame does to the run: advice, proposals, apply, refusal.

        Returns True when the hook refused the run."""
        frame = report.frame
        if phase is Phase.SUFFIX:
            return False  # after the outcome: it cannot change it (its effect is at most advise)
        state.advice.extend(frame.advice)
        state.proposals.extend({"hook": frame.name, **p} for p in frame.proposals)
        if frame.refused is not None:
            state.refused_by = frame.name
            state.refusal = str(frame.refused["reason"])
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


def _outcome_frame(state: _State) -> Frame:
    if state.value is not None:
        return blank(
            ResultFrame,
            value=state.value[0],
            advice=tuple(state.advice),
            proposals=tuple(state.proposals),
        )
    return blank(
        ErrorFrame,
        message=state.message,
        exit_code=state.exit_code,
        advice=tuple(state.advice),
        refused_by=state.refused_by,
    )


def _error_input(state: _State) -> dict[str, Any]:
    error: dict[str, Any] = {"message": state.message}
    if state.exit_code is not None:
        error["exitCode"] = state.exit_code
    if state.stderr_tail:
        error["stderrTail"] = state.stderr_tail
    return error


def _dropped_note(journal: RunJournal) -> Frame:
    return blank(
        WarningFrame,
        message=f"output over the run's budget: {journal.dropped_frames} frames "
        f"({journal.dropped_bytes} bytes) dropped",
    )
