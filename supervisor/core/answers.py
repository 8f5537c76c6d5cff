"""What a hook answered, as the effect in force bounds it: typed from the hook's output to the
frame that shows it (`HookFrame.asked`, `.refused`, `.dropped` and the `ask` frame are these
classes). Pure.

`bound_answer` keeps what the effect in force permits (`core/effects.py`'s `KEY_EFFECT`) and
names what it dropped; reading the hook's stdout into the object it takes is `run/output.py`'s
(it needs the schema). The answers an ask takes and who gave one (`YES`, `NO`, `AnsweredBy`)
are `core/effects.py`'s too, so that a run without hooks builds none of these classes.
"""

from __future__ import annotations

from typing import Any

import attrs

from .effects import DEFAULT_DEADLINE_MS, KEY_EFFECT, NO, AnsweredBy, Effect
from .fieldmeta import KEEP
from .records import Record


@attrs.frozen(repr=False, eq=False)
class Dropped(Record):
    """A key of the answer that was not honoured, and why."""

    key: str
    reason: str


@attrs.frozen(repr=False, eq=False)
class Ask(Record):
    """A question a hook puts to the caller, as it answered it."""

    question: str
    default: str = attrs.field(default=NO, metadata=KEEP)
    deadline_ms: int = attrs.field(default=DEFAULT_DEADLINE_MS, metadata=KEEP)


@attrs.frozen(repr=False, eq=False)
class Asked(Record):
    """What a hook asked and how it was settled; `answer` and `by` are unset until the run
    has waited for it (a hook run outside a run, as by `hook test`, is never answered)."""

    question: str
    answer: str | None = None
    by: AnsweredBy | None = None


@attrs.frozen(repr=False, eq=False)
class Refusal(Record):
    """Why a hook stops the run; `fail_closed` when its failure, not its answer, refused."""

    reason: str
    fail_closed: bool


@attrs.frozen(repr=False, eq=False)
class Answer(Record):
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


def bound_answer(obj: dict[str, Any] | None, effect: Effect) -> Answer:
    """Keeps the keys `effect` permits; drops (and names) keys above it and unknown keys.

    `obj` is a hook's output as `read_output` gave it (schema-valid, or None for no opinion).
    """
    if obj is None:
        return Answer()
    dropped: list[Dropped] = []
    allowed: dict[str, Any] = {}
    for key, value in obj.items():
        needs = KEY_EFFECT.get(key)
        if needs is None:
            dropped.append(Dropped(key, _unknown(key)))
        elif needs > effect:
            dropped.append(Dropped(key, f"needs effect {needs.word}; in force: {effect.word}"))
        else:
            allowed[key] = value
    return Answer(
        advice=_advice(allowed.get("advise")),
        refuse=_reason(allowed["refuse"]) if "refuse" in allowed else None,
        ask=_ask(allowed["ask"]) if "ask" in allowed else None,
        propose=dict(allowed["propose"]) if "propose" in allowed else None,
        apply=(allowed["apply"]["value"],) if "apply" in allowed else None,
        run=tuple(allowed["run"]["argv"]) if "run" in allowed else None,
        dropped=tuple(dropped),
    )


def _unknown(key: str) -> str:
    """Why an unknown key is dropped, with the key it was likely meant as: `advice` (the
    frame's word for what `advise` gives) is dropped, not taken as advice."""
    import difflib  # here: only an answer with an unknown key needs it

    close = difflib.get_close_matches(key, list(KEY_EFFECT), n=1, cutoff=0.6)
    return f'unknown key; did you mean "{close[0]}"?' if close else "unknown key"


def _advice(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _reason(value: Any) -> str:
    return value if isinstance(value, str) else str(value.get("reason", ""))


def _ask(value: dict[str, Any]) -> Ask:
    # Without a deadline it waits DEFAULT_DEADLINE_MS: one of 0 settled it by its default at
    # once, before a person, `--yes` or a client could answer.
    deadline = value.get("deadlineMs", DEFAULT_DEADLINE_MS)
    return Ask(value["question"], value.get("default", NO), deadline)
