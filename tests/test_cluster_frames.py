"""Every frame type through the cluster's map of frames to messages (`names.frame_message`):
one frame of each type of the table (`frame_samples`) goes to its run's subject of the frames
stream with its seq, carried whole when it fits and, when it does not, as a stand-in that
keeps its place and says what it was; a type no table has is carried the same way."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from frame_samples import RUN_ID, UNKNOWN, every_frame

from mcpx_hooks.supervisor.cluster.names import (
    FIELD_KEPT,
    HEADROOM,
    Header,
    Stream,
    frame_message,
    frames_subject,
    stream_specs,
)
from mcpx_hooks.supervisor.core.frames import ENVELOPE_KEYS, OUTPUT_TYPES, FrameType
from mcpx_hooks.supervisor.core.hooks import Config

#: A server's max payload a frame fits in; and one no frame fits in.
ROOMY = 1024 * 1024
TIGHT = HEADROOM + 1

FRAMES = [*every_frame(), {**UNKNOWN, "seq": len(FrameType)}]


def _stored(subject: str) -> bool:
    """Whether the frames stream takes `subject` (NATS wildcards: `*` a token, `>` the rest)."""
    (spec,) = [s for s in stream_specs(Config()) if s.name == Stream.FRAMES]
    return any(_matches(p.split("."), subject.split(".")) for p in spec.subjects)


def _matches(pattern: list[str], tokens: list[str]) -> bool:
    if pattern and pattern[0] == ">":
        return bool(tokens)
    if not pattern or not tokens:
        return not pattern and not tokens
    return pattern[0] in ("*", tokens[0]) and _matches(pattern[1:], tokens[1:])


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f["type"])
def test_every_frame_goes_whole_to_its_runs_subject(frame: dict[str, Any]) -> None:
    line = orjson.dumps(frame)
    subject, payload, headers = frame_message(RUN_ID, frame["seq"], line, ROOMY)
    assert subject == frames_subject(RUN_ID) and _stored(subject)
    assert payload == line
    assert headers[Header.SEQ] == str(frame["seq"])
    assert headers[Header.MSG_ID] == f"{RUN_ID}.{frame['seq']}"
    assert (Header.LAST_SUBJECT_SEQ in headers) == (frame["seq"] == 0)


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f["type"])
def test_a_frame_too_large_keeps_its_place_and_says_what_it_was(frame: dict[str, Any]) -> None:
    big = {**frame, "bulk": "x" * (FIELD_KEPT + 1)}
    subject, payload, headers = frame_message(RUN_ID, big["seq"], orjson.dumps(big), TIGHT)
    assert subject == frames_subject(RUN_ID)
    assert headers[Header.SEQ] == str(frame["seq"])
    carried = orjson.loads(payload)
    assert {k: carried[k] for k in ENVELOPE_KEYS} == {k: frame[k] for k in ENVELOPE_KEYS}
    assert "bulk" not in carried
    if frame["type"] in OUTPUT_TYPES:
        assert carried["type"] == FrameType.WARNING
        assert f"a {frame['type']} frame of" in carried["message"]
    else:
        assert all(carried[k] == v for k, v in frame.items())  # its type among them
