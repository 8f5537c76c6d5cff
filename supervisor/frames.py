"""Frames: the run's messages to its clients (SPEC §6). attrs in, one cattrs converter out.

Field names are snake_case here and camelCase on the wire; fields that are None are left out.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, Final

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override


class FrameType(enum.StrEnum):
    """Frame types, in the order a run sends them (SPEC §6). An open set for consumers."""

    START = "start"
    HOOK = "hook"
    LOG = "log"
    EMIT = "emit"
    STDOUT = "stdout"
    STDERR = "stderr"
    ARTIFACT = "artifact"
    RESULT = "result"
    ERROR = "error"
    END = "end"


class HookStatus(enum.StrEnum):
    """How a hook's process went. Anything but `ok` and `skipped` is a failure (SPEC §1)."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    KILLED = "killed"
    INVALID_OUTPUT = "invalid-output"
    SKIPPED = "skipped"

    @property
    def is_failure(self) -> bool:
        return self not in (HookStatus.OK, HookStatus.SKIPPED)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@attrs.frozen
class Resources:
    cpu_ms: int
    max_rss_kb: int


@attrs.frozen
class Ran:
    """The command a `run`-effect answer executed, and how it went."""

    argv: tuple[str, ...]
    status: HookStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str | None = None
    stderr_tail: str | None = None


@attrs.frozen
class HookFrame:
    """Everything that happened to one hook: the single description of it (SPEC §6)."""

    run_id: str
    seq: int
    at: str
    name: str
    on: str
    phase: str
    action: str
    effect: str
    requested_effect: str
    clamped_by: tuple[str, ...]
    status: HookStatus
    duration_ms: int
    sandbox: str
    changed: bool = False
    #: The value before an `apply` replaced it (present only then), and the value after.
    original: Any = None
    value: Any = None
    advice: tuple[str, ...] = ()
    proposals: tuple[dict[str, Any], ...] = ()
    #: `{"reason": …, "failClosed": bool}` when this hook stops the run.
    refused: dict[str, Any] | None = None
    ask: dict[str, Any] | None = None
    dropped: tuple[dict[str, str], ...] = ()
    #: Why the hook failed or was skipped, in words.
    reason: str | None = None
    #: Said when `failure = "closed"` can no longer refuse because clamping lowered the effect.
    failure_note: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str | None = None
    resources: Resources | None = None
    ran: Ran | None = None
    type: FrameType = FrameType.HOOK


#: Fields that stay on the wire even when empty: consumers rely on them being there.
_ALWAYS: Final = frozenset(
    {"type", "changed", "advice", "proposals", "dropped", "clamped_by", "refused", "status"}
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


converter = cattrs.Converter()


def _unstructure_factory(cls: type) -> Any:
    overrides: dict[str, Any] = {
        a.name: override(
            rename=_camel(a.name),
            omit_if_default=a.default is not attrs.NOTHING and a.name not in _ALWAYS,
        )
        for a in attrs.fields(cls)
    }
    return make_dict_unstructure_fn(cls, converter, **overrides)


converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)


def to_json(frame: Any) -> dict[str, Any]:
    """The wire form of a frame (or any attrs object of this module)."""
    out: dict[str, Any] = converter.unstructure(frame)
    if out.get("changed"):  # a replaced `null` is still worth showing
        out.setdefault("original", None)
        out.setdefault("value", None)
    return out
