"""The config schema: a config layer, and one `[[hooks]]` entry, built from the tables.

Enums come from `points.py`, `effects.py` and `hooks.py`; the hook settings and their defaults
from `hooks.HOOK_SETTINGS`; the `[limits]` keys from `limits.LIMIT_KEYS`.
"""

from __future__ import annotations

from typing import Any, Final

from ..core.effects import DEFAULT_MAX, PARALLEL_MAX, REFUSING, Effect
from ..core.events import ANY_KIND, kind_prefixes
from ..core.hooks import (
    DEFAULT_OBSERVE_DRAIN_MS,
    DEFAULT_RUN_SANDBOX,
    DEFAULT_SERVICE_SANDBOXES,
    HOOK_SETTINGS,
    PLUGIN_ANSWER_MEANING,
    Action,
    Failure,
    HookSetting,
    PluginAnswer,
    Profile,
)
from ..core.kinds import HOOK_KINDS, declared_actions
from ..core.limits import DEFAULT_LIMITS, LIMIT_DOCS, LIMIT_KEYS
from ..core.points import DEFAULT_PHASE, OBSERVE_WHEN, POINTS, WHEN_KEYS, Phase
from ..core.spawntext import ENV_NAME_PATTERN, TEXT_PATTERN
from .childschema import NETWORK_KEY, network_schema, pass_keys
from .modelschema import hook_prompt_keys, models_schema
from .runschema import history_schema, runs_schema
from .schemaparts import (
    EFFECT_REF,
    MAX_INTEGER,
    MAX_RLIMIT,
    SCRIPT_PHASES,
    enum_of,
    header,
    integer,
    string,
    strings,
    table,
    target,
    text,
)
from .serverschema import mcp_schema, servers_schema

#: Where a word-valued hook setting's enum is, by the type of its value.
_SETTING_REFS: Final[dict[type, str]] = {Effect: "#/$defs/effect", Profile: "#/$defs/sandbox"}


def _setting(setting: HookSetting, description: str) -> dict[str, Any]:
    """A hook setting's schema, in `[defaults]` or on a hook."""
    if setting.minimum is not None:
        return integer(setting.minimum, description)
    return {"$ref": _SETTING_REFS[type(setting.default)], "description": description}


def _shown(setting: HookSetting) -> str:
    written = setting.written
    return f"`{written}`" if isinstance(written, str) else str(written)


def _patterns(description: str, pattern: str | None = None) -> dict[str, Any]:
    found = strings(description, minItems=1)
    if pattern is not None:
        found["items"] = {"type": "string", "pattern": pattern}
    return found


def _when_def() -> dict[str, Any]:
    """`when`: every key some point provides. Which keys a hook's point provides is the
    loader's rule (`loading.py`), said with the point's name; a key no point provides passes
    the schema to meet that rule too, so every refused key gets the same sentence."""
    by_point = "; ".join(
        f"`{p.name}`: {', '.join(f'`{k}`' for k in p.when)}" for p in POINTS.values()
    )
    observe = ", ".join(f"`{k}`" for k in OBSERVE_WHEN)
    return {
        "type": "object",
        "properties": {
            k.key: _patterns(k.against[:1].upper() + k.against[1:] + ".", k.pattern)
            for k in WHEN_KEYS.values()
        },
        # Any other key is the loader's to refuse, in one sentence that names the point.
        "additionalProperties": {"description": "Not a key this hook's point provides."},
        "description": "Where the hook fires: each key a list of patterns, any one of which"
        " may match; every key given must match. The keys a point provides: "
        + by_point
        + f"; observe hooks: {observe}. Any other key is refused.",
    }


def _hook_def() -> dict[str, Any]:
    points = list(POINTS)
    hook = table(
        {
            "name": text("Unique; default `<on>.<phase>.<index>`.", minLength=1),
            "on": text(
                "The point (one of " + ", ".join(points) + "), or for observe hooks the event"
                f" kind (or kind prefix; `{ANY_KIND}` for every kind) it follows.",
                minLength=1,
            ),
            "phase": {
                "$ref": "#/$defs/phase",
                "description": f"When the hook runs (default `{DEFAULT_PHASE.value}`).",
            },
            # The action: one key, its kind's word, from the kinds' table.
            **{word: target(kind.target) for word, kind in HOOK_KINDS.items()},
            **hook_prompt_keys(),
            "args": {"type": "object", "description": "The arguments of a `plugin` call."},
            "answer": enum_of(
                tuple(a.value for a in PluginAnswer),
                "How a `plugin` hook reads its tool's answer: "
                + "; ".join(f"`{a.value}`: {m}" for a, m in PLUGIN_ANSWER_MEANING.items())
                + f". Default `{PluginAnswer.AUTO.value}`.",
            ),
            "failure": enum_of(
                tuple(f.value for f in Failure),
                "What a failed hook does: `open` lets the run carry on, `closed` refuses it"
                f" (needs an effect of `{REFUSING.word}` or above). Default `open`.",
            ),
            **{s.key: _setting(s, f"{s.meaning}; default `[defaults]`.") for s in HOOK_SETTINGS},
            NETWORK_KEY: network_schema("the hook"),
            "env": {
                "type": "object",
                "propertyNames": {"pattern": ENV_NAME_PATTERN},
                "additionalProperties": text(
                    "The variable's value, a literal string: `${NAME}` is refused (write"
                    " `passEnv` or `secrets`)."
                ),
                "description": "Variables added to the hook's scrubbed environment.",
            },
            **pass_keys("the hook", hosts=True),
            "enabled": {
                "type": "boolean",
                "description": "false: listed, never run (default true).",
            },
            "locked": {
                "type": "boolean",
                "description": "true: nearer layers can neither drop, disable nor redefine it,"
                " and in a config file the caller's `hooks.autonomy` does not lower its effect"
                " (needs a `name`; default false).",
            },
            "when": _when_def(),
            "parallel": {
                "type": "boolean",
                "description": "true: runs at the same time as the parallel hooks next to it"
                " in its phase, their frames still in declaration order; only for a hook whose"
                f" effect in force is at most `{PARALLEL_MAX.word}` (default false).",
            },
            "cwd": text("Working directory, relative to the declaring directory."),
        },
        "One hook: a point, a phase and exactly one action.",
    )
    hook["required"] = ["on"]
    hook["oneOf"] = [{"required": [a]} for a in (*declared_actions(), Action.SOURCE.value)]
    hook["dependentRequired"] = {
        "args": [Action.PLUGIN.value],
        "answer": [Action.PLUGIN.value],
    }
    # Outside observe, `on` names a point something fires.
    hook["if"] = {
        "required": ["phase"],
        "properties": {"phase": {"not": {"const": Phase.OBSERVE.value}}},
    }
    hook["then"] = {"properties": {"on": {"$ref": "#/$defs/point"}}}
    # Observing (the default phase), `on` is a kind the bus publishes, or a prefix of one.
    hook["else"] = {"properties": {"on": {"$ref": "#/$defs/eventKind"}}}
    return hook


def build_config_schema() -> dict[str, Any]:
    """The config schema, enums taken from the tables."""
    null_splice = "; `null` splices in what the farther layers resolved to"
    return {
        **header(
            "config",
            "mcpx-hooks config",
            "A config layer (TOML or JSON). Tables merge key by key, nearer wins; lists follow"
            " the null-splice rule.",
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "$schema": string("The schema this file follows (for editors); ignored."),
            "autonomy": table(
                {
                    "max": {
                        **EFFECT_REF,
                        "description": f"The supervisor's ceiling (default `{DEFAULT_MAX.word}`).",
                    },
                    "hooks": {
                        **EFFECT_REF,
                        "description": f"The caller's level (default `{DEFAULT_MAX.word}`).",
                    },
                },
                "The autonomy dial's ceilings (default `run`).",
            ),
            "defaults": table(
                {s.key: _setting(s, f"{s.meaning} (default {_shown(s)}).") for s in HOOK_SETTINGS}
                | {NETWORK_KEY: network_schema("every hook that sets none", layered=True)},
                "Per-hook defaults (a hook may set each for itself).",
            ),
            "limits": table(
                {
                    # At least 1 each: a tmpfs of size 0 has no limit at all.
                    key: integer(
                        1,
                        f"{LIMIT_DOCS[key]} (default {getattr(DEFAULT_LIMITS, attr)}).",
                        min(MAX_INTEGER, MAX_RLIMIT // unit),
                    )
                    for key, attr, _, unit in LIMIT_KEYS
                },
                "Resource limits of every hook and script process (docs/sandbox.md).",
            ),
            "runs": runs_schema(),
            "history": history_schema(),
            "observe": table(
                {
                    "drainMs": integer(
                        0,
                        "How long a command, once its work is done (`exec`: after the run's"
                        " `end`), waits for observe hooks still running, in ms (default"
                        f" {DEFAULT_OBSERVE_DRAIN_MS}); past it they are killed and reported"
                        " as cut short.",
                    ),
                },
                "Observe hooks: how long they may hold a command's exit.",
            ),
            "service": table(
                {
                    "sandboxes": {
                        "type": "array",
                        "items": {"$ref": "#/$defs/sandbox"},
                        "uniqueItems": True,
                        "description": "The sandbox profiles a request may name or get, for"
                        " its run and its per-call hooks (default"
                        f" {[p.value for p in DEFAULT_SERVICE_SANDBOXES]}); any other is"
                        " refused before anything runs.",
                    },
                    "roots": {
                        "type": "array",
                        "items": text(
                            "A directory: absolute, `~` or `~/…` (the supervisor's home), or"
                            " relative to this file's directory.",
                            minLength=1,
                        ),
                        "description": "The directories a request's `cwd` must lie in"
                        " (symlinks resolved); any other `cwd` is refused. A request without"
                        " `cwd` runs in the first, or with none, in an empty directory made"
                        " for it. Default: the directory `serve` starts in, unless that is"
                        " `/`, the home or one of its ancestors (then none).",
                    },
                },
                "What the service's clients may ask for, and where their runs may work.",
            ),
            "sandbox": table(
                {
                    **{
                        key: {
                            "type": "array",
                            "items": text(
                                "A path: absolute, `~` or `~/…` (the supervisor's home), or"
                                " relative to this file's directory.",
                                minLength=1,
                            ),
                            "description": f"Paths every profile but `none` {what}; the lists of"
                            " all layers are appended, farthest first (never replaced).",
                        }
                        for key, what in (
                            ("read", "can read (read-only)"),
                            ("write", "can read and write"),
                        )
                    },
                    "deny": {
                        "type": "array",
                        "items": text(
                            "A path: absolute, `~` or `~/…` (the supervisor's home), or relative"
                            " to this file's directory.",
                            minLength=1,
                        ),
                        "description": "Paths no profile but `none` can read or write, whatever"
                        " the grants say, besides the credential stores always denied (`~/.ssh`,"
                        " `~/.gnupg`, `~/.aws`, `~/.azure`, `~/.config/gcloud`, `~/.kube`,"
                        " `~/.docker`, `~/.netrc`, `~/.pypirc`, `~/.git-credentials`) and the"
                        " supervisor's own files; the lists of all layers are appended (a nearer"
                        " file adds paths, never removes one).",
                    },
                },
                "Paths added to and denied from the sandbox profiles (docs/sandbox.md).",
            ),
            "script": table(
                {
                    **{
                        p: {
                            "type": "array",
                            # Python compiles no NUL and no lone surrogate either.
                            "items": {"type": ["string", "null"], "pattern": TEXT_PATTERN},
                            "description": f"Python lines spliced into the launcher at `{p}`"
                            + null_splice,
                        }
                        for p in SCRIPT_PHASES
                    },
                    "sandbox": {
                        "$ref": "#/$defs/sandbox",
                        "description": "The runs' sandbox profile when a run names none"
                        f" (default `{DEFAULT_RUN_SANDBOX.value}`).",
                    },
                    **pass_keys("every run", hosts=True)
                    | {NETWORK_KEY: network_schema("each run's script")},
                },
                "Inline source phases of the script point (action `source`), the runs'"
                " sandbox profile, and what runs take from their caller's environment.",
            ),
            "when": table(
                {
                    "base": text(
                        "The commit `when.files` compares against: a branch, tag or commit"
                        " (default: the merge base of HEAD with `origin/HEAD`, else"
                        " `origin/main`, `origin/master`, `main`, `master`, else HEAD itself).",
                        minLength=1,
                    ),
                },
                "How `when.files` finds the files a run counts as changed.",
            ),
            "models": models_schema(),
            "servers": servers_schema(),
            "mcp": mcp_schema(),
            "hooks": {
                "type": "array",
                "description": "The hooks, in declaration order" + null_splice,
                "items": {"if": {"type": "null"}, "else": {"$ref": "#/$defs/hook"}},
            },
        },
        "$defs": {
            "effect": enum_of(tuple(e.word for e in Effect), "An effect level, least to most."),
            "phase": enum_of(tuple(p.value for p in Phase), "When the hook runs."),
            "point": enum_of(tuple(POINTS), "A point that something fires."),
            "eventKind": enum_of(
                kind_prefixes(),
                "An event kind the bus publishes, a dot-boundary prefix of one, or"
                f" `{ANY_KIND}` for every kind.",
            ),
            "sandbox": enum_of(tuple(p.value for p in Profile), "A sandbox profile."),
            "hook": _hook_def(),
        },
    }
