"""Prompt hooks in the config: the `[models]` schema and a prompt hook's `model` and `vars`
keys, built from `core/models.py`'s tables; the answer schema a model is asked for,
restricted to an effect; and the rules validation makes of a prompt hook's placeholders.

Pure: no trio. `[models]` holds one key that is not a model, `runBudgetTokens`; every other
key is a `[models.<name>]` table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..core.effects import KEY_EFFECT, Effect
from ..core.errors import Problem
from ..core.models import (
    BUDGET_KEY,
    DEFAULT_MODEL_NAME,
    DEFAULT_RUN_BUDGET_TOKENS,
    MODEL_KEYS,
    NAME_PATTERN,
    PROMPT_TIMEOUT_MS,
    PROVIDERS,
    URL_PATTERN,
    ModelKey,
    Provider,
)
from ..core.passenv import SECRET_NAME_PATTERN, looks_like_key
from ..core.placeholders import check_placeholders
from ..core.points import DEFAULT_PHASE, Phase
from .problems import pointer
from .schemaparts import MAX_INTEGER, argv, enum_of, integer, string, text

#: The most a model answer may take, and the most requests in flight to one model.
MAX_MODEL_TOKENS: Final = 1_000_000
MAX_CONCURRENT: Final = 1024


def _key_schema(key: ModelKey) -> dict[str, Any]:
    description = key.meaning
    if key.default is not None:
        description += f" (default {key.default})"
    only = "" if len(key.providers) > 1 else f"; provider `{key.providers[0].value}` only"
    description += only + "."
    kinds: dict[str, dict[str, Any]] = {
        "provider": enum_of(
            tuple(p.value for p in Provider),
            "; ".join(f"`{p.value}`: {what}" for p, what in PROVIDERS.items()),
        ),
        "url": string(description, pattern=URL_PATTERN),
        "text": text(description, minLength=1),
        # (the key is a secret: one variable, named, as a `secrets` entry is; never a glob)
        "env": string(description, pattern=SECRET_NAME_PATTERN),
        "count": integer(1, description, MAX_MODEL_TOKENS),
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "argv": argv(description),
        "sandbox": {"$ref": "#/$defs/sandbox"},
    }
    schema = dict(kinds[key.kind])
    schema.setdefault("description", description)
    if key.key == "maxConcurrent":
        schema["maximum"] = MAX_CONCURRENT
    return schema


def _model_def() -> dict[str, Any]:
    by_provider = [
        {
            "if": {"properties": {"provider": {"const": p.value}}, "required": ["provider"]},
            # The provider's own keys: another provider's is an unknown key here.
            "then": {
                "required": [k.key for k in MODEL_KEYS if k.required and p in k.providers],
                "properties": {k.key: _key_schema(k) for k in MODEL_KEYS if p in k.providers},
                "additionalProperties": False,
            },
        }
        for p in Provider
    ]
    return {
        "type": "object",
        "description": 'A model prompt hooks may name (`model = "…"`).',
        "additionalProperties": False,
        "required": ["provider"],
        "properties": {k.key: _key_schema(k) for k in MODEL_KEYS},
        "allOf": by_provider,
    }


def models_schema() -> dict[str, Any]:
    """`[models]`: `runBudgetTokens`, and every other key a `[models.<name>]` table."""
    return {
        "type": "object",
        "description": "The models prompt hooks send their instructions to, and one run's"
        " token budget over its prompt hooks.",
        "properties": {
            BUDGET_KEY: integer(
                0,
                "The tokens one run's prompt hooks may spend together (default"
                f' {DEFAULT_RUN_BUDGET_TOKENS}); past it the rest are skipped ("token'
                ' budget"). A nearer file may lower it, never raise it.',
                MAX_INTEGER,
            ),
        },
        "propertyNames": {"pattern": NAME_PATTERN},
        "additionalProperties": _model_def(),
    }


def hook_prompt_keys() -> dict[str, Any]:
    """A hook's `model` and `vars` (beside `prompt`)."""
    return {
        "model": string(
            f"A prompt hook's model: a `[models.<name>]` name (default `{DEFAULT_MODEL_NAME}`).",
            pattern=NAME_PATTERN,
        ),
        "vars": {
            "type": "object",
            "propertyNames": {"pattern": NAME_PATTERN},
            "description": "A prompt hook's own placeholders: `@name` in its prompt is sent as"
            " data with this value (any JSON value); a run's placeholders may give another.",
        },
    }


#: A prompt hook's `timeoutMs` when it sets none (for the docs).
PROMPT_TIMEOUT_NOTE: Final = (
    f"a prompt hook's default is {PROMPT_TIMEOUT_MS} ms, not `[defaults] timeoutMs`"
)


def answer_schema(effect: Effect) -> dict[str, Any]:
    """The hook-output schema restricted to the keys `effect` permits, no other key allowed:
    what a model is asked to answer with."""
    from .hookschemas import build_hook_output_schema

    full = build_hook_output_schema()["properties"]
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {k: full[k] for k, needs in KEY_EFFECT.items() if needs <= effect},
    }


def prompt_rules(obj: Mapping[str, Any], file: str, ptr: str) -> list[Problem]:
    """A prompt hook's placeholders checked: each names a built-in its phase has or one of its
    `vars`; `model` and `vars` only on a prompt hook."""
    found: list[Problem] = []
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) and "model" not in obj and "vars" not in obj:
        return found
    phase = obj.get("phase", DEFAULT_PHASE.value)
    if not isinstance(prompt, str):
        found += [
            Problem(file, f"{ptr}/{key}", f"{key} is a prompt hook's key; this hook has no prompt")
            for key in ("model", "vars")
            if key in obj
        ]
        return found
    if not isinstance(phase, str) or phase not in {p.value for p in Phase}:
        return found  # the schema says what is wrong with it (a list is no phase either)
    given = obj.get("vars")
    var_names = given if isinstance(given, Mapping) else {}
    for where, message in check_placeholders(prompt, Phase(str(phase)), var_names):
        at = f"{ptr}/prompt" if where == "prompt" else ptr + pointer(where.split("/"))
        found.append(Problem(file, at, message))
    return found


def key_name_rules(doc: Mapping[str, Any], file: str) -> list[Problem]:
    """Each model's `apiKeyEnv` that reads as a key rather than a variable's name
    (`passenv.looks_like_key`): the key pasted where its variable's name goes, sent nowhere
    but found unset at every call. Refused at its pointer, by its length: never repeated."""
    models = doc.get("models")
    found: list[Problem] = []
    for name, model in models.items() if isinstance(models, Mapping) else ():
        given = model.get("apiKeyEnv") if isinstance(model, Mapping) else None
        if isinstance(given, str) and looks_like_key(given):
            found.append(Problem(file, pointer(["models", name, "apiKeyEnv"]), key_pasted(given)))
    return found


def key_pasted(given: str) -> str:
    """What is said of an `apiKeyEnv` that reads as a key, without it."""
    return (
        "expected the name of the variable that holds the API key (letters, digits and _, as"
        f" OPENAI_API_KEY), found a string of {len(given)} characters that reads as the key"
        " itself (not shown); put the key in a variable (export OPENAI_API_KEY=…) and name"
        " that variable here"
    )
