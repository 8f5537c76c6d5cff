"""An `onSuccess` transform: upper-cases a string result."""

from typing import Any


def hook(payload: dict[str, Any]) -> dict[str, Any] | None:
    value = payload["result"]["value"]
    if isinstance(value, str):
        return {"apply": {"value": value.upper()}, "advise": "shouted the result"}
    return None
