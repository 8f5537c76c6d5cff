"""Properties (Hypothesis) of how the remote client reads a server's socket
(`service/remoteread.py`): for any WebSocket messages (frames of every type, output frames
with any text, lone surrogates escaped, numbers past 64 bits, lines that are no JSON or no
object, blank lines, crafted lines that read as other objects once joined, the service's own
error message with and without `seq`), `batches` hands on exactly the objects a line by line
reading hands on, in the same order and the same batches (those before a bad line first), and
fails as it fails, with `RemoteError` alone. Pure: a fake socket, no process.
"""

from __future__ import annotations

import json
from typing import Any

import trio
from hypothesis import example, given
from hypothesis import strategies as st
from props import hostile_json, hostile_text, render
from trio_websocket import CloseReason, ConnectionClosed

from mcpx_hooks.supervisor.core.frames import FrameType, ServiceMessage
from mcpx_hooks.supervisor.core.jsontext import wire_loads
from mcpx_hooks.supervisor.service.remoteread import RemoteError, batches, frame_problem
from mcpx_hooks.supervisor.service.remotewords import closed, words
from mcpx_hooks.supervisor.service.wire import Close


class Socket:
    """What `batches` reads: `messages`, then the close `code`."""

    def __init__(self, messages: list[str | bytes], code: int) -> None:
        self.messages = list(messages)
        self.code = code

    async def get_message(self) -> str | bytes:
        if self.messages:
            return self.messages.pop(0)
        raise ConnectionClosed(CloseReason(self.code, "bye"))


Reading = tuple[list[list[dict[str, Any]]], tuple[str, bool] | None]


def read(messages: list[str | bytes], code: int, frames: bool) -> Reading:
    """What `batches` hands on, and the error it ends with (its words, `bad_input`)."""
    got: list[list[dict[str, Any]]] = []

    async def main() -> tuple[str, bool] | None:
        try:
            async for batch in batches(Socket(messages, code), frames=frames):  # type: ignore[arg-type]
                got.append(list(batch))
        except RemoteError as exc:
            return str(exc), exc.bad_input
        return None

    return got, trio.run(main)


def reference(messages: list[str | bytes], code: int, frames: bool) -> Reading:
    """The same messages read a line at a time, each line on its own (`wire_loads`)."""
    got: list[list[dict[str, Any]]] = []
    error: dict[str, Any] | None = None
    for message in messages:
        text = message.decode(errors="replace") if isinstance(message, bytes) else message
        batch: list[dict[str, Any]] = []
        for line in text.split("\n"):
            if not line:
                continue
            try:
                obj = wire_loads(line)
            except (ValueError, RecursionError):
                obj = None
            wrong: str | None = None
            if not isinstance(obj, dict):
                shown = line if len(line) <= 80 else f"{line[:80]}…"
                wrong = f"the server sent what is not a JSON object: {shown!r}"
            elif obj.get("type") == ServiceMessage.ERROR and not {"seq", "askId"} & obj.keys():
                error = obj
                continue
            elif frames and (problem := frame_problem(obj)) is not None:
                wrong = f"the server sent {problem}"
            if wrong is not None:
                if batch:
                    got.append(batch)
                return got, (wrong, False)
            assert isinstance(obj, dict)
            batch.append(obj)
        got.append(batch)
    if code == Close.NORMAL:
        return got, None
    reason = CloseReason(code, "bye")
    if error is not None:
        said = words(error.get("message"))
        return got, (
            f"the server said: {said}" if said else closed(reason),
            error.get("code") == Close.BAD_REQUEST,
        )
    return got, (closed(reason), False)


def output_line(kind: str, text: Any, extra: dict[str, Any]) -> str:
    """An output frame as the journal writes it: its type last."""
    return render({**extra, "text": text, "type": kind})


OUT = FrameType.STDOUT.value
#: Lines that each end as an output frame's does, and read as other objects once joined:
#: the second ends the first's object, or one line holds two objects.
JOINED = (
    '{"text":"a","k":{"n":1,"type":"stdout"}',
    '"text":"b","type":"stdout"}',
    '{"text":"c","type":"stdout"},{"text":"d","type":"stdout"}',
)

seq = st.one_of(st.integers(0, 2**63), st.integers(2**64 - 2, 2**66), st.just(render(2**64)))
extra = st.dictionaries(
    st.sampled_from(["seq", "ts", "runId", "k", "text"]),
    st.one_of(seq, hostile_json),
    max_size=3,
)
frame_line = st.one_of(
    st.builds(output_line, st.sampled_from([OUT, "stderr"]), hostile_text, extra),
    st.builds(output_line, st.sampled_from([OUT, "stderr"]), hostile_json, extra),
    st.builds(
        lambda kind, more: render({"type": kind, **more}),
        st.sampled_from([str(k) for k in FrameType]),
        extra,
    ),
    st.builds(
        lambda message, more: render({"type": "error", "message": message, **more}),
        hostile_text,
        st.dictionaries(st.sampled_from(["seq", "askId", "code"]), hostile_json, max_size=2),
    ),
)
line = st.one_of(
    frame_line,
    frame_line,
    st.sampled_from(["", " ", "not json", "[1]", "3", "null", '"s"', "{", "}", *JOINED]),
    st.builds(render, hostile_json),
)
message = st.builds(
    lambda lines, end, as_bytes: (
        ("\n".join(lines) + end).encode(errors="surrogatepass")
        if as_bytes
        else "\n".join(lines) + end
    ),
    st.lists(line, max_size=6),
    st.sampled_from(["", "\n"]),
    st.booleans(),
)


def same(messages: list[str | bytes], code: int, frames: bool) -> None:
    # (repr: an integer and a float of the same value are equal, but not the same object)
    assert repr(read(messages, code, frames)) == repr(reference(messages, code, frames))


BIG = f'{{"seq":{2**64},"text":"a","type":"stdout"}}'


@example(messages=[BIG], code=1000, frames=True)
@example(messages=[f'{{"text":"a","type":"stdout"}}\n{BIG}'], code=1000, frames=True)
@example(messages=["\n".join(JOINED[:2])], code=1000, frames=True)
@example(messages=["\n".join([JOINED[2], *JOINED[:2]])], code=1000, frames=True)
@example(messages=['{"text":1,"type":"stdout"}'], code=1000, frames=True)
@example(messages=['{"text":"\\ud800","type":"stdout"}'], code=1000, frames=True)
@example(messages=['{"type":"error","message":"no"}'], code=4400, frames=True)
@given(
    messages=st.lists(message, max_size=4),
    code=st.sampled_from([Close.NORMAL, Close.BAD_REQUEST, Close.INTERNAL_ERROR, 1006]),
    frames=st.booleans(),
)
def test_a_message_is_read_as_its_lines_one_by_one(
    messages: list[str | bytes], code: int, frames: bool
) -> None:
    same(messages, code, frames)


@given(texts=st.lists(st.one_of(hostile_text, st.text(max_size=40)), min_size=1, max_size=30))
def test_output_frames_of_any_text_are_handed_on_as_written(texts: list[str]) -> None:
    lines = [output_line(OUT, t, {"seq": i}) for i, t in enumerate(texts)]
    got, error = read(["\n".join(lines)], Close.NORMAL, True)
    assert error is None
    assert [[frame["text"] for frame in batch] for batch in got] == [texts]
    assert [json.dumps(f["seq"]) for f in got[0]] == [str(i) for i in range(len(texts))]
