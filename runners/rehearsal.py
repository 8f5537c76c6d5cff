"""A module hook that the warm runner's waiting forks run once, before any real hook, so that
what running a hook touches is touched ahead of time (`warm.py`). Standard library only."""

from __future__ import annotations

from typing import Any


def hook(payload: dict[str, Any]) -> dict[str, Any]:
    return {"advise": str(payload.get("hook"))}
