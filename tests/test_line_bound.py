"""MCP's stdio lines are read up to `MAX_MESSAGE_BYTES` and no further, however the pipe's
reads cut them: a line one byte over is refused whether its newline comes in the read that
takes it over the bound or in a later one, and the lines around it are read as they are."""

from __future__ import annotations

import anyio
import pytest
import trio

from mcpx_hooks.supervisor.core.servers import MAX_MESSAGE_BYTES
from mcpx_hooks.supervisor.tools.jsonlines import LineReader, TooLong


class Reads(trio.abc.ReceiveStream):
    """The given reads, one per `receive_some`, then the end of the stream."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self._chunks.pop(0) if self._chunks else b""

    async def aclose(self) -> None:
        self._chunks.clear()


async def lines_of(chunks: list[bytes]) -> list[bytes | TooLong]:
    reader, out = LineReader(Reads(chunks)), []
    while True:
        try:
            out.append(await reader.line())
        except anyio.EndOfStream:
            return out


def cut(data: bytes, *sizes: int) -> list[bytes]:
    """`data` in reads of `sizes`, then the rest in one."""
    chunks, at = [], 0
    for size in sizes:
        chunks.append(data[at : at + size])
        at += size
    return [*chunks, data[at:]]


@pytest.mark.parametrize("over", [0, 1, 100])
async def test_a_line_at_the_bound_is_read_and_one_over_is_refused(over: int) -> None:
    line = b'{"id": 7, "pad": "' + b"x" * (MAX_MESSAGE_BYTES - 20 + over) + b'"}'
    assert len(line) == MAX_MESSAGE_BYTES + over
    data = b'{"a": 1}\n' + line + b'\n{"b": 2}\n'
    # the read that takes the buffer past the bound holds the newline as well
    got = await lines_of(cut(data, 9 + MAX_MESSAGE_BYTES - 10))
    assert got[0] == b'{"a": 1}' and got[-1] == b'{"b": 2}' and len(got) == 3
    if not over:
        assert got[1] == line
    else:
        assert isinstance(got[1], TooLong) and got[1].head.startswith(b'{"id": 7')


async def test_a_line_over_the_bound_is_refused_however_it_is_cut() -> None:
    line = b"y" * (MAX_MESSAGE_BYTES + 5)
    data = line + b"\nnext\n"
    for sizes in [(), (MAX_MESSAGE_BYTES,), (MAX_MESSAGE_BYTES + 1,), (65536,) * 3]:
        got = await lines_of(cut(data, *sizes))
        assert isinstance(got[0], TooLong) and got[1:] == [b"next"], sizes
