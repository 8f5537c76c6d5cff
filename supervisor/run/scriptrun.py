"""One script run with the `script` point's hooks around it, as frames in their fixed order.

`execute` never raises for anything a script or hook does: every outcome ends in exactly one
`result` or `error` frame, then the `suffix` hooks, then `end`. Cancellation (`Run.cancel`, or
the caller's scope) ends the run in `error` ("cancelled"); the suffix hooks still run and
`end` is still sent, under a shielded scope bounded by the hooks' own timeouts (or cut
short: `Run.ending_scope`).
"""

from __future__ import annotations

import json
import os
import site
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.amounts import shown_size
from ..core.changes import ChangedFiles
from ..core.effects import Effect
from ..core.errors import ProfileUnavailable, SpawnError
from ..core.events import EventKind
from ..core.frames import EndFrame, ErrorCause, StartFrame, WarningFrame, blank, now_rfc3339
from ..core.hooks import Config, Profile, caller_autonomy
from ..core.kinds import HOOK_KINDS
from ..core.passenv import Passed, pass_environment
from ..core.points import Phase
from ..core.records import Record
from ..core.redact import Redactor
from ..core.scripts import Script
from ..core.servers import server_secrets
from ..models.promptrun import PromptRun, artifact_frames
from ..process import programs, sandbox
from ..process.egress import Lease
from ..process.egresschild import egress_spec, open_egress, refusal_frames
from ..process.scratch import scratch_dir
from ..process.spawner import Spawner
from ..process.spawnspec import ChildSpec
from .artifacts import ArtifactStore
from .asking import Asks
from .bus import Bus
from .calls import ScriptCalls
from .hookcontext import HookContext, RunInfo, hook_secrets, new_run_id
from .journal import RunJournal
from .outcomeframe import error_input, outcome_frame
from .phases import PhaseHooks, RunState
from .script import ScriptOutcome, run_script, script_argv, script_environment

if TYPE_CHECKING:
    from ..tools.servers import ServerManager

#: A script's timeout when the request names none.
DEFAULT_SCRIPT_TIMEOUT_MS: Final = 3_600_000
SCRIPT_KILL_GRACE_MS: Final = 500
#: How much of the script's stderr `onError` hooks get as `error.stderrTail`.
STDERR_TAIL_IN_ERROR: Final = 4096
#: How much of the script's stdout they get as `error.stdoutTail` (a test runner's failures).
STDOUT_TAIL_IN_ERROR: Final = 8192


@attrs.frozen(repr=False, eq=False)
class RunRequest(Record):
    script: Script
    cwd: str
    stdin: bytes = b""
    #: `(value,)` when the request has an input (so `null` is a value).
    input: tuple[Any] | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    #: Globs and names the run copies from `caller_env` (besides `[script] passEnv` and
    #: `secrets`); the secrets are redacted in every frame and event of the run.
    pass_env: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    #: The caller's environment, as far as it was given: `exec`'s own, or the values a
    #: request sent. The run's and its per-call hooks' `passEnv` and `secrets` read it.
    caller_env: Mapping[str, str] = attrs.field(factory=dict)
    timeout_ms: int = DEFAULT_SCRIPT_TIMEOUT_MS
    #: The caller's `hooks.autonomy`; it can only lower the config's.
    autonomy: Effect | None = None
    #: Filled by `service/admission.py` for every run it admits; None (a request built by
    #: hand, as the tests do) is the config's `[script] sandbox`.
    sandbox: Profile | None = None
    #: The hosts its script reaches: the request's, else `[script] network` (admission's).
    network: tuple[str, ...] | None = None
    sources: Mapping[Phase, tuple[str, ...]] = attrs.field(factory=dict)
    run_id: str = attrs.field(factory=new_run_id)
    #: Whether `cwd` is the operator's grant (docs/sandbox.md): true for `exec`; for the
    #: service, only within the directory it serves from.
    cwd_granted: bool = True
    #: Whether `cwd` was made for this run alone (`admission.py`): removed at the run's end.
    cwd_made: bool = False
    #: The run's `placeholders` for its prompt hooks (request field, `exec --placeholder`).
    placeholders: Mapping[str, Any] = attrs.field(factory=dict)
    #: `exec --files-from`: the files `when.files` matches, instead of asking git.
    files: ChangedFiles | None = None


class Run:
    """A run in progress: its journal, and handles to cancel it and to cut its end short."""

    def __init__(self, request: RunRequest, journal: RunJournal) -> None:
        self.request = request
        self.journal = journal
        self.cancel_scope = trio.CancelScope()
        self.ending_scope = trio.CancelScope()  # (its suffix hooks': `exec`'s 3rd Ctrl-C)
        #: Its open questions: answers from clients, the terminal or flags settle them here.
        self.asks = Asks()
        self.cancelled_why: str | None = None  # (the first canceller's that said)

    def cancel(self, why: str | None = None) -> None:
        """Cancels the run; its `error` says "cancelled: `why`" if it is the first."""
        if not self.cancel_scope.cancel_called:
            self.cancelled_why = why
        self.cancel_scope.cancel()


async def execute(
    run: Run, *, config: Config, spawner: Spawner, bus: Bus, servers: ServerManager | None = None
) -> None:
    """Runs `run.request` to its `end` frame; see the module docstring for the guarantees."""
    req = run.request
    started = time.perf_counter()
    caller = caller_autonomy(config, req.autonomy)
    passed = run_passed(req, config)
    secrets = {**hook_secrets(config.hooks, req.caller_env, os.environ), **passed.secrets}
    secrets.update(server_secrets(config.servers.values(), os.environ))
    with bus.redacting(req.run_id, Redactor(secrets)) as redactor:
        # Before the first frame: every frame and event of the run is redacted.
        run.journal.redactor = redactor
        info = RunInfo(req.run_id, req.script.shown_argv, req.cwd, now_rfc3339())
        ctx = HookContext(
            info,
            caller,
            config.autonomy_max,
            input=req.input,
            cwd_granted=req.cwd_granted,
            caller_env=req.caller_env,
            withheld=config.models.key_names,
            redactor=redactor,
            prompts=PromptRun(
                req.placeholders,
                source_file=_in(req.cwd, req.script.python_file),
                source_code=req.script.python_code,
                warn=lambda message: run.journal.append(blank(WarningFrame, message=message)),
                artifacts=lambda: artifact_frames(run.journal.lines),
            ),
            servers=None if servers is None else servers.view(config.servers),
        )
        await _execute(
            run,
            RunState(ctx),
            config=config,
            spawner=spawner,
            bus=bus,
            passed=passed,
            started=started,
        )


async def changed_files(req: RunRequest, config: Config) -> ChangedFiles | None:
    """What `when.files` matches for this run: the request's list, else git's (each git
    command bounded, killed if the run is cancelled), or None: no hook has `when.files`."""
    from ..core.points import When

    if not any(h.on == "script" and h.enabled and When.FILES in h.when for h in config.hooks):
        return None
    if req.files is not None:
        return req.files
    from .gitchanges import git_changes

    return await git_changes(req.cwd, config.when_base)


def _in(cwd: str, file: str | None) -> str | None:
    return os.path.join(cwd, file) if file is not None else None


def run_passed(req: RunRequest, config: Config) -> Passed:
    """What the run takes from its caller's environment: `[script] passEnv` and `secrets`,
    then the request's own."""
    globs, names = config.script_pass_env + req.pass_env, config.script_secrets + req.secrets
    return pass_environment(globs, names, req.caller_env, withheld=config.models.key_names)


async def _execute(
    run: Run,
    state: RunState,
    *,
    config: Config,
    spawner: Spawner,
    bus: Bus,
    passed: Passed,
    started: float,
) -> None:
    req = run.request
    profile = req.sandbox or config.script_sandbox
    info = state.ctx.run
    assert info is not None
    hooks = PhaseHooks(config, spawner, bus, journal=run.journal, run_id=req.run_id, asks=run.asks)
    run.journal.append(blank(StartFrame, argv=info.argv, cwd=req.cwd, sandbox=profile.value))
    bus.publish(EventKind.RUN_STARTED, {"argv": [*info.argv], "cwd": req.cwd}, run_id=req.run_id)
    for warning in config.warnings:  # a project file skipped, a ceiling a file tried to raise
        run.journal.append(blank(WarningFrame, message=warning))
    hooks.changed = await changed_files(req, config)
    state.ctx = attrs.evolve(state.ctx, warned=_warn_unavailable(run, config, spawner, profile))
    try:
        with run.cancel_scope:
            await _body(run, state, hooks, profile, passed)
    except* trio.Cancelled:  # the caller's scope: ended as by `Run.cancel`, then passed on
        with trio.CancelScope(shield=True):
            await _ended(run, state, hooks, bus, started, cancelled=True)
        raise
    with trio.CancelScope(shield=True):
        await _ended(run, state, hooks, bus, started, cancelled=run.cancel_scope.cancelled_caught)


async def _ended(
    run: Run, state: RunState, hooks: PhaseHooks, bus: Bus, started: float, *, cancelled: bool
) -> None:
    """The run's `result` or `error`, its suffix hooks, its `end` (the caller shields it)."""
    if cancelled:
        said = "cancelled" + (f": {run.cancelled_why}" if run.cancelled_why else "")
        state.value, state.message, state.cause = None, said, ErrorCause.CANCELLED
    outcome = outcome_frame(state)
    run.journal.append(outcome)
    ctx = attrs.evolve(
        state.ctx,
        outcome="success" if state.value is not None else "error",
        result={"value": state.value[0]} if state.value is not None else None,
        error=None if state.value is not None else error_input(state),
    )
    with run.ending_scope:  # (cancelled: the hooks still running are killed now)
        await hooks.phase(Phase.SUFFIX, attrs.evolve(state, ctx=ctx))
    if (unsaid := hooks.egress_said.said()) is not None:
        run.journal.append(blank(WarningFrame, message=unsaid))
    duration = round((time.perf_counter() - started) * 1000)
    await run.journal.chain_lines()  # (its `end` carries the chain)
    run.journal.append(blank(EndFrame, exit_code=state.exit_code, duration_ms=duration))
    bus.publish(
        EventKind.RUN_FINISHED,
        {"outcome": outcome.type.value, "exitCode": state.exit_code, "durationMs": duration},
        run_id=run.request.run_id,
    )


async def _body(
    run: Run, state: RunState, hooks: PhaseHooks, profile: Profile, passed: Passed
) -> None:
    await hooks.phase(Phase.BEFORE, state)
    if state.refused_by is None and passed.problem is not None:
        state.message = passed.problem  # never runs without a secret it was declared with
    elif state.refused_by is None:
        calls = ScriptCalls(config=hooks.config, hooks=hooks, ctx=state.ctx, journal=run.journal)
        async with open_egress(hooks.spawner, run.request.network, profile) as lease:
            await _run_script(run, state, hooks, profile, passed, calls, lease)
        for frame in refusal_frames(lease, run.request.run_id, hooks.egress_said):
            run.journal.append(frame)
    landing = Phase.ON_SUCCESS if state.value is not None else Phase.ON_ERROR
    if state.value is not None:
        state.ctx = attrs.evolve(state.ctx, result={"value": state.value[0]})
    else:
        state.ctx = attrs.evolve(state.ctx, error=error_input(state))
    await hooks.phase(landing, state)


async def _run_script(  # noqa: PLR0917
    run: Run,
    state: RunState,
    hooks: PhaseHooks,
    profile: Profile,
    passed: Passed,
    calls: ScriptCalls,
    lease: Lease | None,
) -> None:
    req, spawner, config = run.request, hooks.spawner, hooks.config
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
                script_environment(scratch, artifacts, {**passed.values, **req.env}, input_path),
                rlimits,
                confinement,
            )
            programs.check_program(
                spec.argv[0], cwd=req.cwd, env=spec.env, plan=confinement, profile=profile
            )
            shown = programs.run_file(req.script.python_file, req.script.argv, req.cwd)
            programs.check_script_file(shown, plan=confinement, profile=profile)
            spec = egress_spec(spec, lease, hooks.config.script_secret_hosts)
            outcome = ScriptOutcome()
            with trio.move_on_after(req.timeout_ms / 1000) as deadline:
                await run_script(
                    spawner,
                    spec,
                    outcome,
                    stdin=req.stdin,
                    kill_grace=SCRIPT_KILL_GRACE_MS / 1000,
                    journal=run.journal,
                    calls=calls,
                )
            outcome.timed_out = deadline.cancelled_caught
        except SpawnError as exc:
            warned = isinstance(exc, ProfileUnavailable) and exc.profile in state.ctx.warned
            said = exc.short if isinstance(exc, ProfileUnavailable) and warned else str(exc)
            state.message = f"the script could not start: {said}"
            return
        if lost := run.journal.dropped_frames:
            said = f"{lost:,} frames ({shown_size(run.journal.dropped_bytes)}) dropped"
            run.journal.append(blank(WarningFrame, message=f"output over the run's budget: {said}"))
        store = run.journal.artifacts or ArtifactStore(0, keeps=False)
        if store.nothing_to_keep(req.run_id, artifacts):  # (most runs: no thread hop)
            await trio.lowlevel.checkpoint()
        else:
            for frame in await trio.to_thread.run_sync(store.keep, req.run_id, artifacts):
                run.journal.append(frame)
        process = outcome.process
        state.exit_code = process.exit_code
        if outcome.succeeded:
            python = req.script.argv is None
            state.value = (outcome.result_value(python=python),)
            if (note := outcome.result_warning(python)) is not None:
                run.journal.append(blank(WarningFrame, message=note))
        else:
            state.message = outcome.failure(req.timeout_ms)
            if outcome.timed_out:
                state.cause = ErrorCause.TIMEOUT
        state.stderr_tail = _tail(process.stderr_tail, STDERR_TAIL_IN_ERROR)
        state.stdout_tail = _tail(outcome.stdout_tail, STDOUT_TAIL_IN_ERROR)


def _tail(data: bytearray, size: int) -> str:
    """The last `size` bytes of `data` as text; a character cut at the start is left out."""
    return bytes(data[-size:]).decode(errors="replace").lstrip("\ufffd")


def _warn_unavailable(
    run: Run, config: Config, spawner: Spawner, profile: Profile
) -> frozenset[str]:
    """One `warning` frame for each profile the run needs (its own, its hooks') that this
    machine cannot enforce, with the whole message; the profiles warned of."""
    needed = [profile] + [
        h.sandbox
        for h in config.hooks
        if h.on == "script" and h.enabled and HOOK_KINDS[h.action].process
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
