"""What every hook kind builds on: the report and its one hook frame (`FrameBuilder`), and
a hook's child process: its spec (sandbox, environment, program), its run within the hook's
`timeoutMs`, a `run`-effect answer's command, and a process hook's whole run (`run_process`).

A child past its `timeoutMs`, or cancelled, has its whole process tree killed (SIGTERM,
`killGraceMs`, SIGKILL) and reaped before the call returns or re-raises. A broken hook never
raises: it comes back as a frame with a failure status.
"""

from __future__ import annotations

import os
import time
from typing import Any, Final

import attrs
import trio

from ..core.answers import Answer, Asked, Refusal, bound_answer
from ..core.effects import REFUSING, Clamp, Effect
from ..core.egress import blocked_message
from ..core.errors import ProfileUnavailable, SandboxUnavailable, SpawnError
from ..core.frames import RUN_CANCELLED_REASON, RUN_CANCELLED_TREE, HookStatus, blank
from ..core.hookframes import HookFrame, Ran, Resources
from ..core.hooks import STDERR_TAIL_BYTES, Failure, Hook, SourceKind
from ..core.jsontext import dumps
from ..core.kinds import HOOK_KINDS
from ..core.passenv import Passed
from ..core.records import Record
from ..core.redact import Redactor
from ..process import programs, sandbox
from ..process.child import Outcome
from ..process.egress import Lease
from ..process.egresschild import egress_spec, open_egress, refusals
from ..process.scratch import scratch_dir
from ..process.spawner import Spawner
from ..process.spawnspec import ChildSpec, ModuleCall
from .hookcontext import HookContext, hook_environment, hook_input, hook_passed
from .output import InvalidOutput, read_output, stdout_head

#: How much of a `run`-effect command's stdout is kept on the hook frame.
RAN_OUTPUT_BYTES: Final = 64 * 1024
#: How much of its stdout and of its stderr a failed hook's frame keeps (the last bytes).
FAILURE_TAIL_BYTES: Final = 4 * 1024


@attrs.frozen(repr=False, eq=False)
class HookReport(Record):
    """The frame, unstamped (where it is sent stamps it: the run's journal, for a run's
    hooks), and the answer as the effect in force bounds it (for the run to act on)."""

    frame: HookFrame
    answer: Answer
    #: The hosts (and ports) the proxy refused its child, once each (`process/egress.py`).
    refused: tuple[tuple[str, int], ...] = ()
    #: Refusals of hosts past those `refused` holds (the lease keeps a bounded number).
    unkept: int = 0


async def run_process(
    spawner: Spawner,
    hook: Hook,
    ctx: HookContext,
    frame: FrameBuilder,
    *,
    argv: tuple[str, ...],
    module: ModuleCall | None = None,
) -> HookReport:
    """Runs `argv` (or warm, `module`) as `hook`'s child with the hook input on its stdin, and
    reads its stdout as the hook's answer; a `run` answer's command is then executed once."""
    effect = frame.clamped.effect
    started = time.perf_counter()
    passed = hook_passed(hook, ctx, os.environ)
    if passed.problem is not None:  # never run without a secret it was declared with
        return frame.failed(HookStatus.FAILED, passed.problem, started)
    with scratch_dir("hook-") as scratch:
        async with open_egress(spawner, hook.network, hook.sandbox) as lease:
            try:
                spec = child_spec(
                    spawner,
                    hook,
                    effect,
                    ctx,
                    scratch=scratch,
                    passed=passed,
                    argv=argv,
                    module=module,
                )
                spec = egress_spec(spec, lease, hook.secret_hosts)
            except SandboxUnavailable as exc:  # refused before the spawner is asked
                return frame.failed(HookStatus.FAILED, unavailable_reason(exc, ctx), started)
            # As every line that leaves the supervisor (`jsontext.dumps`): JSON, always: 1e400
            # in a run's input reads as infinity, which json.dumps would write as `Infinity`.
            stdin = dumps(hook_input(hook, effect, ctx))
            redactor = ctx.redactor | Redactor(passed.secrets)
            frame.said = (Outcome(), redactor)
            try:
                outcome, timed_out = await run_child(spawner, spec, stdin, hook, frame.said[0])
            except SpawnError as exc:
                return frame.failed(HookStatus.FAILED, f"could not start: {exc}", started)
            report = with_refusals(frame.finished(outcome, timed_out, started, redactor), lease)
            if report.answer.run is not None and not report.frame.status.is_failure:
                ran = await run_command(spawner, report.answer.run, spec, hook, redactor)
                report = attrs.evolve(report, frame=attrs.evolve(report.frame, ran=ran))
            return report


def with_refusals(report: HookReport, lease: Lease | None) -> HookReport:
    """`report` with the hosts the proxy refused its child, on its frame in words."""
    refused = refusals(lease)
    if not refused:
        return report
    assert lease is not None
    words = tuple(lease.notes.get(host, blocked_message(host)) for host, _ in refused)
    frame = attrs.evolve(report.frame, egress=words)
    return attrs.evolve(report, frame=frame, refused=refused, unkept=lease.unkept)


def child_spec(
    spawner: Spawner,
    hook: Hook,
    effect: Effect,
    ctx: HookContext,
    *,
    scratch: str,
    passed: Passed,
    argv: tuple[str, ...],
    module: ModuleCall | None = None,
) -> ChildSpec:
    """The child that runs `argv` (or `module`) as `hook` in `ctx`: its sandbox planned for
    the hook's directories and grants, its environment built under `effect`, its program
    checked visible in that sandbox. Raises `SandboxUnavailable` before any spawn."""
    rlimits, plan = sandbox.plan(
        hook.sandbox,
        spawner,
        scratch=scratch,
        dirs=(hook.declaring_dir, hook.workdir),
        workdir=hook.workdir,
        granted=granted(hook, ctx),
        paths=hook.paths,
        limits=hook.limits,
    )
    env = hook_environment(hook, effect, ctx, scratch, os.environ, passed=passed)
    programs.check_command(
        argv, cwd=hook.workdir, env=env, plan=plan, profile=hook.sandbox, sees=HOOK_SEES
    )
    return ChildSpec(argv, hook.workdir, env, rlimits, plan, module)


#: What a hook's sandbox sees, as a script file it cannot see is said.
HOOK_SEES: Final = "the hook's directory and working directory, the system and the grants"


def granted(hook: Hook, ctx: HookContext) -> tuple[str, ...]:
    """The hook's directories that are the operator's grants: all of them, but for a per-call
    hook (a service client's) only those within a run cwd the operator granted."""
    dirs = (hook.declaring_dir, hook.workdir)
    if hook.source.kind is not SourceKind.PER_CALL:
        return dirs
    if not ctx.cwd_granted or ctx.run is None:
        return ()
    root = os.path.realpath(ctx.run.cwd)
    return tuple(
        d for d in dirs if (real := os.path.realpath(d)) == root or real.startswith(root + "/")
    )


def unavailable_reason(exc: SandboxUnavailable, ctx: HookContext) -> str:
    """Why the hook's sandbox cannot be had: in short when the run has said it already."""
    if isinstance(exc, ProfileUnavailable) and exc.profile in ctx.warned:
        return exc.short
    return str(exc)


async def run_child(
    spawner: Spawner, spec: ChildSpec, stdin: bytes, hook: Hook, outcome: Outcome | None = None
) -> tuple[Outcome, bool]:
    """Runs `spec` with `stdin` within the hook's `timeoutMs` and output caps; returns what
    it did (in `outcome` when given, as it goes) and whether the timeout cut it short (its
    tree killed and reaped either way)."""
    outcome = Outcome() if outcome is None else outcome
    with trio.move_on_after(hook.timeout_ms / 1000) as deadline:
        caps = (hook.max_output_bytes, STDERR_TAIL_BYTES)
        kill_grace = hook.kill_grace_ms / 1000
        async with spawner.open_child(
            spec, kill_grace=kill_grace, stdin_data=stdin, collect=caps, outcome=outcome
        ) as child:
            await child.communicate(b"", *caps)
    return outcome, deadline.cancelled_caught


async def run_command(
    spawner: Spawner, argv: tuple[str, ...], like: ChildSpec, hook: Hook, redactor: Redactor
) -> Ran:
    """Executes a `run`-effect answer once, in the hook's sandbox, cwd and environment."""
    spec = attrs.evolve(like, argv=argv, module=None)
    started = time.perf_counter()
    try:
        outcome, timed_out = await run_child(spawner, spec, b"", hook)
    except SpawnError as exc:
        return Ran(argv, HookStatus.FAILED, stderr_tail=str(exc))
    status = process_status(outcome, timed_out)
    return Ran(
        argv,
        status,
        outcome.exit_code,
        outcome.signal,
        _head(outcome.stdout, RAN_OUTPUT_BYTES, redactor),
        _tail(outcome.stderr_tail, redactor),
        ms_since(started),
    )


def process_status(outcome: Outcome, timed_out: bool) -> HookStatus:
    """The hook status a child's outcome comes to."""
    if timed_out:
        return HookStatus.TIMEOUT
    if outcome.stdout_overflow or (outcome.killed and not outcome.exited):
        return HookStatus.KILLED
    if outcome.signal is not None or outcome.exit_code != 0:
        return HookStatus.FAILED
    return HookStatus.OK


def _tail(data: bytes | bytearray, redactor: Redactor) -> str | None:
    """The stderr a child's `Outcome` kept, redacted: the end of a secret's value it starts
    with is left out when its start was cut off (`STDERR_TAIL_BYTES` kept)."""
    if not data:
        return None
    text = bytes(data).decode(errors="replace")
    return redactor.cut(text, start=len(data) >= STDERR_TAIL_BYTES)


def _head(data: bytes | bytearray, size: int, redactor: Redactor) -> str:
    """The first `size` bytes of `data` as text, redacted as a cut (`Redactor.cut`)."""
    text = bytes(data[:size]).decode(errors="replace")
    return redactor.cut(text, end=len(data) > size)


def failure_tail(data: bytes | bytearray, redactor: Redactor, cut: bool = False) -> str | None:
    """The last `FAILURE_TAIL_BYTES` of what a failed process wrote, redacted before it is
    cut (a cut could otherwise leave half a secret that no redaction then recognises);
    `cut`: `data` itself was cut short at its end (stdout over its cap)."""
    text = redactor.cut(bytes(data).decode(errors="replace"), end=cut) if data else ""
    tail = text.encode()[-FAILURE_TAIL_BYTES:].decode(errors="ignore")
    return tail or None


class FrameBuilder:
    """Builds the one hook frame for a hook run from its pieces: every kind ends in it, so
    effects, clamping, `failure` and the frame order apply to each kind alike."""

    def __init__(self, hook: Hook, clamped: Clamp, ctx: HookContext) -> None:
        self.hook = hook
        self.clamped = clamped
        self.ctx = ctx
        #: What the hook's process has written so far, and the redactor for it: the tails
        #: the frame of a hook its run's cancellation cut short keeps.
        self.said: tuple[Outcome, Redactor] | None = None

    def frame(self, status: HookStatus, duration_ms: int, **fields: Any) -> HookFrame:
        """The frame of this hook with its clamp, `status` and `fields`."""
        hook = self.hook
        return blank(
            HookFrame,
            name=hook.name,
            on=hook.on,
            phase=hook.phase.value,
            action=hook.action,
            effect=self.clamped.effect.word,
            requested_effect=self.clamped.requested.word,
            clamped_by=tuple(s.value for s in self.clamped.clamped_by),
            caller_autonomy_ignored=self.clamped.caller_ignored,
            status=status,
            duration_ms=duration_ms,
            sandbox=hook.sandbox.value,
            **fields,
        )

    def cut_short(self, duration_ms: int) -> HookReport:
        """The report of a hook its run's cancellation cut short: `killed`, no answer, and
        the end of what its process wrote, as any failed hook's."""
        said: dict[str, Any] = {}
        if self.said is not None:
            outcome, redactor = self.said
            said["stderr_tail"] = failure_tail(outcome.stderr_tail, redactor)
            said["stdout_tail"] = failure_tail(outcome.stdout, redactor, outcome.stdout_overflow)
        tree = RUN_CANCELLED_TREE if HOOK_KINDS[self.hook.action].process else ""
        frame = self.frame(
            HookStatus.KILLED, duration_ms, reason=RUN_CANCELLED_REASON + tree, **said
        )
        return HookReport(frame, Answer())

    def skipped(self, reason: str) -> HookReport:
        """The report of a hook that did not run, for `reason`."""
        return HookReport(self.frame(HookStatus.SKIPPED, 0, reason=reason), Answer())

    def failed(self, status: HookStatus, reason: str, started: float, **fields: Any) -> HookReport:
        """The report of a hook that failed with `status`, for `reason`; what `failure`
        makes of it applied."""
        fields.update(self._closed(status, reason))
        frame = self.frame(status, ms_since(started), reason=reason, **fields)
        return HookReport(frame, Answer())

    def _closed(self, status: HookStatus, reason: str) -> dict[str, Any]:
        """What `failure = "closed"` makes of a failure: a refusal, or a note why it cannot."""
        if self.hook.failure is not Failure.CLOSED:
            return {}
        if self.clamped.effect >= REFUSING:
            why = f"{self.hook.name} failed ({status}): {reason}"
            return {"refused": Refusal(why, fail_closed=True)}
        by = ", ".join(s.value for s in self.clamped.clamped_by)
        return {
            "failure_note": f'failure = "closed" cannot refuse: the effect in force is '
            f"{self.clamped.effect.word} (lowered by {by})"
        }

    def finished(
        self, outcome: Outcome, timed_out: bool, started: float, redactor: Redactor
    ) -> HookReport:
        """The report of a finished process (or what reads as one): a failure by its
        status, else its stdout read as the answer, bounded by the effect in force."""
        process = {
            "exit_code": outcome.exit_code,
            "signal": outcome.signal,
            "stderr_tail": _tail(outcome.stderr_tail, redactor),
            "resources": Resources(outcome.cpu_ms, outcome.max_rss_kb),
        }
        status = process_status(outcome, timed_out)
        if status is not HookStatus.OK:
            process.update(
                stderr_tail=failure_tail(outcome.stderr_tail, redactor),
                stdout_tail=failure_tail(outcome.stdout, redactor, cut=outcome.stdout_overflow),
            )
            return self.failed(status, self._why(status, outcome), started, **process)
        try:
            said = read_output(bytes(outcome.stdout), source=HOOK_KINDS[self.hook.action].answer)
            answer = bound_answer(said, self.clamped.effect)
        except InvalidOutput as exc:
            head = stdout_head(bytes(outcome.stdout), redactor)
            return self.failed(
                HookStatus.INVALID_OUTPUT, str(exc), started, **process, stdout_head=head
            )
        return HookReport(
            self.frame(HookStatus.OK, ms_since(started), **process, **self.effects(answer)),
            answer,
        )

    def _why(self, status: HookStatus, outcome: Outcome) -> str:
        hook = self.hook
        if status is HookStatus.TIMEOUT:
            return f"timed out after {hook.timeout_ms} ms; its process tree was killed"
        if (over := outcome.over_memory) is not None:
            return f"over memoryMb {over}"
        if outcome.stdout_overflow:  # (in the kind's words: a module hook writes no stdout)
            said = HOOK_KINDS[hook.action].answer
            return f"{said} over maxOutputBytes ({hook.max_output_bytes}); killed"
        if outcome.lost:
            return (
                "the spawner died while the hook ran, and its process tree with it; "
                "a new spawner serves the next hook (this one is not retried: it may have done "
                "part of its work)"
            )
        if outcome.signal is not None:
            return f"killed by signal {outcome.signal}"
        return f"exited with status {outcome.exit_code}"

    def effects(self, answer: Answer) -> dict[str, Any]:
        """The frame fields of what `answer` does (advice, proposals, refusal, ask, apply)."""
        fields: dict[str, Any] = {"advice": answer.advice, "dropped": answer.dropped}
        if answer.propose is not None:
            fields["proposals"] = (answer.propose,)
        if answer.refuse is not None:
            fields["refused"] = Refusal(answer.refuse, fail_closed=False)
        if answer.ask is not None and answer.refuse is None:
            # Settled by the run (`phases.py`); a refusal beside it needs no question.
            fields["asked"] = Asked(answer.ask.question)
        subject = self.ctx.subject(self.hook.phase)
        if answer.apply is not None:
            fields.update(
                changed=True, value=answer.apply[0], original=subject[0] if subject else None
            )
        return fields


def ms_since(started: float) -> int:
    """Milliseconds since `started` (a `time.perf_counter()` reading)."""
    return round((time.perf_counter() - started) * 1000)
