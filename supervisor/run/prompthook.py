"""The `prompt` kind: one prompt hook's request built (`core/promptbuild.py`), sent to its
model (`models/modelclient.py`) or its answer taken from the cache (`models/promptreuse.py`),
read like a hook's stdout, and the hook frame that says what happened.

- The effect in force is `off` (an observe hook's always; any hook's the caller's or the
  supervisor's autonomy lowered that far): `skipped` ("effect off: …"), and its model is not
  asked: nothing it answered could be used, and a model's answer costs money and time.
- No model configured under the hook's `model`: `skipped` ("no model configured"), one
  `warning` frame in the run, and the run carries on whatever `failure` says.
- The run's token budget (`[models] runBudgetTokens`): what the replies' usage counted so
  far, plus this request's messages (estimated at 4 bytes a token), must leave some; else
  `skipped` ("token budget"), unless the answer is cached. The answer's `max_tokens` is at
  most what is left, so a run does not spend past its budget by more than the estimate's
  error.
- The model unreachable, answering HTTP >= 400 or what is not the protocol, or the hook's
  own `timeoutMs` passing (the wait for the model's `maxConcurrent` cap included): `failed`
  or `timeout`, and `failure` applies (a closed gate stays closed).
- An answer that is not one valid JSON object (plain text and nothing included: the model
  was asked for JSON, and such a reply must not open a gate): `invalid-output`.
- An answer carrying `run` or `propose` is cached; a cached answer is used without asking the
  model (`cached: true`). A `run` answer's argv is executed as a `run` hook's answer is.

The request and the reply are never in a frame or an event. Cancellation closes the request
(or kills a command model's tree) and propagates.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Final

import attrs
import trio

from ..config.modelschema import answer_schema
from ..core.answers import bound_answer
from ..core.effects import Effect
from ..core.errors import SandboxUnavailable
from ..core.frames import HookStatus
from ..core.hookframes import Ran, Tokens
from ..core.hooks import Action, Hook
from ..core.kinds import HOOK_KINDS
from ..core.models import Model, PromptSpec
from ..core.placeholders import BUILTINS, PHASE_BUILTINS, find, lookup, names_in
from ..core.points import Phase
from ..core.promptbuild import PromptRequest, build_request
from ..models import promptreuse
from ..models.modelclient import ModelFailed, Reply, ask_model, estimate, request_body
from ..models.promptrun import PromptRun, limiter_for
from ..process.scratch import scratch_dir
from ..process.spawner import Spawner
from .hookcontext import HookContext, hook_input, hook_passed
from .hookframe import (
    FrameBuilder,
    HookReport,
    child_spec,
    failure_tail,
    granted,
    ms_since,
    run_command,
)
from .output import InvalidOutput, read_output, stdout_head

NO_MODEL: Final = "no model configured"
EFFECT_OFF: Final = "effect off: nothing it answered could be used, so its model was not asked"
TOKEN_BUDGET: Final = "token budget"
#: A reply wrapped in one Markdown code fence (as models often answer) is read without it.
_FENCE: Final = re.compile(r"\A\s*```[\w-]*[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)


def placeholder_values(
    hook: Hook, spec: PromptSpec, effect: Effect, ctx: HookContext
) -> dict[str, Any]:
    """Each name the hook's prompt uses, with its value: the built-ins its phase has (as the
    run's redaction shows them; only those the prompt names are read), then its `vars`, with
    the run's `placeholders` given for the same names."""
    run = ctx.prompts or PromptRun()
    have = PHASE_BUILTINS.get(hook.phase, frozenset())
    named = set(names_in(str(hook.target)))
    payload = hook_input(hook, effect, ctx)
    values: dict[str, Any] = {}
    for name in BUILTINS:
        if name not in have or name not in named:
            continue
        if name == "source":
            values[name] = run.source()
        elif name == "artifacts":
            values[name] = run.artifacts() if run.artifacts is not None else []
        else:
            values[name] = payload.get(name)
    for name, value in spec.vars.items():
        values[name] = run.placeholders.get(name, value)
    redacted: dict[str, Any] = ctx.redactor.value(values)
    return redacted


def used_values(prompt: str, values: dict[str, Any]) -> dict[str, Any]:
    """The values the prompt's placeholders carry, by their spelling (`error.stderrTail`):
    what the cache key is made of (the `context` block, which holds the run's id, is not)."""
    return {
        p.spelt: lookup(values.get(p.name), p.path) if p.path else values.get(p.name)
        for p in find(prompt)
    }


def prompt_request(
    hook: Hook, effect: Effect, ctx: HookContext, values: dict[str, Any] | None = None
) -> PromptRequest:
    """The request the hook sends (`hook test --show-request` prints it)."""
    spec = hook.prompt or PromptSpec()
    return build_request(
        str(hook.target),
        effect=effect,
        phase=hook.phase.value,
        schema=answer_schema(effect),
        values=values if values is not None else placeholder_values(hook, spec, effect, ctx),
        context=hook_input(hook, effect, ctx),
        on=hook.on,
        kind=ctx.point(hook) if hook.phase is Phase.OBSERVE else None,
    )


async def run(spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder) -> HookReport:
    """Runs the prompt hook once; see the module docstring. Never raises for a broken model."""
    spec = hook.prompt or PromptSpec()  # a hook built by hand: the default model, unresolved
    run = ctx.prompts or PromptRun()
    if frame.clamped.effect is Effect.OFF:
        return frame.skipped(EFFECT_OFF)
    if spec.model is None:
        run.warn_once(
            f'prompt hook "{hook.name}" was skipped: no model configured (it names model'
            f' "{spec.model_name}"; declare [models.{spec.model_name}] to use it)'
        )
        return frame.skipped(NO_MODEL)
    model = spec.model
    shown: dict[str, Any] = {"model": model.shown()}
    effect = frame.clamped.effect
    started = time.perf_counter()
    values = placeholder_values(hook, spec, effect, ctx)
    key = None
    if promptreuse.may_keep(effect):
        key = promptreuse.key_for(hook, effect, model, used_values(str(hook.target), values))
        cached = promptreuse.lookup(key, run, _cwd(ctx))
        if cached is not None:  # costs no token: used even past the budget
            return await _answered(
                spawner, hook, ctx, frame, cached, started=started, cached=True, **shown
            )
    request = prompt_request(hook, effect, ctx, values)
    # What is left of the run's budget, less what this request's messages are estimated to
    # cost: none left, and the hook is skipped; some, and the answer may take at most that.
    cost = estimate(request.system + request.user)
    left = spec.run_budget_tokens - run.spent - cost
    if left <= 0:
        run.warn_once(
            f'prompt hook "{hook.name}" was skipped: past the run\'s token budget ([models]'
            f" runBudgetTokens = {spec.run_budget_tokens}; {run.spent} spent so far, and its"
            f" request is about {cost}); raise runBudgetTokens where it is set (a nearer file"
            " may only lower it)"
        )
        skipped = frame.skipped(TOKEN_BUDGET)
        return attrs.evolve(skipped, frame=attrs.evolve(skipped.frame, **shown))
    reply: Reply | None = None
    asked = started
    try:
        with trio.move_on_after(hook.timeout_ms / 1000):
            async with limiter_for(model):
                asked = time.perf_counter()
                body = request_body(model, request, max_tokens=left)
                grants = granted(hook, ctx)
                reply = await ask_model(spawner, hook, model, body, os.environ, granted=grants)
    except ModelFailed as exc:
        why = ctx.redactor.text(exc.reason)
        said = {"stderr_tail": failure_tail(exc.stderr_tail, ctx.redactor)}
        return frame.failed(HookStatus.FAILED, why, started, cached=False, **said, **shown)
    if reply is None:
        why = f"timed out after {hook.timeout_ms} ms waiting for model {model.name}"
        return frame.failed(HookStatus.TIMEOUT, why, started, cached=False, **shown)
    run.spent += reply.prompt_tokens + reply.completion_tokens
    fields = {
        "tokens": Tokens(reply.prompt_tokens, reply.completion_tokens),
        "latency_ms": ms_since(asked),
        "cached": False,
        **shown,
    }
    fenced = _FENCE.match(reply.content)
    text = (fenced.group(1) if fenced else reply.content).encode(errors="replace")
    try:
        obj = read_answer(text)
    except InvalidOutput as exc:
        head = stdout_head(text, ctx.redactor)
        why = f"{_cut_said(body, model, spec)}: {exc}" if reply.cut else str(exc)
        return frame.failed(HookStatus.INVALID_OUTPUT, why, started, stdout_head=head, **fields)
    if key is not None and promptreuse.worth_keeping(obj, effect):
        await promptreuse.store(
            key, hook, effect, model, obj, redactor=ctx.redactor, run=run, cwd=_cwd(ctx)
        )
    return await _answered(spawner, hook, ctx, frame, obj, started=started, **fields)


def _cwd(ctx: HookContext) -> str:
    """Where the run works (the checkout its prompt cache may not lie in): a request's `cwd`
    on a `serve` started elsewhere; outside a run, this process's."""
    return ctx.run.cwd if ctx.run is not None else "."


def _cut_said(body: dict[str, Any], model: Model, spec: PromptSpec) -> str:
    """Why an answer the model stopped at its token limit is cut: `maxTokens`, or what the
    run's budget had left."""
    sent = body.get("max_tokens")
    if isinstance(sent, int) and sent < model.max_tokens:
        return (
            f"the model stopped at the {sent} tokens the run's budget had left (of [models]"
            f" runBudgetTokens = {spec.run_budget_tokens}), before its answer's end"
        )
    return (
        f"the model stopped at maxTokens ({model.max_tokens}, of model {model.name}) before"
        " its answer's end; raise it, or ask for a shorter answer"
    )


def read_answer(text: bytes) -> dict[str, Any]:
    """A model's answer: one JSON object valid against the hook-output schema, read as a
    hook's stdout is. Unlike a process hook's, plain text or nothing is not taken as advice or
    as no opinion: the model was asked for JSON, and a reply that is not (a refusal to follow
    the protocol, a model talked round) must not open a gate. Raises `InvalidOutput`."""
    if not text.removeprefix(b"\xef\xbb\xbf").strip().startswith(b"{"):
        what = "nothing" if not text.strip() else "text that is not a JSON object"
        raise InvalidOutput(f"the model answered {what}; it was asked for one JSON object")
    obj = read_output(text, source=HOOK_KINDS[Action.PROMPT].answer)
    assert obj is not None
    return obj


async def _answered(
    spawner: Spawner,
    hook: Hook,
    ctx: HookContext,
    frame: FrameBuilder,
    obj: dict[str, Any] | None,
    *,
    started: float,
    **fields: Any,
) -> HookReport:
    """The report of an answer (the model's, or the cache's), its `run` executed."""
    answer = bound_answer(obj, frame.clamped.effect)
    report = HookReport(
        frame.frame(HookStatus.OK, ms_since(started), **fields, **frame.effects(answer)),
        answer,
    )
    if answer.run is not None:
        ran = await run_answer_command(spawner, hook, frame.clamped.effect, ctx, answer.run)
        report = attrs.evolve(report, frame=attrs.evolve(report.frame, ran=ran))
    return report


async def run_answer_command(
    spawner: Spawner, hook: Hook, effect: Effect, ctx: HookContext, argv: tuple[str, ...]
) -> Ran:
    """A `run` answer's argv, executed once as a `run` hook's would be: in the hook's
    sandbox, working directory and environment (its `passEnv` and `secrets` too), within its
    timeout."""
    passed = hook_passed(hook, ctx, os.environ)
    if passed.problem is not None:  # never run without a secret it was declared with
        return Ran(argv, HookStatus.FAILED, stderr_tail=passed.problem)
    with scratch_dir("hook-") as scratch:
        try:
            spec = child_spec(spawner, hook, effect, ctx, scratch=scratch, passed=passed, argv=argv)
        except SandboxUnavailable as exc:
            return Ran(argv, HookStatus.FAILED, stderr_tail=str(exc))
        return await run_command(spawner, argv, spec, hook, ctx.redactor)
