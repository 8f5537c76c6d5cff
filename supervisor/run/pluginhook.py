"""The `plugin` kind: one plugin hook, a tool call on a server the supervisor runs
(`tools/servers.py`).

`plugin = "server.tool"` with `args` (placeholders resolved, `core/placeholders.py`). The
whole call, the server's start included, is bounded by the hook's `timeoutMs`; a call cut
short is cancelled on the server (`notifications/cancelled`) and the hook is `timeout`, its
reason saying whether the server was still starting (the tool never asked). The
tool's answer becomes the hook's by its `answer` (`tool_answer`): with `auto` (the default),
its `structuredContent`, or its text content parsed as JSON, when that is an object whose
keys are all answer keys (`advise`, `refuse` …); otherwise its text content (or, when it has
none, its structured content's JSON) is advice, so any tool (a time server, a search) can
inform a run. `hook` insists on an answer object (anything else is `invalid-output`);
`advice` always takes the text as advice. `isError: true`, a server that cannot be
had and a JSON-RPC error are `failed`, with the reason; an answer over `maxOutputBytes` (or
over the longest message read from a server, `MAX_MESSAGE_BYTES`, which ends the call as
soon as it passes it) is `killed`, "too large". Never raises for a broken server;
the caller's cancellation propagates (the call is cancelled on the server first).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.convert import to_json
from ..core.effects import KEY_EFFECT
from ..core.frames import HookStatus
from ..core.hooks import Hook, PluginAnswer
from ..core.jsontext import JsonError, loads
from ..core.placeholders import PlaceholderError, resolve
from ..core.points import Phase
from ..core.servers import ServerSpec, split_tool
from ..process.child import Outcome
from ..process.spawner import Spawner
from ..tools.serverentry import (
    AnswerTooLarge,
    ServerEntry,
    ServerFailing,
    ToolFailed,
    answer_text,
)
from .hookcontext import HookContext
from .hookframe import FrameBuilder, HookReport
from .output import TEXT_KEY, InvalidOutput, stdout_head

if TYPE_CHECKING:
    from mcp import types

#: How much of an `isError` answer's text the hook frame's reason quotes.
_ERROR_TEXT: Final = 1000


def plugin_names(hook: Hook, effect: str, ctx: HookContext) -> dict[str, Any]:
    """The placeholder names a plugin hook's `args` may use in `ctx`'s phase."""
    names: dict[str, Any] = {}
    names["hook"] = {
        "name": hook.name,
        "on": ctx.point(hook),
        "phase": hook.phase.value,
        "effect": effect,
        "timeoutMs": hook.timeout_ms,
    }
    if ctx.run is not None:
        names["run"] = to_json(ctx.run)
    if hook.phase is Phase.BEFORE and ctx.input is not None:
        names["input"] = ctx.input[0]
    for key, value in (("result", ctx.result), ("error", ctx.error), ("event", ctx.event)):
        if value is not None:
            names[key] = dict(value)
    redacted: dict[str, Any] = ctx.redactor.value(names)
    return redacted


async def run(spawner: Spawner, hook: Hook, ctx: HookContext, frame: FrameBuilder) -> HookReport:
    """Calls the hook's tool once; see the module docstring. The spawner is the server's
    manager's, not this call's: a server is started by its manager."""
    started = time.perf_counter()
    assert isinstance(hook.target, str)
    server, tool = split_tool(hook.target)
    report = await _call(hook, ctx, frame, (server, tool), started)
    return attrs.evolve(report, frame=attrs.evolve(report.frame, server=server, tool=tool))


async def _call(
    hook: Hook, ctx: HookContext, frame: FrameBuilder, target: tuple[str, str], started: float
) -> HookReport:
    server, tool = target
    if ctx.servers is None:
        return frame.failed(HookStatus.FAILED, "no tool servers where this hook runs", started)
    try:
        spec = ctx.servers.spec(server)
        args = resolve(dict(hook.args or {}), plugin_names(hook, frame.clamped.effect.word, ctx))
    except (ServerFailing, PlaceholderError) as exc:
        return frame.failed(HookStatus.FAILED, str(exc), started)
    frame_sandbox = spec.sandbox.value
    with trio.move_on_after(hook.timeout_ms / 1000) as deadline:
        try:
            result, _ = await ctx.servers.manager.call(spec, tool, args, run_id=ctx.run_id)
        except AnswerTooLarge as exc:  # ended as soon as it passed the bound, not at timeoutMs
            why = f"the tool's answer is too large ({exc})"
            return _in(frame.failed(HookStatus.KILLED, why, started), frame_sandbox)
        except (ServerFailing, ToolFailed) as exc:
            report = frame.failed(HookStatus.FAILED, ctx.redactor.text(str(exc)), started)
            return _in(report, frame_sandbox)
    if deadline.cancelled_caught:
        why = _timed_out(hook, spec, ctx.servers.manager.entries.get(spec))
        return _in(frame.failed(HookStatus.TIMEOUT, why, started), frame_sandbox)
    text = answer_text(result)
    if result.is_error:
        said = ctx.redactor.cut(text[:_ERROR_TEXT], end=len(text) > _ERROR_TEXT)
        why = f"the tool answered isError: {said}"
        return _in(frame.failed(HookStatus.FAILED, why, started), frame_sandbox)
    try:
        data = tool_answer(result, hook.answer)
    except InvalidOutput as exc:
        head = stdout_head(text.encode(), ctx.redactor)
        report = frame.failed(HookStatus.INVALID_OUTPUT, str(exc), started, stdout_head=head)
        return _in(report, frame_sandbox)
    if len(data) > hook.max_output_bytes:
        why = f"the tool's answer is too large: over maxOutputBytes ({hook.max_output_bytes})"
        return _in(frame.failed(HookStatus.KILLED, why, started), frame_sandbox)
    outcome = Outcome(exit_code=0, exited=True, stdout=bytearray(data))
    report = frame.finished(outcome, False, started, ctx.redactor)
    if (note := advice_note(result, hook.answer)) is not None:
        shown = attrs.evolve(report.frame, answer_note=ctx.redactor.text(note))
        report = attrs.evolve(report, frame=shown)
    return _in(report, frame_sandbox)


def _timed_out(hook: Hook, spec: ServerSpec, entry: ServerEntry | None) -> str:
    """Why the hook timed out: in the tool's call, or before it, while its server was still
    starting (a start of `startTimeoutMs` may outlast the hook: the tool was never asked)."""
    if entry is not None and entry.state == "starting":
        return (
            f"timed out after {hook.timeout_ms} ms while server {spec.name} was still starting"
            f" (its startTimeoutMs is {spec.start_timeout_ms} ms); the tool was not called"
        )
    return (
        f"the tool call timed out after {hook.timeout_ms} ms; it was cancelled on the"
        " server (notifications/cancelled)"
    )


def tool_answer(result: types.CallToolResult, mode: PluginAnswer) -> bytes:
    """The tool's answer as a hook's stdout would say it, read by `mode` (the module
    docstring). Raises `InvalidOutput` when `mode` is `hook` and it is no answer object, and
    when the answer object holds NaN or an infinity (not JSON, though a server may say it)."""
    text, structured, found = _read(result)
    if mode is not PluginAnswer.ADVICE:
        if isinstance(found, dict) and found.keys() <= KEY_EFFECT.keys():
            try:  # (a server's JSON may say NaN, which the SDK takes and no answer may hold)
                return json.dumps(found, allow_nan=False).encode()
            except ValueError:
                raise InvalidOutput(
                    "the tool answered an answer object holding a number JSON cannot say"
                    " (NaN or Infinity)"
                ) from None
        if mode is PluginAnswer.HOOK:
            strangers = found.keys() - KEY_EFFECT.keys() if isinstance(found, dict) else ()
            keys = ", ".join(sorted(strangers))
            raise InvalidOutput(
                'answer = "hook": the tool answered '
                + (f"keys that are not answer keys ({keys})" if keys else "no JSON object")
                + f"; answer keys: {', '.join(KEY_EFFECT)}"
            )
    said = text.strip() or ("" if structured is None else json.dumps(structured))
    return json.dumps({TEXT_KEY: said}).encode() if said else b""


def _read(result: types.CallToolResult) -> tuple[str, Any, Any]:
    """The tool's text content, its structured content, and the object an answer is read
    from: the structured content, else the text parsed when it is one JSON object."""
    # By its `type`, not its class: the SDK is not imported until a server starts.
    text = "".join(getattr(c, "text", "") for c in result.content if c.type == "text")
    structured = result.structured_content
    return text, structured, structured if structured is not None else _json_object(text)


def advice_note(result: types.CallToolResult, mode: PluginAnswer) -> str | None:
    """Where `auto` took as advice an object that looked like an answer object (an answer
    key beside keys that are none, or a key that is one but for its case, `Refuse`), why in
    words, so the tool's author learns that a refusal was not taken; else None."""
    _, _, found = _read(result)
    if mode is not PluginAnswer.AUTO or not isinstance(found, dict):
        return None
    keys = [str(k) for k in found]
    known = [k for k in keys if k in KEY_EFFECT]
    strangers = [k for k in keys if k not in KEY_EFFECT]
    cased = [k for k in strangers if k.lower() in KEY_EFFECT]
    if not strangers or not (known or cased):
        return None
    if cased:
        why = ", ".join(f"{_key(k)} is not {k.lower()}" for k in cased[:_KEYS_SAID])
        why += " (answer keys are lower case)"
    else:
        others = ", ".join(_key(k) for k in strangers[:_KEYS_SAID])
        more = f" and {len(strangers) - _KEYS_SAID} more" if len(strangers) > _KEYS_SAID else ""
        why = f"beside {', '.join(known)} it holds keys that are not answer keys ({others}{more})"
    return (
        f'answer = "auto" took the tool\'s answer as advice, not as an answer object: {why};'
        f" an answer object holds answer keys only ({', '.join(KEY_EFFECT)})"
    )


#: How many of an answer's keys a note names, and how much of each.
_KEYS_SAID: Final = 5
_KEY_CHARS: Final = 40


def _key(key: str) -> str:
    """A key of the tool's as a note names it: quoted, cut at `_KEY_CHARS`."""
    return json.dumps(key if len(key) <= _KEY_CHARS else key[:_KEY_CHARS] + "…")


def _json_object(text: str) -> Any:
    """`text` parsed as JSON when it is one JSON object, else None."""
    if not text.strip().startswith("{"):
        return None
    try:
        return loads(text)
    except JsonError:
        return None


def _in(report: HookReport, sandbox: str) -> HookReport:
    """The report with the server's sandbox, and no process fields (no process of its own)."""
    shown = attrs.evolve(report.frame, sandbox=sandbox, exit_code=None, resources=None)
    return attrs.evolve(report, frame=shown)
