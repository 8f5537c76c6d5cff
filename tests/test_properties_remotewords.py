"""Properties (Hypothesis) of what `exec --remote` and the other remote commands say when a
socket ends otherwise than whole (`service/remotewords.py`): for any close code and reason,
and any refusal (any status, any body: bytes, huge, not UTF-8, nested deep, JSON that is no
object, a message that is no string), the words are made without raising, in words (no
Python repr of a value), bounded, and, as the CLI prints them (`say`), free of control
characters. Pure: no process, no socket.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr

from hypothesis import example, given
from hypothesis import strategies as st
from props import hostile_json, hostile_text
from trio_websocket import CloseReason, ConnectionRejected

from mcpx_hooks.supervisor.cli.common import say
from mcpx_hooks.supervisor.service.remotewords import (
    NO_CLOSE_FRAME,
    SAID_CHARS,
    closed,
    refusal,
    said_in,
)

URL = "ws://127.0.0.1:8765/v1/exec"
#: What the words add around what the server said (the host, the status, the hint).
FRAME_CHARS = 200
#: A close frame's reason is at most 123 bytes of UTF-8 (RFC 6455 §5.5).
REASON_BYTES = 123


def printed(line: str) -> list[str]:
    """`line` as the CLI prints it on stderr, in lines."""
    err = io.StringIO()
    with redirect_stderr(err):
        say(f"mcpx-hooks exec: {line}")
    return err.getvalue().splitlines()


def held_as_printed(line: str) -> None:
    """Printed, `line` holds no control character, and what follows its first line (the
    server's words with line breaks) is indented under it: no line of its own that reads
    as one of ours."""
    lines = printed(line)
    assert lines and all(part.isprintable() for part in lines), lines
    assert all(part.startswith("    ") for part in lines[1:]), lines


def message_body(message: object) -> bytes:
    return json.dumps({"message": message}).encode()


bodies = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.builds(message_body, hostile_json),
    st.builds(lambda v: json.dumps(v).encode(), hostile_json),
    st.builds(message_body, st.text(min_size=SAID_CHARS - 10, max_size=SAID_CHARS * 3)),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(1, 100_000)),
    st.builds(lambda n: b'{"message": ' + b"9" * n + b"}", st.integers(4000, 6000)),
    st.sampled_from([b"\xff\xfe{", b'{"message": "\xff"}', b'{"message": NaN}']),
)


# A message that is no string was said as Python shows a value: `HTTP 500 None`, and a
# 100 KB message was one 100 KB line.
@example(status=500, body=message_body(None))
@example(status=500, body=message_body({"a": [1]}))
@example(status=403, body=message_body("x" * 100_000))
@given(status=st.integers(100, 599), body=bodies)
def test_a_refusal_is_said_in_bounded_words(status: int, body: bytes | None) -> None:
    line = refusal(URL, ConnectionRejected(status, [], body))
    assert line.startswith(f"127.0.0.1:8765 refused the connection: HTTP {status}"), line
    assert len(line) <= SAID_CHARS + FRAME_CHARS, len(line)
    said = said_in(body or b"")
    try:
        message = json.loads(body or b"")["message"]
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        message = None
    if not isinstance(message, str):  # (nothing in words: nothing said)
        assert said == "", (body, said)
    elif len(message) <= SAID_CHARS:
        assert said == message
    else:
        assert said.startswith(message[:SAID_CHARS]), said[:80]
        assert f"{len(message) - SAID_CHARS} more characters" in said, said[-80:]
    held_as_printed(line)


@given(
    code=st.integers(1000, 4999),
    reason=st.one_of(st.none(), hostile_text, st.text(max_size=123)),
)
def test_a_close_is_said_in_bounded_words(code: int, reason: str | None) -> None:
    if reason is not None:
        reason = reason.encode("utf-8", "surrogatepass")[:REASON_BYTES].decode("utf-8", "ignore")
    line = closed(CloseReason(code, reason))
    assert str(code) in line, line
    if reason and code != NO_CLOSE_FRAME:  # (1006 is never sent in a close frame: lost)
        assert f"({reason})" in line
    assert len(line) <= REASON_BYTES + FRAME_CHARS, len(line)
    held_as_printed(line)


def test_no_close_frame_is_a_lost_connection() -> None:
    assert closed(None).startswith("the connection to the server was lost")
    assert closed(CloseReason(1006, None)) == closed(None)
