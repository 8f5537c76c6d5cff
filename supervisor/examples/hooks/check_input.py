"""A `before` check: the run's input must name someone."""

from typing import Any


def hook(payload: dict[str, Any]) -> dict[str, Any] | None:
    data = payload.get("input") or {}
    if not isinstance(data, dict) or not data.get("name"):
        return {"refuse": {"reason": "the input has no name"}}
    return {"advise": f"input ok: name is {data['name']!r}"}
