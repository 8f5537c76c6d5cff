"""The one converter: each wire shape comes out exactly as its hand-written `to_json` did.

Each expected value is the literal the old code gave (keys in its order: the journal sends
`orjson.dumps` of these dicts, so the order is part of the bytes).
"""

from __future__ import annotations

import enum
import sys
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.answers import Asked, Dropped, Refusal
from mcpx_hooks.supervisor.core.convert import (
    _declared,
    _plain_form,
    converter,
    frame_json,
    to_json,
)
from mcpx_hooks.supervisor.core.effects import AnsweredBy
from mcpx_hooks.supervisor.core.events import Event, Gap
from mcpx_hooks.supervisor.core.frames import (
    ENVELOPE_KEYS,
    OUTPUT_TYPES,
    ArtifactFrame,
    EmitFrame,
    EndFrame,
    Envelope,
    ErrorFrame,
    FrameType,
    HookStatus,
    LogFrame,
    OutputFrame,
    ResultFrame,
    StartFrame,
    WarningFrame,
    blank,
    stamp,
    stamped_json,
)
from mcpx_hooks.supervisor.core.hookframes import FRAME_CLASSES, AskFrame, HookFrame, Ran
from mcpx_hooks.supervisor.core.hooks import hook_json
from mcpx_hooks.supervisor.run.hookcontext import RunInfo
from mcpx_hooks.supervisor.service.wire import Close, WireError

ENV: dict[str, Any] = {"run_id": "r1", "seq": 3, "at": "2024-01-01T00:00:00.000Z"}
WIRE_ENV: dict[str, Any] = {"runId": "r1", "seq": 3, "at": "2024-01-01T00:00:00.000Z"}
HOOK: dict[str, Any] = {
    **ENV,
    "name": "h",
    "on": "script",
    "phase": "before",
    "action": "run",
    "effect": "apply",
    "requested_effect": "run",
    "clamped_by": ("phase",),
    "status": HookStatus.OK,
    "duration_ms": 5,
    "sandbox": "strict",
}
WIRE_HOOK: dict[str, Any] = {
    **WIRE_ENV,
    "name": "h",
    "on": "script",
    "phase": "before",
    "action": "run",
    "effect": "apply",
    "requestedEffect": "run",
    "clampedBy": ["phase"],
    "status": "ok",
    "durationMs": 5,
    "sandbox": "strict",
}

SHAPES: list[tuple[Any, dict[str, Any]]] = [
    (
        HookFrame(**HOOK),
        {**WIRE_HOOK, "changed": False, "refused": None, "dropped": [], "type": "hook"},
    ),
    (
        HookFrame(
            **HOOK,
            changed=True,
            original=None,
            value=None,
            advice=("a",),
            proposals=({"value": 1},),
            refused=Refusal("go? (answered no)", fail_closed=False),
            asked=Asked("go?", "no", AnsweredBy.CLIENT),
            dropped=(Dropped("run", "needs effect run; in force: apply"),),
            reason="r",
            failure_note="n",
            exit_code=0,
            stderr_tail="t",
            ran=Ran(("a",), HookStatus.OK, 0, None, "out"),
        ),
        {
            **WIRE_HOOK,
            "changed": True,
            "refused": {"reason": "go? (answered no)", "failClosed": False},
            "dropped": [{"key": "run", "reason": "needs effect run; in force: apply"}],
            "type": "hook",
            "advice": ["a"],
            "proposals": [{"value": 1}],
            "asked": {"question": "go?", "answer": "no", "by": "client"},
            "reason": "r",
            "failureNote": "n",
            "exitCode": 0,
            "stderrTail": "t",
            "ran": {"argv": ["a"], "status": "ok", "exitCode": 0, "stdout": "out"},
            "original": None,
            "value": None,
        },
    ),
    (
        HookFrame(
            **HOOK, asked=Asked("q"), refused=Refusal("h failed (timeout): x", fail_closed=True)
        ),
        {
            **WIRE_HOOK,
            "changed": False,
            "refused": {"reason": "h failed (timeout): x", "failClosed": True},
            "dropped": [],
            "type": "hook",
            "asked": {"question": "q"},
        },
    ),
    (
        HookFrame(**HOOK, changed=True, value=5),
        {
            **WIRE_HOOK,
            "changed": True,
            "refused": None,
            "dropped": [],
            "type": "hook",
            "value": 5,
            "original": None,
        },
    ),
    (
        StartFrame(**ENV, argv=("a",), cwd="/", sandbox="strict"),
        {**WIRE_ENV, "argv": ["a"], "cwd": "/", "sandbox": "strict", "type": "start"},
    ),
    (
        LogFrame(**ENV, level="info", message="m"),
        {**WIRE_ENV, "level": "info", "message": "m", "type": "log"},
    ),
    (
        LogFrame(**ENV, level="info", message="m", attributes={"k": 1}),
        {**WIRE_ENV, "level": "info", "message": "m", "type": "log", "attrs": {"k": 1}},
    ),
    (EmitFrame(**ENV, value=None), {**WIRE_ENV, "value": None, "type": "emit"}),
    (OutputFrame(**ENV, text="t"), {**WIRE_ENV, "text": "t", "type": "stdout"}),
    (
        OutputFrame(**ENV, text="t", type=FrameType.STDERR),
        {**WIRE_ENV, "text": "t", "type": "stderr"},
    ),
    (
        ArtifactFrame(**ENV, id="a0", name="n", mime="m", size=1, sha256="s"),
        {
            **WIRE_ENV,
            "id": "a0",
            "name": "n",
            "mime": "m",
            "size": 1,
            "sha256": "s",
            "type": "artifact",
        },
    ),
    (ResultFrame(**ENV, value={"x": 1}), {**WIRE_ENV, "value": {"x": 1}, "type": "result"}),
    (
        ResultFrame(**ENV, value=1, advice=("a",), proposals=({"hook": "h", "value": 2},)),
        {
            **WIRE_ENV,
            "value": 1,
            "type": "result",
            "advice": ["a"],
            "proposals": [{"hook": "h", "value": 2}],
        },
    ),
    (ErrorFrame(**ENV, message="m"), {**WIRE_ENV, "message": "m", "type": "error"}),
    (
        ErrorFrame(**ENV, message="m", exit_code=1, advice=("a",), refused_by="h"),
        {
            **WIRE_ENV,
            "message": "m",
            "type": "error",
            "exitCode": 1,
            "advice": ["a"],
            "refusedBy": "h",
        },
    ),
    (
        EndFrame(**ENV, exit_code=None, duration_ms=3),
        {**WIRE_ENV, "exitCode": None, "durationMs": 3, "type": "end"},
    ),
    (WarningFrame(**ENV, message="w"), {**WIRE_ENV, "message": "w", "type": "warning"}),
    (
        AskFrame(**ENV, ask_id="ask-1", hook="h", question="go?", default="no", deadline_ms=0),
        {
            **WIRE_ENV,
            "askId": "ask-1",
            "hook": "h",
            "question": "go?",
            "default": "no",
            "deadlineMs": 0,
            "type": "ask",
        },
    ),
    (Dropped("apply", "unknown key"), {"key": "apply", "reason": "unknown key"}),
    (
        RunInfo("r1", ("python", "job.py"), "/w", "2024-01-01T00:00:00.000Z"),
        {
            "runId": "r1",
            "argv": ["python", "job.py"],
            "cwd": "/w",
            "startedAt": "2024-01-01T00:00:00.000Z",
        },
    ),
    (
        WireError(Close.NOT_FOUND, "no run r9").payload,
        {"type": "error", "code": 4404, "error": "not-found", "message": "no run r9"},
    ),
    (
        WireError(Close.BAD_REQUEST, "a; b", ["a", "b"]).payload,
        {
            "type": "error",
            "code": 4400,
            "error": "bad-request",
            "message": "a; b",
            "problems": ["a", "b"],
        },
    ),
]


@pytest.mark.parametrize(("shape", "expected"), SHAPES, ids=lambda v: type(v).__name__)
def test_each_shape_converts_as_it_did(shape: Any, expected: dict[str, Any]) -> None:
    out = to_json(shape)
    assert out == expected
    assert orjson.dumps(out) == orjson.dumps(expected)  # the same bytes: key order too


def test_events_and_gaps_convert_too_and_the_observer_mark_stays_home() -> None:
    event = Event(seq=3, kind="run.started", at="t", data={"a": 1}, caused_by_observer=True)
    assert to_json(event) == {"seq": 3, "kind": "run.started", "at": "t", "data": {"a": 1}}
    assert to_json(Gap(3, 7)) == {"from": 3, "to": 7, "kind": "gap"}


def test_a_hook_converts_by_its_own_shape() -> None:
    hook_text = '{"name": "h", "on": "script", "phase": "before", "run": ["true"]}'
    config = load_config(cwd=Path("/"), environ={}, command_line_hooks=[hook_text], discover=False)
    (hook,) = config.hooks
    assert to_json(hook) == hook_json(hook)
    assert to_json(hook)["run"] == ["true"] and to_json(hook)["source"] == "command-line"


def test_stamp_is_the_envelope_and_blank_has_none() -> None:
    frame = blank(WarningFrame, message="w")
    assert (frame.run_id, frame.seq, frame.at) == ("", -1, "")
    stamped = stamp(frame, "r1", 7)
    assert (stamped.run_id, stamped.seq, stamped.message) == ("r1", 7, "w")
    assert stamped.at.endswith("Z") and len(stamped.at) == len("2024-01-01T00:00:00.000Z")


def test_the_table_of_frame_classes_covers_every_type() -> None:
    assert set(FRAME_CLASSES) == set(FrameType)
    for frame_type, cls in FRAME_CLASSES.items():
        # The class makes frames of that type: by its default, or (output) by its field.
        default = attrs.fields_dict(cls)["type"].default
        assert default == frame_type or cls is OutputFrame, (frame_type, cls)
    assert OUTPUT_TYPES.issubset(FrameType)


def test_the_envelope_is_the_wire_names_of_its_fields() -> None:
    envelope = to_json(Envelope(run_id="r", seq=0, at="now"))
    assert tuple(envelope) == ENVELOPE_KEYS


#: Values an `Any` field of a frame may carry: scalars (passed on as they are), and what the
#: converter reshapes (tuples inside, enums, a frame).
_ANY_VALUES: list[Any] = [
    None,
    "s",
    0,
    1.5,
    True,
    {"a": (1, [2, ("t",)]), "e": FrameType.LOG},
    [HookStatus.OK, (1,)],
    ("x",),
    FrameType.LOG,
    blank(EndFrame, exit_code=1, duration_ms=2),
]


def _full(hint: Any, any_value: Any) -> Any:
    """A value of `hint` that is no field's default."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return _full(next(a for a in typing.get_args(hint) if a is not type(None)), any_value)
    if typing.get_origin(hint) is tuple:
        return (_full(typing.get_args(hint)[0], any_value),) * 2
    if typing.get_origin(hint) is dict or hint is dict:
        return {"key": any_value}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return list(hint)[-1]
    if hint in (bool, int, str):
        return {bool: True, int: 7, str: "text"}[hint]
    return any_value


def _as_bytes_and_types(wire: Any) -> tuple[bytes, Any]:
    """A wire dict exactly: its bytes (so its keys' order) and the type of every value in it."""

    def types_of(value: Any) -> Any:
        if isinstance(value, dict):
            return [(type(k), types_of(v)) for k, v in value.items()]
        if isinstance(value, list | tuple):
            return (type(value), [types_of(v) for v in value])
        return type(value)

    return orjson.dumps(wire, option=orjson.OPT_NON_STR_KEYS), types_of(wire)


#: The frame classes `frame_json` makes from a table: all but the hook frame (its answers and
#: tokens are classes of their own), which goes to the converter.
_PLAIN_FRAMES = sorted(set(FRAME_CLASSES.values()) - {HookFrame}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _PLAIN_FRAMES)
def test_a_frame_converts_as_the_converter_does(cls: type[Envelope]) -> None:
    """`frame_json` (the journal's: a table of the class's fields where it can) gives what the
    converter does, for every frame class, at its defaults and with every field set."""
    for frame in _made(cls):
        assert _as_bytes_and_types(frame_json(frame)) == _as_bytes_and_types(
            converter().unstructure(frame)
        ), frame


def _made(cls: type[Envelope]) -> list[Envelope]:
    """`cls` at its defaults, and with every field set (to each of `_ANY_VALUES`)."""
    hints = typing.get_type_hints(cls)
    fields = attrs.fields(cls)
    envelope = {f.name for f in attrs.fields(Envelope)}
    required = {
        f.name: _full(hints[f.name], None)
        for f in fields
        if f.default is attrs.NOTHING and f.name not in envelope
    }
    made = [blank(cls, **required)]
    for any_value in _ANY_VALUES:
        made.append(cls(**{f.name: _full(hints[f.name], any_value) for f in fields}))
    return made


def test_a_frame_stamped_as_json_is_its_stamped_frame_as_json() -> None:
    """`stamped_json` (the journal's: the envelope set in the frame's JSON, no stamped copy
    of the frame) gives, byte for byte and type for type, the stamped frame's JSON: every
    frame class at its defaults and with every field set, and the hook frames above."""
    frames = [shape for shape, _ in SHAPES if isinstance(shape, Envelope)]
    assert any(isinstance(f, HookFrame) for f in frames)
    for cls in _PLAIN_FRAMES:
        frames += _made(cls)
    for frame in frames:
        for run_id, seq in (("run-a", 0), ("", -1), ("r" * 40, 123_456)):
            wire = stamped_json(frame, run_id, seq)
            expected = frame_json(stamp(frame, run_id, seq))
            assert wire["at"].endswith("Z") and len(wire["at"]) == len(expected["at"])
            expected["at"] = wire["at"]  # (the clock moved between the two, or not)
            assert _as_bytes_and_types(wire) == _as_bytes_and_types(expected), frame


def test_a_frame_converts_by_its_table_before_and_after_cattrs_resolves_it() -> None:
    """Every frame class but the hook frame is made from its table, its fields read the same
    from their annotations as written (a run's first frames: `exec` with no hook loads no
    cattrs, `test_import_weight.py`) and as cattrs resolves them in place."""
    assert {c for c in FRAME_CLASSES.values() if _plain_form(c) is not None} == set(_PLAIN_FRAMES)
    for cls in _PLAIN_FRAMES:
        names = vars(sys.modules[cls.__module__])
        written = {
            k: v
            for c in reversed(cls.__mro__)
            for k, v in vars(c).get("__annotations__", {}).items()
        }
        for name, hint in typing.get_type_hints(cls).items():
            assert isinstance(written[name], str)
            assert _declared(written[name], names) == _declared(hint, names) is not None, name
