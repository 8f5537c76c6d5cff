"""`exec --explain`: which hooks a run would fire, in the order they would run, and why each
other hook will not (left out by `--skip`/`--only`/`MCPX_HOOKS_SKIP`, `enabled = false`, its
`when`, a project file not trusted), without running anything. `explain` is pure; `run`
loads the config as `exec` does and prints.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import attrs

from ..core.places import hook_place, shown_file
from ..core.records import Record

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from ..core.effects import Effect
    from ..core.hooks import Config, Hook
    from ..core.redact import Redactor
    from ..core.when import RunFacts


#: The points a run passes through only when its script calls tools.
_TOOL_POINTS: dict[str, str] = {
    "call": "tool call the script makes",
    "server.start": "tool server start",
}


def _phase_order() -> dict[str, int]:
    """The phases in the order a run reaches them (`onSuccess` and `onError`: one of them)."""
    from ..core.points import Phase

    return {p.value: i for i, p in enumerate(Phase)}


@attrs.frozen(repr=False, eq=False)
class ToolFacts(Record):
    """What the tool points' hooks are explained against: the configured servers, the call
    `--tool SERVER.TOOL` names (None: any), and each server's pinned tool names (None: no
    pin)."""

    servers: tuple[str, ...] = ()
    call: tuple[str, str] | None = None
    pinned: Callable[[str], Sequence[str] | None] = lambda server: None


def _why_not(hook: Hook, facts: RunFacts, left: Mapping[str, str], tools: ToolFacts) -> str | None:
    """Why `hook` will not run for the run `facts` describes (`left`: the hooks the run
    leaves out, and what leaves each out; `tools`: the servers and call its tool points'
    hooks meet), or None when it will."""
    from ..core.points import Phase, When
    from ..core.when import event_mismatch, run_mismatch

    if hook.name in left:
        return f"left out of this run: {left[hook.name]}"
    if not hook.enabled:
        return "enabled = false"
    if hook.prompt is not None and hook.prompt.model is None:
        name = hook.prompt.model_name
        return f"no model configured: no [models.{name}] (its frame says skipped, with a warning)"
    if hook.phase is Phase.OBSERVE:
        # What an observe hook sees of this run is its command line; the kinds are `on`'s.
        when = {k: v for k, v in hook.when.items() if k != When.KINDS}
        return event_mismatch(when, "", facts.argv)
    if hook.on in _TOOL_POINTS:
        from . import explaintools

        return explaintools.why_not(hook, tools.servers, tools.call)
    return run_mismatch(hook.when, facts)


def _when_runs(hook: Hook, tools: ToolFacts) -> str:
    from ..core.points import Phase

    if hook.phase is not Phase.OBSERVE and hook.on == "call" and tools.call is not None:
        return f"{hook.phase.value} of a call to {'.'.join(tools.call)}, if the script makes one"
    if hook.phase is not Phase.OBSERVE and hook.on == "server.start" and tools.call:
        return f"{hook.phase.value} of the start of {tools.call[0]}, if the call starts it"
    if hook.phase is not Phase.OBSERVE and hook.on in _TOOL_POINTS:
        return f"{hook.phase.value} of each {_TOOL_POINTS[hook.on]}, if any"
    return {
        Phase.BEFORE: "before the script",
        Phase.ON_SUCCESS: "if the script succeeds",
        Phase.ON_ERROR: "if the script fails",
        Phase.SUFFIX: "after the outcome, on both paths",
        Phase.OBSERVE: f"after the fact, on the events {hook.on}",
    }.get(hook.phase, hook.phase.value)


def _note(hook: Hook, facts: RunFacts, tools: ToolFacts) -> dict[str, str]:
    """Why a hook that runs does, where its `when.files` decided it; for a tool point's hook
    (with no `--tool`), what its `when` matches of the servers and their pinned tools."""
    from ..core.changes import files_note
    from ..core.points import Phase, When

    if hook.on in _TOOL_POINTS and hook.phase is not Phase.OBSERVE and tools.call is None:
        from . import explaintools

        said = explaintools.note(hook, tools.servers, tools.pinned)
        return {} if said is None else {"note": said}
    files = hook.when.get(When.FILES)
    if files is None or hook.phase is Phase.OBSERVE:
        return {}
    return {"note": files_note(files, facts.changed)}


def explain(
    config: Config,
    facts: RunFacts,
    autonomy: Effect | None = None,
    left: Mapping[str, str] | None = None,
    tools: ToolFacts | None = None,
) -> dict[str, Any]:
    """What `exec --explain --json` prints: the run, its hooks in run order (those that run
    first, each phase in declaration order; then those that will not, with why: `left`
    names those the run leaves out, `--skip` and the like), each with
    its effect in force (clamped by its phase, `autonomy` or the config's `hooks.autonomy`,
    and `autonomy.max`), the inline source lines, and the project files not applied (their
    hooks are not in force). `tools`: what the `call` and `server.start` hooks are explained
    against (default: the config's servers, no pins, any call)."""
    from ..core.hooks import caller_autonomy, effect_in_force, provenance_json

    caller = caller_autonomy(config, autonomy)
    tools = tools or ToolFacts(tuple(config.servers))

    order = _phase_order()
    rows = []
    for index, hook in enumerate(config.hooks):
        why = _why_not(hook, facts, left or {}, tools)
        effect = effect_in_force(hook, caller, config.autonomy_max)
        rows.append(
            (
                why is not None,
                order[hook.phase.value],
                index,
                {
                    "name": hook.name,
                    "on": hook.on,
                    "phase": hook.phase.value,
                    "action": hook.action,
                    "effect": effect.effect.word,
                    "requestedEffect": hook.effect.word,
                    **({"callerAutonomyIgnored": True} if effect.caller_ignored else {}),
                    "source": provenance_json(hook.source),
                    "runs": why is None,
                    **({"when": dict(hook.when)} if hook.when else {}),
                    **({"parallel": True} if hook.parallel else {}),
                    **({"why": why} if why is not None else {"at": _when_runs(hook, tools)}),
                    **(_note(hook, facts, tools) if why is None else {}),
                },
            )
        )
    rows.sort(key=lambda r: r[:3])
    return {
        "argv": list(facts.argv),
        "cwd": facts.cwd,
        **({"tool": ".".join(tools.call)} if tools.call is not None else {}),
        "hooks": [row[3] for row in rows],
        "script": {phase.value: len(lines) for phase, lines in config.script.items() if lines},
        "skippedFiles": [
            {"file": s.file, "reason": s.reason, "trustCommand": s.trust_command}
            for s in config.skipped
        ],
    }


def _where(source: Any) -> str:
    if isinstance(source, dict):
        return hook_place(source["file"], source["index"])
    return str(source)


def explain_lines(plan: dict[str, Any]) -> list[str]:
    """`exec --explain` for a person (what it shows of the hooks is data: `printable.py`)."""
    from .printable import command, continued_lines, printable

    lines = [f"a run of {command(plan['argv'])} in {shown_file(plan['cwd'])}"]
    if "tool" in plan:
        lines[0] += f", for a call it would make to {plan['tool']}"
    hooks: Sequence[dict[str, Any]] = plan["hooks"]
    running = [h for h in hooks if h["runs"]]
    lines.append("would run, in order:" if running else "would run no hooks")
    for n, h in enumerate(running, start=1):
        together = ", at once with its parallel neighbours" if h.get("parallel") else ""
        lines.append(
            f"  {n}. {h['phase']} {printable(h['name'])} ({h['action']}, {h['effect']}{together}):"
            f" {h['at']}  [{_where(h['source'])}]"
        )
        if "note" in h:
            lines.append(f"     {h['note']}")
    for phase, count in plan["script"].items():
        lines.append(f"  [script] {phase}: {count} inline source line(s), in a Python script")
    idle = [h for h in hooks if not h["runs"]]
    if idle:
        lines.append("will not run:")
        lines.extend(
            f"  {h['phase']} {printable(h['name'])}: {h['why']}  [{_where(h['source'])}]"
            for h in idle
        )
    if plan["skippedFiles"]:
        lines.append("not applied (their hooks are not in force):")
    for skipped in plan["skippedFiles"]:
        trust = f"; trust it with: {skipped['trustCommand']}" if skipped["trustCommand"] else ""
        lines.append(f"  {shown_file(skipped['file'])}: {skipped['reason']}{trust}")
    return continued_lines(lines)


def _redactor(config: Config, secret_names: Sequence[str]) -> Redactor:
    """What the run would redact: its own secrets (`[script] secrets`, then `--secret`), its
    hooks' and its tool servers' (a secret's value could be in its argv, a hook's `when`)."""
    import os

    from ..core.passenv import pass_environment
    from ..core.redact import Redactor
    from ..core.servers import server_secrets
    from ..run.hookcontext import hook_secrets

    names = (*config.script_secrets, *secret_names)
    secrets = {**hook_secrets(config.hooks, os.environ, os.environ)}
    secrets.update(pass_environment((), names, os.environ).secrets)
    secrets.update(server_secrets(config.servers.values(), os.environ))
    return Redactor(secrets)


def run(
    args: argparse.Namespace, argv: Sequence[str], lines: Mapping[str, Sequence[str | None]]
) -> int:
    """Loads the config as `exec` would (its warnings on stderr), prints the plan, exits 0.
    Nothing runs, and stdin is read only for `--files-from -`."""
    from ..core.effects import Effect
    from ..core.points import When
    from ..core.scripts import Script
    from ..core.selection import SelectionError, env_unknown, left_out
    from ..core.when import RunFacts
    from .common import EXIT_OK, Usage, load, run_async, say
    from .execrequest import files_from, selection

    config = load(args, args.hooks, lines or None)
    try:
        left = left_out(config, selection(args))
    except SelectionError as exc:
        raise Usage(str(exc)) from None
    if (unknown := env_unknown(config, selection(args))) is not None:
        say(f"mcpx-hooks: warning: {unknown}")
    script = Script(tuple(argv) or None, args.python, args.code)
    autonomy = Effect.parse(args.autonomy) if args.autonomy is not None else None
    cwd = str(Path.cwd())
    changed = files_from(args)
    if changed is None and any(When.FILES in h.when for h in config.hooks):
        from ..run.gitchanges import git_changes

        changed = run_async(git_changes, cwd, config.when_base)
    tools = ToolFacts(tuple(config.servers), _tool_call(args), _pinned(config))
    plan = explain(config, RunFacts(script.shown_argv, cwd, changed), autonomy, left, tools)
    plan = _redactor(config, args.secrets).value(plan)
    if args.json:
        print(json.dumps(plan), flush=True)
    else:
        print("\n".join(explain_lines(plan)), flush=True)
    return EXIT_OK


def _tool_call(args: argparse.Namespace) -> tuple[str, str] | None:
    from . import explaintools
    from .common import Usage

    if args.tool is None:
        return None
    call = explaintools.parse_tool(args.tool)
    if call is None:
        raise Usage(f"--tool {args.tool!r}: name a tool as SERVER.TOOL (lint.check)")
    return call


def _pinned(config: Config) -> Callable[[str], Sequence[str] | None]:
    """Each configured server's pinned tool names, read from the trust state when first asked
    (once a server, however many hooks ask)."""
    import functools
    import os

    @functools.cache
    def pinned(server: str) -> Sequence[str] | None:
        from ..tools import pinned_names

        spec = config.servers.get(server)
        return None if spec is None else pinned_names(spec, os.environ)

    return pinned
