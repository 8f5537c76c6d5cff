"""A remote client holds a server's frames to their classes' wire shape (`core/wireshape.py`,
`service/remoteread.frame_problem`): every frame a server writes from the table passes, with its
optional fields or without them; one missing a field it must have, or holding one of another
type, is named by where it is wrong."""

from __future__ import annotations

import types
import typing
from typing import Any

import attrs
import orjson
import pytest
from frame_samples import RUN_ID, UNKNOWN, _value, every_frame

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import FrameType, blank, stamp
from mcpx_hooks.supervisor.core.hookframes import FRAME_CLASSES, HookFrame
from mcpx_hooks.supervisor.core.wireshape import shape_problem
from mcpx_hooks.supervisor.service.remoteread import frame_problem


def filled(hint: Any) -> Any:
    """A value of `hint`, an attrs class's with every one of its fields given."""
    if isinstance(hint, types.UnionType):
        return filled(next(a for a in typing.get_args(hint) if a is not type(None)))
    if typing.get_origin(hint) is tuple:
        return (filled(typing.get_args(hint)[0]),)
    if attrs.has(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: filled(hints[f.name]) for f in attrs.fields(hint) if f.init})
    return _value(hint)


def full(frame_type: FrameType) -> dict[str, Any]:
    """A frame of `frame_type` with every field of its class given, optional ones too."""
    cls = FRAME_CLASSES[frame_type]
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: filled(hints[f.name])
        for f in attrs.fields(cls)
        if f.name not in ("run_id", "seq", "at", "type")
    }
    frame = stamp(blank(cls, **fields, type=frame_type), RUN_ID, 3)
    wire: dict[str, Any] = orjson.loads(orjson.dumps(to_json(frame)))
    return wire


@pytest.mark.parametrize("frame", every_frame(), ids=lambda f: f["type"])
def test_every_frame_a_server_writes_passes(frame: dict[str, Any]) -> None:
    assert frame_problem(frame) is None
    assert frame_problem(full(FrameType(frame["type"]))) is None


def test_a_frame_of_a_type_the_client_does_not_know_passes_as_it_is() -> None:
    assert frame_problem(UNKNOWN) is None


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"status": None}, "status: not one of"),
        ({"durationMs": "3"}, "durationMs: not an integer (a string)"),
        ({"durationMs": True}, "durationMs: not an integer (a boolean)"),
        ({"durationMs": 2**64}, "durationMs: an integer past 64 bits"),
        ({"latencyMs": -(2**63) - 1}, "latencyMs: an integer past 64 bits"),
        ({"clampedBy": ["a", 2]}, "clampedBy[1]: not a string (a number)"),
        ({"refused": {"reason": "r"}}, "refused.failClosed: missing"),
        ({"dropped": [{"key": "k", "reason": []}]}, "dropped[0].reason: not a string (an array)"),
        ({"model": {"name": {}}}, "model.name: not a string (an object)"),
        ({"tokens": 5}, "tokens: not an object (a number)"),
    ],
)
def test_a_hook_frame_that_is_not_one_is_named_where(change: dict[str, Any], said: str) -> None:
    frame = {**full(FrameType.HOOK), **change}
    problem = shape_problem(HookFrame, frame)
    assert problem is not None and problem.startswith(said), problem
    assert frame_problem(frame) == f"a hook frame that is not one: {problem}"


def test_a_missing_field_is_named() -> None:
    frame = full(FrameType.END)
    del frame["durationMs"]
    assert frame_problem(frame) == "a end frame that is not one: durationMs: missing"
    assert frame_problem({"type": "stdout", "seq": 1}) == "a stdout frame without its text"
