"""What a run's prompt hooks share: the run's placeholders, its token budget spent so far,
its script's text, its artifacts and its warnings; and what all the supervisor's runs share,
each model's cap on requests in flight (`maxConcurrent`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import trio

from ..core.frames import ENVELOPE_KEYS, FrameType
from ..core.jsontext import wire_loads
from ..core.models import Model
from ..core.records import Record

#: A line is looked at as a possible `artifact` frame only if it holds this.
_ARTIFACT: Final = f'"{FrameType.ARTIFACT}"'.encode()
#: The most of a `--python` script's text `@source` holds.
SOURCE_BYTES: Final = 256 * 1024


@attrs.define(repr=False)
class PromptRun(Record):
    """One run's prompt state. Made by the run (`scriptrun.py`); a hook run outside a run
    (`hook test`, an observe hook) gets a fresh one of its own."""

    #: The run's per-call `placeholders` (request field, `exec --placeholder K=V`).
    placeholders: Mapping[str, Any] = attrs.field(factory=dict)
    #: Tokens the run's prompt hooks have spent (`[models] runBudgetTokens` bounds it).
    spent: int = 0
    #: A `--python` script's file (absolute), or `-c` code: what `@source` reads.
    source_file: str | None = None
    source_code: str | None = None
    #: Puts a `warning` frame in the run (None outside a run).
    warn: Callable[[str], object] | None = None
    #: The run's artifact frames so far, as wire dicts (None outside a run).
    artifacts: Callable[[], list[dict[str, Any]]] | None = None
    #: Warnings already given, so each is given once per run.
    warned: set[str] = attrs.field(factory=set)

    def warn_once(self, message: str) -> None:
        if self.warn is not None and message not in self.warned:
            self.warned.add(message)
            self.warn(message)

    def source(self) -> str | None:
        """The script's text (its first `SOURCE_BYTES`), or None for an argv script."""
        if self.source_code is not None:
            return self.source_code[:SOURCE_BYTES]
        if self.source_file is None:
            return None
        try:
            with open(self.source_file, "rb") as f:
                return f.read(SOURCE_BYTES).decode(errors="replace")
        except OSError as exc:
            return f"[the script's file could not be read: {os.strerror(exc.errno or 0)}]"


def artifact_frames(lines: list[bytes]) -> list[dict[str, Any]]:
    """The artifact frames among a journal's lines, as wire dicts (without their envelope)."""
    found = []
    for line in lines:
        if _ARTIFACT in line:
            frame = wire_loads(line)
            if frame.get("type") == FrameType.ARTIFACT:
                found.append({k: v for k, v in frame.items() if k not in ENVELOPE_KEYS})
    return found


#: Each model's cap on requests in flight, shared by every run of this supervisor. Keyed by
#: the model as declared (two configs declaring the same table share its cap).
_LIMITERS: dict[Model, trio.CapacityLimiter] = {}
#: The most models with a cap kept; past it the idle caps are forgotten.
_MAX_LIMITERS: Final = 256


def limiter_for(model: Model) -> trio.CapacityLimiter:
    """The cap on `model`'s requests in flight (`maxConcurrent`)."""
    limiter = _LIMITERS.get(model)
    if limiter is None:
        if len(_LIMITERS) >= _MAX_LIMITERS:
            for key, idle in list(_LIMITERS.items()):
                if idle.borrowed_tokens == 0:
                    del _LIMITERS[key]
        limiter = _LIMITERS[model] = trio.CapacityLimiter(model.max_concurrent)
    return limiter
