"""What a hook answered, read against the effect in force. Pure: no I/O, no trio.

`read_output` turns the bytes a hook printed into an `Answer` or says exactly why they are
not one; `bound_answer` keeps what the effect in force permits and names what it dropped.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..config.schemas import quick_check, validator
from ..core.effects import Effect
from ..core.jsontext import JsonError, loads

#: Each key a hook may answer with, and the least effect that honours it.
KEY_EFFECT: Final[dict[str, Effect]] = {
    "advise": Effect.ADVISE,
    "refuse": Effect.ASK,
    "ask": Effect.ASK,
    "propose": Effect.PROPOSE,
    "apply": Effect.APPLY,
    "run": Effect.RUN,
}

_BOM: Final = b"\xef\xbb\xbf"


class InvalidOutput(ValueError):
    """The hook's stdout is not nothing and not one valid JSON object."""


@attrs.frozen
class Dropped:
    key: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "reason": self.reason}


@attrs.frozen
class Ask:
    question: str
    default: str = "no"
    deadline_ms: int = 0


@attrs.frozen
class Answer:
    """The parts of a hook's answer that the effect in force lets through."""

    advice: tuple[str, ...] = ()
    refuse: str | None = None
    ask: Ask | None = None
    #: `{"value": …, "note": …}` as answered.
    propose: dict[str, Any] | None = None
    #: `(value,)`: a tuple so that `null` can be applied.
    apply: tuple[Any] | None = None
    run: tuple[str, ...] | None = None
    dropped: tuple[Dropped, ...] = ()


def read_output(stdout: bytes) -> dict[str, Any] | None:
    """The hook's JSON object, or None when it printed nothing (no opinion).

    A UTF-8 BOM and surrounding whitespace are tolerated. Raises `InvalidOutput` naming why.
    """
    text = stdout.removeprefix(_BOM)
    if not text.strip():
        return None
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidOutput(f"stdout is not UTF-8: {exc}") from exc
    try:
        obj = loads(decoded)
    except JsonError as exc:
        raise InvalidOutput(f"stdout is not one JSON object: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidOutput(f"stdout is JSON but not an object: found {_json_type(obj)}")
    if quick_check("hook-output")(obj):  # the usual case; a no is judged and explained below
        return obj
    errors = sorted(validator("hook-output").iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = "/" + "/".join(str(p) for p in first.absolute_path)
        raise InvalidOutput(f"output does not match hook-output schema at {where}: {first.message}")
    return obj


def bound_answer(obj: dict[str, Any] | None, effect: Effect) -> Answer:
    """Keeps the keys `effect` permits; drops (and names) keys above it and unknown keys."""
    if obj is None:
        return Answer()
    dropped: list[Dropped] = []
    kept: dict[str, Any] = {}
    for key, value in obj.items():
        needs = KEY_EFFECT.get(key)
        if needs is None:
            dropped.append(Dropped(key, "unknown key"))
        elif needs > effect:
            dropped.append(Dropped(key, f"needs effect {needs.word}; in force: {effect.word}"))
        else:
            kept[key] = value
    return Answer(
        advice=_advice(kept.get("advise")),
        refuse=_reason(kept["refuse"]) if "refuse" in kept else None,
        ask=_ask(kept["ask"]) if "ask" in kept else None,
        propose=dict(kept["propose"]) if "propose" in kept else None,
        apply=(kept["apply"]["value"],) if "apply" in kept else None,
        run=tuple(kept["run"]["argv"]) if "run" in kept else None,
        dropped=tuple(dropped),
    )


def _advice(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _reason(value: Any) -> str:
    return value if isinstance(value, str) else str(value.get("reason", ""))


def _ask(value: dict[str, Any]) -> Ask:
    return Ask(value["question"], value.get("default", "no"), value.get("deadlineMs", 0))


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
