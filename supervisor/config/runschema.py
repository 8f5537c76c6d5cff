"""The schema of `[runs]` (the runs a service keeps in memory) and `[history]` (the runs kept
on disk), from the defaults in `core/hooks.py`."""

from __future__ import annotations

from typing import Any, Final

from ..core.hooks import (
    DEFAULT_ARTIFACT_BYTES,
    DEFAULT_HISTORY_BYTES,
    DEFAULT_HISTORY_DAYS,
    DEFAULT_RETAIN_BYTES,
    DEFAULT_RUN_BYTES,
    DEFAULT_RUNS_RETAIN,
)
from .schemaparts import integer, table

#: `[history] path`: absolute, or under the home as `~/…`.
HISTORY_PATH_PATTERN: Final = "^(/|~/)"


def runs_schema() -> dict[str, Any]:
    """`[runs]`: what a service keeps of its runs in memory."""
    return table(
        {
            "retain": integer(
                1, f"Runs the service keeps for replay (default {DEFAULT_RUNS_RETAIN})."
            ),
            "runBytes": integer(
                4096,
                "What one run's frames may hold, in bytes as they cost in memory"
                f" (default {DEFAULT_RUN_BYTES}); past it its output frames are"
                " dropped and counted.",
            ),
            "retainBytes": integer(
                4096,
                "What the retained runs' frames may hold together (default"
                f" {DEFAULT_RETAIN_BYTES}); past it the oldest finished runs are"
                " forgotten.",
            ),
            "artifactBytes": integer(
                0,
                "What the retained runs' artifacts may hold together on disk, in bytes"
                f" (default {DEFAULT_ARTIFACT_BYTES}); past it the oldest runs'"
                " artifacts are dropped first, and a warning frame says so.",
            ),
        },
        "The service's run history.",
    )


def history_schema() -> dict[str, Any]:
    """`[history]`: where runs are kept after they end."""
    return table(
        {
            "enabled": {
                "type": "boolean",
                "description": "Whether runs are stored on disk, to outlive the"
                " process that ran them (default true); false keeps them in memory"
                " only.",
            },
            "path": {
                "type": "string",
                "pattern": HISTORY_PATH_PATTERN,
                "description": "The database's file: absolute, or under your home as"
                " `~/…` (default `$XDG_STATE_HOME/mcpx-hooks/history.db`, or"
                " `~/.local/state/mcpx-hooks/history.db`); artifacts are kept beside it.",
            },
            "retainDays": integer(
                1, f"Days a stored run is kept (default {DEFAULT_HISTORY_DAYS})."
            ),
            "retainBytes": integer(
                1,
                "What the stored runs may hold on disk together: their frames, their"
                " search index and their artifacts (default"
                f" {DEFAULT_HISTORY_BYTES}); past it the oldest runs are dropped first.",
            ),
        },
        "Where runs are kept after they end (`serve`, `exec`, `mcp`).",
    )
