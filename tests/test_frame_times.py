"""A frame's `at`, read in one place (`core.frames.at_time`) for every part that measures
between frames: the view's wait for an answer, a run ended for its gone owner, a lost
worker's run, a gateway's index of runs. Whatever a frame holds, the reading gives a time or
nothing, never an exception."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.core.frames import at_time, lasted_ms, now_rfc3339, seconds_between


def test_an_at_as_the_journal_stamps_it_reads_as_an_aware_time() -> None:
    when = at_time("2026-12-05T07:30:00.369Z")
    assert when == dt.datetime(2026, 12, 5, 7, 30, 0, 369000, tzinfo=dt.UTC)
    assert at_time(now_rfc3339()) is not None


def test_what_is_not_an_at_reads_as_nothing() -> None:
    # Not text, not a time, or a time without its zone (which no frame is stamped with).
    for value in (None, 3, ["2026-12-05T07:30:00Z"], "", "yesterday", "2026-12-05T07:30:00"):
        assert at_time(value) is None, value


def test_seconds_between_two_ats_never_runs_backwards() -> None:
    assert seconds_between("2026-12-05T07:30:00.000Z", "2026-12-05T07:30:01.500Z") == 1.5
    assert seconds_between("2026-12-05T07:30:01Z", "2026-12-05T07:30:00Z") == 0.0
    assert seconds_between("2026-12-05T07:30:00Z", "later") is None


def test_a_span_of_stored_frames_is_read_from_their_first_and_last_at() -> None:
    lines = [
        json.dumps({"type": "start", "at": "2026-12-05T07:30:00.000Z"}).encode(),
        json.dumps({"type": "stdout", "at": "2026-12-05T07:30:00.250Z"}).encode(),
    ]
    assert lasted_ms(lines) == 250
    assert lasted_ms([]) == 0
    assert lasted_ms([b"[1, 2]", b"{}"]) == 0
    assert lasted_ms([b'{"at": 5}', b"not json"]) == 0


@given(st.one_of(st.text(), st.binary(), st.integers(), st.none(), st.lists(st.text())))
def test_any_at_a_frame_may_hold_reads_as_a_time_or_nothing(value: object) -> None:
    when = at_time(value)
    assert when is None or when.tzinfo is not None
    line = json.dumps({"at": value if not isinstance(value, bytes) else value.hex()}).encode()
    assert lasted_ms([line, line]) == 0
