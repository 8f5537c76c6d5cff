"""The JSON Schemas (2020-12) of the config, the hook input and the hook output.

The files under `schemas/` are generated from the tables (`points.py`, `effects.py`, `hooks.py`)
by the `build_*` functions below, so an enum is declared once; `tests/test_schemas.py` holds the
committed files equal to what these functions build. After changing a table, regenerate with
`python -m mcpx_hooks.supervisor.config.schemas --write`.

What a process cannot take is refused here, where it enters: every string that becomes an
argv item, an environment name or value, or a path carries the `spawntext` patterns (and a
program is never ""); every integer read from a config or a hook's answer has a maximum.

At run time the files are read with `importlib.resources`, never imported, and each validator is
compiled once. jsonschema is the reference, and says what is wrong; `quick_check` answers only
"valid or not", about ten times faster, for the path every hook's output takes.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import jsonschema

from ..core.effects import Effect
from ..core.hookenv import PROTOCOL
from ..core.hooks import (
    DEFAULT_RETAIN_BYTES,
    DEFAULT_RUN_BYTES,
    DEFAULT_RUN_SANDBOX,
    DEFAULT_RUNS_RETAIN,
    DEFAULT_SERVICE_SANDBOXES,
    PROCESS_ACTIONS,
    Action,
    Defaults,
    Failure,
    Profile,
)
from ..core.limits import DEFAULT_LIMITS, LIMIT_DOCS, LIMIT_KEYS
from ..core.points import POINTS, Phase
from ..core.spawntext import ENV_NAME_PATTERN, TEXT_PATTERN

SCHEMA_NAMES: Final = ("config", "hook-input", "hook-output")
DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_PACKAGE: Final = "mcpx_hooks.schemas"

#: The script point's inline source phases: the keys of `[script]`.
SCRIPT_PHASES: Final = tuple(p.value for p in POINTS["script"].phases if p is not Phase.OBSERVE)
#: The action keys a `[[hooks]]` entry may carry (`source` lives in `[script]` only).
HOOK_ACTIONS: Final = tuple(a.value for a in Action if a is not Action.SOURCE)
#: A `module` action: a Python file, or `package.module` with an optional `:function`. It
#: becomes an argv item of the module runner, so the file's name holds no NUL and no lone
#: surrogate (`\w` matches neither).
MODULE_PATTERN: Final = (
    r"^([^\n\u0000\ud800-\udfff]+\.py(:[A-Za-z_]\w*)?"  # a file
    r"|[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?)$"  # package.module
)
#: A `plugin` action: `namespace.tool`.
PLUGIN_PATTERN: Final = r"^[^.\s]+\.\S+$"
#: The largest integer where no other bound is named: JSON's safe integers, exact as a float,
#: so a duration in ms is always a number a clock can add (10**400 ms is not).
MAX_INTEGER: Final = 2**53 - 1
#: The largest value `setrlimit` takes (a C long): a `[limits]` value times its unit stays
#: under it.
_MAX_RLIMIT: Final = 2**63 - 1


def file_name(name: str) -> str:
    """`config` → `config.schema.json`; refuses names that are not schemas."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r}; the schemas are {', '.join(SCHEMA_NAMES)}")
    return f"{name}.schema.json"


def schema_text(name: str) -> str:
    """The schema file's text, as installed."""
    return importlib.resources.files(_PACKAGE).joinpath(file_name(name)).read_text("utf-8")


def schema(name: str) -> dict[str, Any]:
    """The schema as a fresh dict (callers may change it)."""
    loaded: dict[str, Any] = json.loads(schema_text(name))
    return loaded


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    """The compiled validator for `name`, built once per process."""
    return jsonschema.Draft202012Validator(schema(name))


@functools.cache
def quick_check(name: str) -> Callable[[Any], bool]:
    """`name` compiled to Python by fastjsonschema, once: True when an instance is valid.

    Only a fast yes: when it says no, ask `validator(name)` what is wrong (and it decides).
    Defaults are not filled in and formats are not asserted, as with `validator`. Imported
    and compiled at the first use (about 12 ms), by the first hook whose output is read.
    """
    import fastjsonschema  # only where hook output is read

    check = fastjsonschema.compile(_draft7(schema(name)), use_default=False, use_formats=False)

    def valid(instance: Any) -> bool:
        try:
            check(instance)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return valid


def _draft7(node: Any) -> Any:
    """`node` with 2020-12's `prefixItems` + `items` written as draft 7's `items` (an array)
    + `additionalItems`: fastjsonschema knows drafts up to 7 and would skip `prefixItems`,
    saying yes to an argv whose program is ""."""
    if isinstance(node, list):
        return [_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _draft7(value) for key, value in node.items()}
    if "prefixItems" in out:
        out["additionalItems"] = out.pop("items", True)
        out["items"] = out.pop("prefixItems")
    return out


@functools.cache
def hook_validator() -> jsonschema.Draft202012Validator:
    """One `[[hooks]]` entry on its own (command-line and per-call hooks), built once."""
    defs = schema("config")["$defs"]
    return jsonschema.Draft202012Validator(
        {"$schema": DIALECT, "$defs": defs, "$ref": "#/$defs/hook"}
    )


def _header(name: str, title: str, description: str) -> dict[str, Any]:
    # A name, not a place: nothing fetches it.
    return {
        "$schema": DIALECT,
        "$id": f"urn:mcpx-hooks:schema:{name}",
        "title": title,
        "description": description,
    }


def _enum(values: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": description}


def _int(minimum: int, description: str, maximum: int = MAX_INTEGER) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _strings(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description, **extra}


def _text(description: str, **extra: Any) -> dict[str, Any]:
    """A string that reaches a process (an argv item, an env value, a path): `execve` takes no
    NUL, and a lone surrogate has no UTF-8 (`spawntext`)."""
    return _string(description, pattern=TEXT_PATTERN, **extra)


def _argv(description: str) -> dict[str, Any]:
    """An argv: a non-empty program, then any items, each one `_text`."""
    return {
        "type": "array",
        "description": description,
        "minItems": 1,
        "prefixItems": [_text("The program: a name looked up in PATH, or a path.", minLength=1)],
        "items": _text("An argument."),
    }


def _table(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }


_EFFECT_REF: Final = {"$ref": "#/$defs/effect"}


def _hook_def() -> dict[str, Any]:
    points = list(POINTS)
    hook = _table(
        {
            "name": _text("Unique; default `<on>.<phase>.<index>`.", minLength=1),
            "on": _text(
                "The point (one of " + ", ".join(points) + "), or for observe hooks the event"
                " kind (or kind prefix) it follows.",
                minLength=1,
            ),
            "phase": {"$ref": "#/$defs/phase", "description": "When the hook runs."},
            "run": _argv('An argv array, never a shell string (a shell is ["sh", "-c", "…"]).'),
            "module": _string(
                "A Python file (`*.py`) or `package.module[:function]`, run by the module runner.",
                pattern=MODULE_PATTERN,
            ),
            "prompt": _string("Text with `@placeholders` sent to a configured model.", minLength=1),
            "plugin": _string("An MCP tool, `namespace.tool`.", pattern=PLUGIN_PATTERN),
            "source": {
                "description": "Not legal here: inline source is declared as `script.<phase>`.",
                "not": {},
            },
            "args": {"type": "object", "description": "The arguments of a `plugin` call."},
            "effect": {
                **_EFFECT_REF,
                "description": "What its output may do; default `[defaults]`.",
            },
            "failure": _enum(
                tuple(f.value for f in Failure),
                "What a failed hook does: `open` lets the run carry on, `closed` refuses it"
                " (needs an effect of `ask` or above). Default `open`.",
            ),
            "timeoutMs": _int(1, "The whole life of the hook, in ms; default `[defaults]`."),
            "killGraceMs": _int(0, "From SIGTERM to SIGKILL, in ms; default `[defaults]`."),
            "maxOutputBytes": _int(1, "stdout above this kills and fails the hook."),
            "env": {
                "type": "object",
                "propertyNames": {"pattern": ENV_NAME_PATTERN},
                "additionalProperties": _text("The variable's value, a literal string."),
                "description": "Variables added to the hook's scrubbed environment.",
            },
            "enabled": {"type": "boolean", "description": "false: listed, never run."},
            "when": _table(
                {
                    "kinds": _strings("Event kinds (or prefixes) an observe hook follows."),
                    "server": _string("Only for this server."),
                    "session": _string("Only for this session."),
                    "uri": _string("Only for this URI."),
                    "tool": _string("Only for this tool."),
                },
                "Filters, as the point provides them.",
            ),
            "cwd": _text("Working directory, relative to the declaring directory."),
            "sandbox": {"$ref": "#/$defs/sandbox", "description": "Default `[defaults]`."},
        },
        "One hook: a point, a phase and exactly one action.",
    )
    hook["required"] = ["on", "phase"]
    hook["oneOf"] = [{"required": [a]} for a in (*HOOK_ACTIONS, Action.SOURCE.value)]
    hook["dependentRequired"] = {"args": [Action.PLUGIN.value]}
    # Outside observe, `on` names a point something fires.
    hook["if"] = {
        "required": ["phase"],
        "properties": {"phase": {"not": {"const": Phase.OBSERVE.value}}},
    }
    hook["then"] = {"properties": {"on": {"$ref": "#/$defs/point"}}}
    return hook


def build_config_schema() -> dict[str, Any]:
    """The config schema, enums taken from the tables."""
    null_splice = "; `null` splices in what the farther layers resolved to"
    d = Defaults()
    return {
        **_header(
            "config",
            "mcpx-hooks config",
            "A config layer (TOML or JSON). Tables merge key by key, nearer wins; lists follow"
            " the null-splice rule.",
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "$schema": _string("The schema this file follows (for editors); ignored."),
            "autonomy": _table(
                {
                    "max": {**_EFFECT_REF, "description": "The supervisor's ceiling."},
                    "hooks": {**_EFFECT_REF, "description": "The caller's level."},
                },
                "The autonomy dial's ceilings (default `run`).",
            ),
            "defaults": _table(
                {
                    "timeoutMs": _int(1, f"Hook timeout, in ms (default {d.timeout_ms})."),
                    "killGraceMs": _int(
                        0, f"Grace from SIGTERM to SIGKILL, in ms (default {d.kill_grace_ms})."
                    ),
                    "maxOutputBytes": _int(
                        1, f"Cap on a hook's stdout, in bytes (default {d.max_output_bytes})."
                    ),
                    "effect": {
                        **_EFFECT_REF,
                        "description": f"A hook's effect (default `{d.effect.word}`).",
                    },
                    "sandbox": {
                        "$ref": "#/$defs/sandbox",
                        "description": f"A hook's sandbox profile (default `{d.sandbox.value}`).",
                    },
                },
                "Per-hook defaults.",
            ),
            "limits": _table(
                {
                    # At least 1 each: a tmpfs of size 0 has no limit at all.
                    key: _int(
                        1,
                        f"{LIMIT_DOCS[key]} (default {getattr(DEFAULT_LIMITS, attr)}).",
                        min(MAX_INTEGER, _MAX_RLIMIT // unit),
                    )
                    for key, attr, _, unit in LIMIT_KEYS
                },
                "Resource limits of every hook and script process (docs/sandbox.md).",
            ),
            "runs": _table(
                {
                    "retain": _int(
                        1, f"Runs the service keeps for replay (default {DEFAULT_RUNS_RETAIN})."
                    ),
                    "runBytes": _int(
                        4096,
                        "What one run's frames may hold, in bytes as they cost in memory"
                        f" (default {DEFAULT_RUN_BYTES}); past it its output frames are"
                        " dropped and counted.",
                    ),
                    "retainBytes": _int(
                        4096,
                        "What the retained runs' frames may hold together (default"
                        f" {DEFAULT_RETAIN_BYTES}); past it the oldest finished runs are"
                        " forgotten.",
                    ),
                },
                "The service's run history.",
            ),
            "service": _table(
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
                },
                "What the service's clients may ask for.",
            ),
            "sandbox": _table(
                {
                    key: {
                        "type": "array",
                        "items": _text(
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
                "Paths added to the sandbox profiles (docs/sandbox.md).",
            ),
            "script": _table(
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
                },
                "Inline source phases of the script point (action `source`), and the runs'"
                " sandbox profile.",
            ),
            "hooks": {
                "type": "array",
                "description": "The hooks, in declaration order" + null_splice,
                "items": {"if": {"type": "null"}, "else": {"$ref": "#/$defs/hook"}},
            },
        },
        "$defs": {
            "effect": _enum(tuple(e.word for e in Effect), "An effect level, least to most."),
            "phase": _enum(tuple(p.value for p in Phase), "When the hook runs."),
            "point": _enum(tuple(POINTS), "A point that something fires."),
            "sandbox": _enum(tuple(p.value for p in Profile), "A sandbox profile."),
            "hook": _hook_def(),
        },
    }


def build_hook_input_schema() -> dict[str, Any]:
    """What a `run`/`module` hook reads on stdin."""
    any_value = {"description": "Any JSON value."}
    return {
        **_header(
            "hook-input",
            "mcpx-hooks hook input",
            "One JSON object on a hook's stdin, written in full and closed. Keys may be added"
            " in later versions of protocol 1; a hook ignores keys it does not know.",
        ),
        "type": "object",
        "required": ["protocol", "hook", "run"],
        "properties": {
            "protocol": {"const": PROTOCOL, "description": "The hook protocol version."},
            "hook": {
                "type": "object",
                "description": "The hook being run.",
                "required": ["name", "on", "phase", "action", "effect", "timeoutMs"],
                "properties": {
                    "name": _string("The hook's name."),
                    "on": _string("The point, or the event kind for observe hooks."),
                    "phase": _enum(tuple(p.value for p in Phase), "The phase."),
                    "action": _enum(
                        tuple(a.value for a in Action if a in PROCESS_ACTIONS), "The action."
                    ),
                    "effect": _enum(
                        tuple(e.word for e in Effect), "The effect in force, after clamping."
                    ),
                    "timeoutMs": _int(1, "The hook's timeout, in ms."),
                },
            },
            "run": {
                "type": ["object", "null"],
                "description": "The run; null for observe hooks not tied to a run.",
                "required": ["runId", "argv", "cwd", "startedAt"],
                "properties": {
                    "runId": _string("The run's id."),
                    "argv": _strings("The script's argv."),
                    "cwd": _string("The script's working directory."),
                    "startedAt": _string("RFC 3339 time the run started.", format="date-time"),
                },
            },
            "input": {**any_value, "description": "The run's input (before only)."},
            "result": {
                "type": "object",
                "description": "onSuccess, and suffix after a success.",
                "required": ["value"],
                "properties": {"value": {**any_value, "description": "The result value."}},
            },
            "error": {
                "type": "object",
                "description": "onError, and suffix after a failure.",
                "required": ["message"],
                "properties": {
                    "message": _string("What went wrong."),
                    "exitCode": {"type": "integer", "description": "The script's exit code."},
                    "stderrTail": _string("The end of the script's stderr."),
                },
            },
            "event": {
                "type": "object",
                "description": "The event an observe hook follows.",
                "required": ["seq", "kind", "at", "data"],
                "properties": {
                    "seq": _int(0, "The event's sequence number on the bus."),
                    "kind": _string("The event kind."),
                    "at": _string("RFC 3339 time of the event.", format="date-time"),
                    "runId": _string("The run the event belongs to, if any."),
                    "data": {**any_value, "description": "The event's payload."},
                },
            },
        },
    }


def build_hook_output_schema() -> dict[str, Any]:
    """What a hook may print on stdout. Unknown keys are allowed by the schema and
    reported by the code (dropped, named in the hook frame)."""

    def needs(effect: Effect) -> str:
        return f" Needs effect `{effect.word}`."

    return {
        **_header(
            "hook-output",
            "mcpx-hooks hook output",
            "One JSON object on a hook's stdout (or nothing: no opinion). Keys are the dial's"
            " levels; a key above the effect in force is dropped.",
        ),
        "type": "object",
        "additionalProperties": True,
        "properties": {
            "advise": {
                "description": "Text attached to the result or the error." + needs(Effect.ADVISE),
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            },
            "refuse": {
                "description": "Stop the run, with a reason." + needs(Effect.ASK),
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "required": ["reason"],
                        "properties": {"reason": _string("Why the run is refused.")},
                    },
                ],
            },
            "ask": {
                "type": "object",
                "description": "A question; unanswered or `no` refuses." + needs(Effect.ASK),
                "required": ["question"],
                "properties": {
                    "question": _string("The question put to the caller."),
                    "default": _enum(("yes", "no"), "The suggested answer."),
                    "deadlineMs": _int(0, "How long to wait for an answer, in ms."),
                },
            },
            "propose": {
                "type": "object",
                "description": "A replacement beside the original, unapplied."
                + needs(Effect.PROPOSE),
                "required": ["value"],
                "properties": {
                    "value": {"description": "The proposed value."},
                    "note": _string("Why."),
                },
            },
            "apply": {
                "type": "object",
                "description": "Replace the value the caller receives." + needs(Effect.APPLY),
                "required": ["value"],
                "properties": {"value": {"description": "The replacement."}},
            },
            "run": {
                "type": "object",
                "description": "A command executed once in the hook's sandbox." + needs(Effect.RUN),
                "required": ["argv"],
                "properties": {"argv": _argv("The command's argv.")},
            },
        },
    }


BUILDERS: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "config": build_config_schema,
    "hook-input": build_hook_input_schema,
    "hook-output": build_hook_output_schema,
}


def render(name: str) -> str:
    """The text of the schema file `name` as the tables build it."""
    return json.dumps(BUILDERS[name](), indent=2, ensure_ascii=False) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Regenerates every schema file in `directory` (the source tree's `schemas/`)."""
    written = []
    for name in SCHEMA_NAMES:
        path = directory / file_name(name)
        path.write_text(render(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m mcpx_hooks.supervisor.config.schemas --write")
    # In the editable install this is the source tree's `schemas/`.
    for p in write_schemas(Path(str(importlib.resources.files(_PACKAGE)))):
        print(p)
