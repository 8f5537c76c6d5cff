"""One valid frame of each type, made from the frames' table (`core/hookframes.py` `FRAME_CLASSES`):
each required field gets a value of its declared type. The tests that walk every `FrameType`
through a renderer (the CLI view, the cluster's messages, the console) take their frames
from here, so a type added to the table is walked by them with no change to them.

Also a frame of a type no table has (`UNKNOWN`): the set is open, and every renderer shows
such a frame as its type and its fields.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import attrs
import orjson

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import Envelope, FrameType, blank, stamp
from mcpx_hooks.supervisor.core.hookframes import FRAME_CLASSES

RUN_ID = "sample-run"
#: A frame of a type no release has: what a newer server may send an older client.
UNKNOWN = {
    "runId": RUN_ID,
    "seq": 0,
    "at": "2026-01-01T00:00:00.000Z",
    "type": "future-kind",
    "shape": "round",
    "size": 3,
}


def _value(hint: Any) -> Any:
    """A value of the type `hint`: the first type of a union that is not None."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return _value(next(a for a in typing.get_args(hint) if a is not type(None)))
    origin = typing.get_origin(hint)
    if origin is tuple:
        return (_value(typing.get_args(hint)[0]),)
    if origin is dict or hint is dict:
        return {"key": "value"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(iter(hint))
    if hint is bool:
        return True
    if hint is int:
        return 7
    if hint is str:
        return "sample"
    return {"key": [1, "two"]}  # Any: a JSON value


def sample(frame_type: FrameType, seq: int = 0) -> dict[str, Any]:
    """A frame of `frame_type` in its wire form, stamped as frame `seq` of `RUN_ID`."""
    cls = FRAME_CLASSES[frame_type]
    hints = typing.get_type_hints(cls)
    envelope = {f.name for f in attrs.fields(Envelope)}
    required = {
        f.name: _value(hints[f.name])
        for f in attrs.fields(cls)
        if f.default is attrs.NOTHING and f.name not in envelope
    }
    frame = stamp(blank(cls, **required, type=frame_type), RUN_ID, seq)
    wire: dict[str, Any] = orjson.loads(orjson.dumps(to_json(frame)))  # as a reader gets it
    return wire


def every_frame() -> list[dict[str, Any]]:
    """One frame of each type, in the table's order, numbered from 0 (the order a reader
    checks is not this one: no renderer here checks it)."""
    return [sample(t, seq) for seq, t in enumerate(FrameType)]
