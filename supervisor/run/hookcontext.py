"""What a point gives a hook: the run it belongs to, the context of its phase, and from them
its stdin (the hook input) and its environment.

Pure: no I/O.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..core.convert import to_json
from ..core.effects import Effect
from ..core.hookenv import PROTOCOL, HookFacts, base_environment, hook_variables
from ..core.hooks import Hook, SourceKind
from ..core.passenv import NOTHING_PASSED, Passed, pass_environment
from ..core.points import Phase
from ..core.records import Record
from ..core.redact import NO_SECRETS, Redactor

if TYPE_CHECKING:
    from ..models.promptrun import PromptRun
    from ..tools.servers import ToolServers


@attrs.frozen(repr=False, eq=False)
class RunInfo(Record):
    run_id: str
    argv: tuple[str, ...]
    cwd: str
    started_at: str


@attrs.frozen(repr=False, eq=False)
class HookContext(Record):
    """What the point gives a hook: the hook input, and the ceilings for the clamp."""

    run: RunInfo | None
    caller_autonomy: Effect = Effect.RUN
    supervisor_max: Effect = Effect.RUN
    #: `(value,)` when the point has an input (before), so `null` is a value.
    input: tuple[Any] | None = None
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    event: Mapping[str, Any] | None = None
    #: `success` or `error`, for suffix hooks.
    outcome: str | None = None
    #: Whether the run's cwd is the operator's grant (a service client's own cwd is not):
    #: per-call hooks, which declare there, then get its owner's access (docs/sandbox.md).
    cwd_granted: bool = True
    #: Profiles the run has already said, in a `warning`, cannot be enforced here: a hook
    #: that needs one fails with a line pointing there instead of the whole message again.
    warned: frozenset[str] = frozenset()
    #: The caller's environment given with the run, where its per-call hooks' `passEnv` and
    #: `secrets` are looked up; None where there is no caller (observe hooks, `hook test`).
    caller_env: Mapping[str, str] | None = None
    #: The models' key variables (`Models.key_names`): the supervisor's own secrets, like
    #: `passenv.OWN_SECRETS`, which no hook's `passEnv` passes.
    withheld: frozenset[str] = frozenset()
    #: The run's redaction: the hook input a hook is given is what a client would see.
    redactor: Redactor = NO_SECRETS
    #: What the run's prompt hooks share (placeholders, token budget, warnings); None
    #: outside a run, where each prompt hook gets a fresh one.
    prompts: PromptRun | None = None
    #: The tool servers plugin hooks call (`servers.py`); None where there are none.
    servers: ToolServers | None = None

    def point(self, hook: Hook) -> str:
        """What the hook is told it is `on`: the point, or for observe the event's kind."""
        if hook.phase is Phase.OBSERVE and self.event is not None:
            return str(self.event.get("kind", hook.on))
        return hook.on

    @property
    def run_id(self) -> str:
        """The run's id; for an observe hook, the id of the run its event belongs to."""
        if self.run is not None:
            return self.run.run_id
        return str(self.event.get("runId") or "") if self.event is not None else ""

    def subject(self, phase: Phase) -> tuple[Any] | None:
        """The value an `apply` in `phase` replaces, as `(value,)`, or None if none."""
        if phase is Phase.BEFORE:
            return self.input
        if phase is Phase.ON_SUCCESS and self.result is not None:
            return (self.result.get("value"),)
        if phase is Phase.ON_ERROR and self.error is not None:
            return (dict(self.error),)
        return None


def hook_input(hook: Hook, effect: Effect, ctx: HookContext) -> dict[str, Any]:
    """The JSON object written to the hook's stdin (schema `hook-input`)."""
    payload: dict[str, Any] = {
        "protocol": PROTOCOL,
        "hook": {
            "name": hook.name,
            "on": ctx.point(hook),
            "phase": hook.phase.value,
            "action": hook.action,
            "effect": effect.word,
            "timeoutMs": hook.timeout_ms,
        },
        "run": to_json(ctx.run) if ctx.run else None,
    }
    if hook.phase is Phase.BEFORE and ctx.input is not None:
        payload["input"] = ctx.input[0]
    if ctx.result is not None:
        payload["result"] = dict(ctx.result)
    if ctx.error is not None:
        payload["error"] = dict(ctx.error)
    if ctx.event is not None:
        payload["event"] = dict(ctx.event)
    redacted: dict[str, Any] = ctx.redactor.value(payload)
    return redacted


def source_environment(
    hook: Hook, caller_env: Mapping[str, str] | None, supervisor_env: Mapping[str, str]
) -> Mapping[str, str]:
    """Where a hook's `passEnv` and `secrets` are looked up: the caller's environment for a
    per-call hook (a request's, or `exec`'s own for a local run), the supervisor's for the
    hooks its config declares."""
    if hook.source.kind is SourceKind.PER_CALL and caller_env is not None:
        return caller_env
    return supervisor_env


def hook_passed(hook: Hook, ctx: HookContext, supervisor_env: Mapping[str, str]) -> Passed:
    """What the hook's `passEnv` and `secrets` find (`problem`: why it must not run)."""
    source = source_environment(hook, ctx.caller_env, supervisor_env)
    return pass_environment(hook.pass_env, hook.secrets, source, withheld=ctx.withheld)


def hook_secrets(
    hooks: Iterable[Hook], caller_env: Mapping[str, str] | None, supervisor_env: Mapping[str, str]
) -> dict[str, str]:
    """The secret values the hooks would be given: what their run's redaction hides."""
    found: dict[str, str] = {}
    for hook in hooks:
        model = hook.prompt.model if hook.prompt is not None else None
        if model is not None and model.api_key_env:  # always the supervisor's own
            found.update(pass_environment((), (model.api_key_env,), supervisor_env).secrets)
        if hook.secrets:
            source = source_environment(hook, caller_env, supervisor_env)
            found.update(pass_environment((), hook.secrets, source).secrets)
    return found


def hook_environment(
    hook: Hook,
    effect: Effect,
    ctx: HookContext,
    scratch: str,
    parent: Mapping[str, str],
    *,
    passed: Passed = NOTHING_PASSED,
) -> dict[str, str]:
    """The scrubbed environment: base, what `passEnv` and `secrets` passed, the hook's `env`,
    then the `MCPX_HOOK_*` table's variables (which of them a hook gets is the table's
    `when`)."""
    env = base_environment(parent, scratch)
    env.update(passed.values)
    env.update(hook.env)
    event = ctx.event  # given to observe hooks only: the table's `when` says so
    facts = HookFacts(
        name=hook.name,
        on=ctx.point(hook),
        phase=hook.phase,
        action=hook.action,
        effect=effect.word,
        run_id=ctx.run_id,
        timeout_ms=str(hook.timeout_ms),
        scratch=scratch,
        dir=hook.declaring_dir,
        outcome=ctx.outcome or None,
        event_kind=str(event.get("kind", "")) if event is not None else None,
        event_seq=str(event.get("seq", "")) if event is not None else None,
    )
    env.update(hook_variables(facts))
    return env


def new_run_id() -> str:
    return secrets.token_hex(8)
