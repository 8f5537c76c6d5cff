"""The rule a schema cannot say of `[script].<phase>` lines: they compile as Python.

A phase runs as one block of Python in the script's process (its lines joined, then
dedented), and a typo there used to be found only when a script ran. Each phase is compiled
here as it will be (`compile`, nothing run), and a `SyntaxError` is a problem at the line's
pointer. A phase that splices in a farther layer's lines (a `null` item) is compiled where it
runs, whole: its own lines may not stand alone.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from ..core.errors import Problem
from ..core.spawntext import text_problem
from .schemaparts import SCRIPT_PHASES


def script_problems(doc: Any, file: str) -> list[Problem]:
    """A problem for each phase of `doc`'s `[script]` whose lines do not compile as Python,
    at the pointer of the line Python names. A phase that is not a list of strings a process
    can take is passed over: the schema says what is wrong with it."""
    script = doc.get("script") if isinstance(doc, Mapping) else None
    if not isinstance(script, Mapping):
        return []
    problems = []
    for phase in SCRIPT_PHASES:
        lines = script.get(phase)
        if not isinstance(lines, list) or not all(
            isinstance(x, str) and text_problem(x) is None for x in lines
        ):
            continue
        try:
            compile(
                textwrap.dedent("\n".join(lines)), f"<script.{phase}>", "exec", dont_inherit=True
            )
        except SyntaxError as exc:
            at, said = _item(lines, exc.lineno), (exc.text or "").strip()
            message = f"does not compile as Python: {exc.msg}" + (f": {said!r}" if said else "")
            problems.append(Problem(file, f"/script/{phase}/{at}", message))
    return problems


def _item(lines: list[str], lineno: int | None) -> int:
    """The index of the item that holds line `lineno` (1-based) of the joined phase (an item
    may hold several lines)."""
    seen = 0
    for index, item in enumerate(lines):
        seen += item.count("\n") + 1
        if lineno is not None and lineno <= seen:
            return index
    return max(len(lines) - 1, 0)
