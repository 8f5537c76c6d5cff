"""`hooks list` for a person: one line a hook, in columns, with where it came from. Pure
text; each cell as the readable view shows data (`view.cell`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.places import hook_place
from .view import cell

if TYPE_CHECKING:
    from ..core.effects import Clamp


def hook_table(
    hooks: Iterable[Mapping[str, Any]], in_force: Sequence[Clamp] | None = None
) -> list[str]:
    """`hooks list` for a person, from the hooks' JSON (`hook_json`, or `/v1/hooks`):
    one line a hook, with where it came from. A server's entry may lack a field or hold
    one of another type: its cell shows what is there (`cell`). `in_force`, one a hook,
    is each hook's effect in force where the config is known (a local list): its phase,
    the config's `[autonomy]` and the floor; without it the phase alone lowers the cell."""
    rows = [("NAME", "POINT.PHASE", "ACTION", "EFFECT", "FAILURE", "TIMEOUT", "SOURCE")]
    for i, h in enumerate(hooks):
        src = h.get("source")
        where = (
            hook_place(src["file"], cell(src.get("index")))
            if isinstance(src, dict) and isinstance(src.get("file"), str)
            else hook_place(cell(src.get("file")), cell(src.get("index")))
            if isinstance(src, dict)
            else cell(src)
        )
        name = cell(h.get("name")) + ("" if h.get("enabled", True) else " (disabled)")
        name = f"{name} (locked)" if h.get("locked") else name
        rows.append(
            (
                name,
                f"{cell(h.get('on'))}.{cell(h.get('phase'))}",
                cell(h.get("action")),
                _effect_cell(h) if in_force is None else _clamp_cell(in_force[i]),
                cell(h.get("failure")),
                f"{cell(h.get('timeoutMs'))} ms",
                where,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(text.ljust(w) for text, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ]


def _effect_cell(hook: Mapping[str, Any]) -> str:
    """The effect a hook's phase leaves it (an observe hook's is `off`, a suffix hook's at
    most `advise`, a `server.start` hook's at most `ask`), and the one declared when that is
    more."""
    from ..core.effects import Effect, phase_ceiling
    from ..core.points import Phase

    declared, phase, on = hook.get("effect"), hook.get("phase"), hook.get("on")
    if not isinstance(declared, str) or not isinstance(phase, str):
        return cell(declared)
    try:
        ceiling = phase_ceiling(on if isinstance(on, str) else "script", Phase(phase))
        effect = Effect.parse(declared)
    except (ValueError, KeyError):
        return declared
    if effect <= ceiling:
        return declared
    return f"{ceiling.word} (declared {declared}; phase)"


def _clamp_cell(clamp: Clamp) -> str:
    """The effect in force, and the one declared with what lowered it when that is more."""
    if not clamp.clamped_by:
        return clamp.effect.word
    by = ", ".join(clamp.clamped_by)
    return f"{clamp.effect.word} (declared {clamp.requested.word}; {by})"
