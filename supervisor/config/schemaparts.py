"""The pieces the schemas are built of, and the names and bounds they share.

`configschema.py` and `hookschemas.py` build the schema documents from the tables with these;
`schemas.py` writes and reads them. What a process cannot take is refused where it enters:
every string that becomes an argv item, an environment name or value, or a path carries the
`spawntext` patterns (`text`, `argv`), and every integer has a maximum (`integer`).
"""

from __future__ import annotations

from typing import Any, Final

from ..core.kinds import Target
from ..core.points import POINTS, Phase
from ..core.spawntext import TEXT_PATTERN

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
#: The script point's inline source phases: the keys of `[script]`.
SCRIPT_PHASES: Final = tuple(p.value for p in POINTS["script"].phases if p is not Phase.OBSERVE)
#: The largest integer where no other bound is named: JSON's safe integers, exact as a float,
#: so a duration in ms is always a number a clock can add (10**400 ms is not).
MAX_INTEGER: Final = 2**53 - 1
#: The largest value `setrlimit` takes (a C long): a `[limits]` value times its unit stays
#: under it.
MAX_RLIMIT: Final = 2**63 - 1


def header(name: str, title: str, description: str) -> dict[str, Any]:
    # A name, not a place: nothing fetches it.
    return {
        "$schema": DIALECT,
        "$id": f"urn:mcpx-hooks:schema:{name}",
        "title": title,
        "description": description,
    }


def enum_of(values: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": description}


def integer(minimum: int, description: str, maximum: int = MAX_INTEGER) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def strings(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description, **extra}


def text(description: str, **extra: Any) -> dict[str, Any]:
    """A string that reaches a process (an argv item, an env value, a path): `execve` takes no
    NUL, and a lone surrogate has no UTF-8 (`spawntext`)."""
    return string(description, pattern=TEXT_PATTERN, **extra)


def argv(description: str) -> dict[str, Any]:
    """An argv: a non-empty program, then any items, each one `text`."""
    return {
        "type": "array",
        "description": description,
        "minItems": 1,
        "prefixItems": [text("The program: a name looked up in PATH, or a path.", minLength=1)],
        "items": text("An argument."),
    }


def target(value: Target) -> dict[str, Any]:
    """The schema of a kind's value in a `[[hooks]]` entry (`core/kinds.py`)."""
    if value.shape == "argv":
        return argv(value.description)
    if value.shape == "refused":
        return {"description": value.description, "not": {}}
    extra: dict[str, Any] = {}
    if value.pattern is not None:
        extra["pattern"] = value.pattern
    if value.min_length is not None:
        extra["minLength"] = value.min_length
    return string(value.description, **extra)


def table(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }


EFFECT_REF: Final = {"$ref": "#/$defs/effect"}
