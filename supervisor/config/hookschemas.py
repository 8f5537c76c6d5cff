"""The hook protocol's schemas: what a `run` or `module` hook reads on stdin and may print on
stdout, built from the tables (`points.py`, `effects.py`, `hooks.py`, `hookenv.PROTOCOL`).
"""

from __future__ import annotations

from typing import Any

from ..core.effects import ANSWERS, DEFAULT_DEADLINE_MS, NO, Effect
from ..core.hookenv import PROTOCOL
from ..core.kinds import process_actions
from ..core.points import Phase
from .schemaparts import argv, enum_of, header, integer, string, strings


def build_hook_input_schema() -> dict[str, Any]:
    """What a `run`/`module` hook reads on stdin."""
    any_value = {"description": "Any JSON value."}
    return {
        **header(
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
                    "name": string("The hook's name."),
                    "on": string("The point, or the event kind for observe hooks."),
                    "phase": enum_of(tuple(p.value for p in Phase), "The phase."),
                    "action": enum_of(process_actions(), "The action."),
                    "effect": enum_of(
                        tuple(e.word for e in Effect), "The effect in force, after clamping."
                    ),
                    "timeoutMs": integer(1, "The hook's timeout, in ms."),
                },
            },
            "run": {
                "type": ["object", "null"],
                "description": "The run; null for observe hooks not tied to a run.",
                "required": ["runId", "argv", "cwd", "startedAt"],
                "properties": {
                    "runId": string("The run's id."),
                    "argv": strings("The script's argv."),
                    "cwd": string("The script's working directory."),
                    "startedAt": string("RFC 3339 time the run started.", format="date-time"),
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
                    "message": string("What went wrong."),
                    "exitCode": {"type": "integer", "description": "The script's exit code."},
                    "stderrTail": string("The end of the script's stderr."),
                    "stdoutTail": string(
                        "The end of the script's stdout (a test runner's failures, say)."
                    ),
                },
            },
            "event": {
                "type": "object",
                "description": "The event an observe hook follows.",
                "required": ["seq", "kind", "at", "data"],
                "properties": {
                    "seq": integer(0, "The event's sequence number on the bus."),
                    "kind": string("The event kind."),
                    "at": string("RFC 3339 time of the event.", format="date-time"),
                    "runId": string("The run the event belongs to, if any."),
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
        **header(
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
                        "properties": {"reason": string("Why the run is refused.")},
                    },
                ],
            },
            "ask": {
                "type": "object",
                "description": "A question; unanswered or `no` refuses." + needs(Effect.ASK),
                "required": ["question"],
                "properties": {
                    "question": string("The question put to the caller."),
                    "default": enum_of(ANSWERS, f'What an unanswered ask takes (default "{NO}").'),
                    "deadlineMs": integer(
                        0,
                        f"How long to wait for an answer, in ms (default {DEFAULT_DEADLINE_MS}).",
                    ),
                },
            },
            "propose": {
                "type": "object",
                "description": "A replacement beside the original, unapplied."
                + needs(Effect.PROPOSE),
                "required": ["value"],
                "properties": {
                    "value": {"description": "The proposed value."},
                    "note": string("Why."),
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
                "properties": {"argv": argv("The command's argv.")},
            },
        },
    }
