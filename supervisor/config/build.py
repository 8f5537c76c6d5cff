"""The `Config` in force, built from validated layers.

The layers are merged farthest first (`layering.py`: tables key by key, lists by the
null-splice rule, `[sandbox]` paths appended; `policy.py`: ceilings only fall, locked hooks
stay), then each hook declaration gets its name, the
defaults it does not override (`Defaults.overridden`), the config's limits and sandbox paths.
The rules that need every layer are checked here: names unique after defaulting, and
`failure = "closed"` only with an effect that may refuse.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..core import egress
from ..core.effects import DEFAULT_MAX, PARALLEL_MAX, REFUSING, Effect
from ..core.errors import Problem
from ..core.hooks import (
    DEFAULT_ARTIFACT_BYTES,
    DEFAULT_HISTORY_BYTES,
    DEFAULT_HISTORY_DAYS,
    DEFAULT_OBSERVE_DRAIN_MS,
    DEFAULT_RETAIN_BYTES,
    DEFAULT_RUN_BYTES,
    DEFAULT_RUN_SANDBOX,
    DEFAULT_RUNS_RETAIN,
    DEFAULT_SEPARATOR,
    DEFAULT_SERVICE_SANDBOXES,
    DEFAULTS,
    HOOK_SETTINGS,
    Action,
    Config,
    Defaults,
    Failure,
    Hook,
    PluginAnswer,
    Profile,
    Provenance,
    SandboxPaths,
    effect_in_force,
)
from ..core.kinds import declared_actions
from ..core.limits import Limits
from ..core.models import PROMPT_TIMEOUT_MS, build_models, prompt_spec
from ..core.passenv import PASS_ENV_KEY, SECRETS_KEY
from ..core.points import DEFAULT_PHASE, Phase
from ..core.records import Record
from ..core.servers import ServerSpec, server_spec, split_tool
from .pluginrules import (
    exposed_name_warnings,
    plugin_problems,
    server_env_problems,
    server_name_warnings,
    unknown_server_warnings,
)
from .policy import merge_layers
from .salvage import WHOLE, unknown_in_force
from .schemaparts import SCRIPT_PHASES
from .serverrules import server_problems


@attrs.frozen(repr=False, eq=False)
class Decl(Record):
    """A hook object as declared, and where: the problem file, its pointer, its provenance."""

    obj: Mapping[str, Any]
    file: str
    pointer: str
    source: Provenance
    declaring_dir: str
    #: A locked hook's: the `[defaults]` table in force where it was declared (`policy.py`).
    defaults: Mapping[str, Any] | None = None
    #: `validate`: the keys a problem is under, taken out of `obj` (`salvage.py`); None: sound.
    unsound: frozenset[str] | None = None


@attrs.frozen(repr=False, eq=False)
class Layer(Record):
    """A validated layer; its `hooks` items are `Decl`s (or `None` to splice)."""

    file: str
    doc: Mapping[str, Any]
    path: str | None = None
    #: `validate`: the table entries a problem took out (`salvage.Salvaged.unknown`).
    unknown: frozenset[tuple[str, ...]] = frozenset()


def resolve(layers: Sequence[Layer]) -> tuple[Config, list[Problem]]:
    """Merges validated layers and builds the hooks in force, with the rules that need them
    all: names unique after defaulting, `failure = "closed"` only with a refusing effect."""
    policy = merge_layers(layers)
    merged = policy.doc
    defaults = DEFAULTS.overridden(merged.get("defaults", {}))
    limits = Limits.from_table(merged.get("limits", {}))
    table = merged.get("sandbox", {})
    deny = tuple(table.get("deny", ()))
    paths = SandboxPaths(
        tuple(table.get("read", ())), tuple(table.get("write", ())), deny, _deny_at(layers, deny)
    )
    roots = merged.get("service", {}).get("roots")
    models = build_models(merged.get("models", {}))
    hooks: list[Hook] = []
    problems: list[Problem] = list(policy.problems)
    for layer in layers:
        problems += server_env_problems(layer.file, layer.doc.get("servers", {}))
    unknown = unknown_in_force((layer.doc, layer.unknown) for layer in layers)
    problems += server_problems(
        [(layer.file, layer.doc.get("servers", {})) for layer in layers],
        merged.get("servers", {}),
        unknown,
    )
    seen: dict[str, tuple[int, Decl]] = {}
    counts: dict[tuple[str, str], int] = {}
    common = _Common(declared_actions(), defaults, attrs.asdict(defaults, recurse=False))
    decls: list[Decl] = merged.get("hooks", [])
    # A hook whose point is not known (`validate`: a problem took it out) shifts the numbers
    # of the default names after it: those are not held unique then.
    certain = all(_slot(decl) is not None for decl in decls)
    parallel: list[tuple[Hook, Decl]] = []
    for position, decl in enumerate(decls):
        obj, bad = decl.obj, decl.unsound or frozenset()
        slot = _slot(decl)
        index = 0 if slot is None else counts.setdefault(slot, -1) + 1
        if slot is not None:
            counts[slot] = index
        default = f"{slot[0]}.{slot[1]}.{index}" if slot and certain else None
        name = None if "name" in bad else obj.get("name") or default
        if name is not None:
            problems += _unique(seen, name, position, decl)
        if not bad.isdisjoint(_FRAME) or not any(a in obj for a in common.actions):
            continue  # (its point or action not known: nothing else of it can be checked)
        hook = _build_hook(decl, name or "", common, limits=limits, paths=paths)
        if hook.action == Action.PROMPT:  # its model resolved; its own timeout, else 30 s
            timeout = obj.get("timeoutMs", PROMPT_TIMEOUT_MS)
            hook = attrs.evolve(hook, prompt=prompt_spec(obj, models), timeout_ms=timeout)
        effect_known = "effect" not in bad and (
            "effect" in obj or decl.defaults is not None or not unknown("defaults", "effect")
        )
        if hook.failure is Failure.CLOSED and hook.effect < REFUSING and effect_known:
            origin = "" if "effect" in obj else " (the default)"
            problems.append(
                Problem(
                    decl.file,
                    f"{decl.pointer}/failure",
                    f'failure "closed" needs an effect that may refuse the run ("{REFUSING.word}"'
                    f' or above), found effect "{hook.effect.word}"{origin}',
                )
            )
        sandbox_known = "sandbox" not in bad and (
            "sandbox" in obj or decl.defaults is not None or not unknown("defaults", "sandbox")
        )
        if (
            egress.NETWORK_KEY in obj
            and hook.sandbox.value not in egress.CONFINING
            and sandbox_known
        ):
            why = egress.unconfined(hook.sandbox.value)
            if "sandbox" not in obj:
                why += " (its sandbox is [defaults] sandbox)"
            problems.append(Problem(decl.file, f"{decl.pointer}/{egress.NETWORK_KEY}", why))
        if hook.action == Action.PLUGIN:
            server, _ = split_tool(str(hook.target))
            declared = None if unknown("servers", server) else merged.get("servers", {})
            problems += plugin_problems(hook, decl.file, decl.pointer, declared)
        if (
            hook.parallel
            and effect_known
            and not unknown.table("autonomy")
            and not bad & {"phase", "locked"}
        ):
            parallel.append((hook, decl))
        if decl.unsound is None:
            hooks.append(hook)
    autonomy = merged.get("autonomy", {})
    runs = merged.get("runs", {})
    history = merged.get("history", {})
    config = Config(
        hooks=tuple(hooks),
        script={
            Phase(phase): tuple(merged["script"][phase])
            for phase in SCRIPT_PHASES
            if merged.get("script", {}).get(phase)
        },
        autonomy_max=Effect.parse(autonomy["max"]) if "max" in autonomy else DEFAULT_MAX,
        autonomy_hooks=Effect.parse(autonomy["hooks"]) if "hooks" in autonomy else Effect.RUN,
        defaults=defaults,
        runs_retain=int(runs.get("retain", DEFAULT_RUNS_RETAIN)),
        runs_run_bytes=int(runs.get("runBytes", DEFAULT_RUN_BYTES)),
        runs_retain_bytes=int(runs.get("retainBytes", DEFAULT_RETAIN_BYTES)),
        runs_artifact_bytes=int(runs.get("artifactBytes", DEFAULT_ARTIFACT_BYTES)),
        history_enabled=bool(history.get("enabled", True)),
        history_path=_history_path(history.get("path")),
        history_retain_days=int(history.get("retainDays", DEFAULT_HISTORY_DAYS)),
        history_retain_bytes=int(history.get("retainBytes", DEFAULT_HISTORY_BYTES)),
        service_sandboxes=tuple(
            Profile(p)
            for p in merged.get("service", {}).get(
                "sandboxes", [p.value for p in DEFAULT_SERVICE_SANDBOXES]
            )
        ),
        service_roots=None if roots is None else tuple(dict.fromkeys(roots)),
        limits=limits,
        sandbox_paths=paths,
        models=models,
        observe_drain_ms=int(merged.get("observe", {}).get("drainMs", DEFAULT_OBSERVE_DRAIN_MS)),
        script_sandbox=Profile(merged.get("script", {}).get("sandbox", DEFAULT_RUN_SANDBOX.value)),
        script_pass_env=tuple(merged.get("script", {}).get(PASS_ENV_KEY, ())),
        script_secrets=_secret_names(merged.get("script", {})),
        script_secret_hosts=_secret_hosts(merged.get("script", {})),
        script_network=_network(merged.get("script", {})),
        files=tuple(layer.path for layer in layers if layer.path is not None),
        warnings=tuple(policy.warnings),
        servers=_servers(layers, merged, limits, paths, models.key_names),
        mcp_separator=str(merged.get("mcp", {}).get("separator", DEFAULT_SEPARATOR)),
        mcp_exec=bool(merged.get("mcp", {}).get("exec", True)),
        when_base=merged.get("when", {}).get("base"),
    )
    problems += _parallel_problems(config, parallel)
    named = exposed_name_warnings(config.hooks, config.servers, config.mcp_separator)
    named += server_name_warnings(config.servers, config.mcp_separator)
    named += unknown_server_warnings(config.hooks, config.servers)
    if named:
        config = attrs.evolve(config, warnings=(*config.warnings, *named))
    return config, problems


def _unique(
    seen: dict[str, tuple[int, Decl]], name: str, position: int, decl: Decl
) -> list[Problem]:
    """A problem when `name` was a hook's before (`seen`: each name's first hook)."""
    first_position, first = seen.setdefault(name, (position, decl))
    if first_position == position:
        return []
    # `first is decl`: one declaration spliced in at two nulls.
    again = "spliced in twice" if first is decl else "again"
    where = f"{decl.pointer}/name" if "name" in decl.obj else decl.pointer
    said = f'expected a unique hook name, found "{name}" {again} (first declared at'
    return [Problem(decl.file, where, f"{said} {first.file}:{first.pointer or '/'})")]


def _slot(decl: Decl) -> tuple[str, str] | None:
    """The point and phase of `decl`'s hook, which number its default name; None when a
    problem took one of them out (`validate`)."""
    if decl.unsound is not None and not decl.unsound.isdisjoint(_SLOT):
        return None
    on = decl.obj.get("on")
    return (on, decl.obj.get("phase", _DEFAULT_WORDS[0])) if isinstance(on, str) else None


def _parallel_problems(config: Config, pairs: Sequence[tuple[Hook, Decl]]) -> list[Problem]:
    """Each `parallel = true` hook (of `pairs`: the parallel hooks and their declarations)
    whose effect in force, as far as the config knows it (its phase, the config's
    `[autonomy] hooks` unless it is locked, `autonomy.max`), is above `PARALLEL_MAX`: hooks
    at once may not refuse, ask or replace (a caller's level can only lower it further)."""
    problems = []
    for hook, decl in pairs:
        effect = effect_in_force(hook, config.autonomy_hooks, config.autonomy_max).effect
        if effect > PARALLEL_MAX:
            problems.append(
                Problem(
                    decl.file,
                    f"{decl.pointer}/parallel",
                    f"parallel = true needs an effect in force of at most"
                    f' "{PARALLEL_MAX.word}" (hooks run at once may only advise), found'
                    f' "{effect.word}": lower its effect, or leave out parallel to run it in'
                    " turn",
                )
            )
    return problems


def _secret_names(table: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of `secrets` (each a name, or `{ name, hosts }`)."""
    return tuple(s if isinstance(s, str) else s["name"] for s in table.get(SECRETS_KEY, ()))


def _secret_hosts(table: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The secrets of `secrets` declared with hosts: name -> hosts."""
    return {s["name"]: tuple(s["hosts"]) for s in table.get(SECRETS_KEY, ()) if isinstance(s, dict)}


def _deny_at(layers: Sequence[Layer], deny: tuple[str, ...]) -> tuple[str, ...]:
    """Where each `[sandbox] deny` path in force is declared: the first layer that names it
    (the lists append, farthest first), as `FILE:/sandbox/deny/N`."""
    found: dict[str, str] = {}
    for layer in layers:
        table = layer.doc.get("sandbox")
        items = table.get("deny", ()) if isinstance(table, Mapping) else ()
        for index, path in enumerate(items):
            found.setdefault(path, f"{layer.file}:/sandbox/deny/{index}")
    return tuple(found.get(path, "") for path in deny)


def _network(table: Mapping[str, Any]) -> tuple[str, ...] | None:
    return tuple(table["network"]) if "network" in table else None


def _history_path(value: object) -> str | None:
    """`[history] path` as a path to open: absolute, or `~` expanded (the schema holds it
    to those two)."""
    return None if value is None else os.path.expanduser(str(value))


def _servers(
    layers: Sequence[Layer],
    merged: Mapping[str, Any],
    limits: Limits,
    paths: SandboxPaths,
    withheld: frozenset[str],
) -> dict[str, ServerSpec]:
    """`[servers]` merged; each server's declaring directory is that of the nearest layer
    that gave its `command`."""
    dirs: dict[str, str] = {}
    for layer in layers:
        for name, table in layer.doc.get("servers", {}).items():
            if "command" in table or "url" in table:
                dirs[name] = os.path.dirname(layer.path) if layer.path else os.getcwd()
    return {
        name: attrs.evolve(
            server_spec(name, table, dirs.get(name, os.getcwd())),
            limits=limits,
            paths=paths,
            withheld=withheld,
        )
        for name, table in merged.get("servers", {}).items()
    }


#: What numbers a hook's default name; and what it is built from (`validate`: a hook a
#: problem took one of them out of is not built, `salvage.py`).
_SLOT: Final = frozenset({WHOLE, "on", "phase"})
_FRAME: Final = _SLOT | frozenset(declared_actions())
#: The keys of a hook that override its `[defaults]`.
_OVERRIDING: Final = frozenset({*(s.key for s in HOOK_SETTINGS), egress.NETWORK_KEY})
#: The words of the tables' enums, looked up once a hook (a call of the enum costs more).
_PHASES: Final = {p.value: p for p in Phase}
_FAILURES: Final = {f.value: f for f in Failure}
_ANSWERS: Final = {a.value: a for a in PluginAnswer}
_DEFAULT_WORDS: Final = (DEFAULT_PHASE.value, Failure.OPEN.value, PluginAnswer.AUTO.value)


@attrs.frozen(repr=False, eq=False)
class _Common(Record):
    """What every hook of a config is built with: the action words, the `[defaults]` in
    force and their fields (what a hook that overrides none of them takes as they are)."""

    actions: tuple[str, ...]
    defaults: Defaults
    fields: Mapping[str, Any]

    def defaulted(self, decl: Decl) -> Mapping[str, Any]:
        """The timeout, kill grace, output cap, effect, sandbox and network of `decl`'s hook:
        its own, else those of `[defaults]` (a locked hook's: where it was declared)."""
        obj = decl.obj
        if decl.defaults is None and _OVERRIDING.isdisjoint(obj):
            return self.fields
        own = self.defaults if decl.defaults is None else DEFAULTS.overridden(decl.defaults)
        return attrs.asdict(own.overridden(obj), recurse=False)


def _build_hook(decl: Decl, name: str, common: _Common, **config: Any) -> Hook:
    """The hook `decl` declares, named `name`, with the `[defaults]` of `common` for what it
    does not set and the config's `limits` and `paths` (built once: a file may hold 50,000
    hooks)."""
    obj = decl.obj
    action = next(a for a in common.actions if a in obj)
    target = obj[action]
    cwd = obj.get("cwd")
    phase, failure, answer = _DEFAULT_WORDS
    return Hook(
        name=name,
        on=obj["on"],
        phase=_PHASES[obj.get("phase", phase)],
        action=action,
        target=tuple(target) if isinstance(target, list) else target,
        declaring_dir=decl.declaring_dir,
        source=decl.source,
        failure=_FAILURES[obj.get("failure", failure)],
        env=dict(obj.get("env", {})),
        pass_env=tuple(obj.get(PASS_ENV_KEY, ())),
        secrets=_secret_names(obj) if SECRETS_KEY in obj else (),
        secret_hosts=_secret_hosts(obj) if SECRETS_KEY in obj else {},
        enabled=bool(obj.get("enabled", True)),
        locked=bool(obj.get("locked", False)),
        when=dict(obj.get("when", {})),
        parallel=bool(obj.get("parallel", False)),
        cwd=None if cwd is None else os.path.normpath(os.path.join(decl.declaring_dir, cwd)),
        args=dict(obj["args"]) if "args" in obj else None,
        answer=_ANSWERS[obj.get("answer", answer)],
        **common.defaulted(decl),
        **config,
    )
