"""Output in batches: a read's lines split at once, stamped and kept together, printed together.

What a script writes must come out as it did line by line: the same lines in the same order,
a line split across reads joined, a line over 64 KiB cut into pieces of 64 KiB wherever in a
batch it falls, the same frames in the journal (their budget, their redaction), and `exec
--json` printing the journal's lines as they are.
"""

from __future__ import annotations

import fcntl
import io
import os
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpx_hooks.supervisor.cli.execview import PIPE_BYTES, Output, widen_pipe
from mcpx_hooks.supervisor.core.chain import GENESIS, check, extend
from mcpx_hooks.supervisor.core.frames import FrameType, OutputFrame, blank
from mcpx_hooks.supervisor.core.redact import Redactor
from mcpx_hooks.supervisor.run import script
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.script import (
    MAX_LINE,
    ScriptOutcome,
    _batches,
    _pump_stderr,
    _pump_stdout,
    _split,
    _text,
    _texts,
)

LONG = 16


def line_by_line(data: bytes, longest: int) -> list[tuple[bytes, bool]]:
    """The lines as the supervisor read them one at a time before batches (the reference)."""
    buf = bytearray(data)
    out: list[tuple[bytes, bool]] = []
    while True:
        cut = buf.find(b"\n")
        if cut < 0 and len(buf) < longest:
            break
        end = cut if 0 <= cut < longest else longest
        out.append((bytes(buf[:end]), end == cut))
        del buf[: end + 1 if end == cut else end]
    if buf:
        out.append((bytes(buf), False))
    return out


class Chunks(trio.abc.ReceiveStream):
    """A stream that gives `chunks`, one a read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self._chunks.pop(0) if self._chunks else b""

    async def aclose(self) -> None:
        self._chunks = []


async def batched(chunks: list[bytes], longest: int) -> list[tuple[bytes, bool]]:
    out: list[tuple[bytes, bool]] = []
    said = b""
    batches: AsyncIterator[tuple[list[bytes], list[bool], bytes]] = _batches(
        Chunks(chunks), longest
    )
    async for lines, wholes, raw in batches:
        assert raw == b"".join(
            line + b"\n" if whole else line for line, whole in zip(lines, wholes, strict=True)
        )
        said += raw
        out.extend(zip(lines, wholes, strict=True))
    assert said == b"".join(chunks)
    return out


async def test_a_line_split_across_reads_is_one_line() -> None:
    got = await batched([b"one\ntw", b"o\nthr", b"ee", b"\nfour"], LONG)
    assert got == [(b"one", True), (b"two", True), (b"three", True), (b"four", False)]


async def test_a_long_line_is_cut_inside_a_batch_as_it_was_line_by_line() -> None:
    data = b"a\n" + b"x" * (2 * LONG + 3) + b"\nb\n" + b"y" * LONG + b"\nc\n" + b"z" * LONG
    got = await batched([data], LONG)
    assert got == line_by_line(data, LONG)
    assert got[1:4] == [(b"x" * LONG, False), (b"x" * LONG, False), (b"xxx", True)]
    assert got[5] == (b"y" * LONG, True)  # exactly `longest` bytes: whole
    assert got[-1] == (b"z" * LONG, False)


async def test_at_64_kib_a_line_is_cut_into_pieces_within_one_read() -> None:
    data = b"short\n" + b"q" * (MAX_LINE + 10) + b"\nend\n"
    got = await batched([data], MAX_LINE)
    assert got == [(b"short", True), (b"q" * MAX_LINE, False), (b"q" * 10, True), (b"end", True)]


@pytest.mark.parametrize("seed", range(40))
async def test_any_reads_give_the_lines_line_by_line_reading_gave(seed: int) -> None:
    rng = random.Random(seed)
    data = b"".join(
        rng.choice([b"\n", b"ab", b"\xff\xe2\x82", b"x" * rng.randrange(40)])
        for _ in range(rng.randrange(1, 60))
    )
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data), rng.randrange(6))))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    assert await batched([c for c in chunks if c], LONG) == line_by_line(data, LONG)


async def test_a_line_of_exactly_64_kib_ending_a_read_is_one_line() -> None:
    # A pipe read gives at most 64 KiB: a line of exactly that many bytes ends its read, and
    # its newline comes with the next. It is one whole line, not a piece and an empty line.
    data = b"q" * MAX_LINE + b"\nnext\n"
    assert await batched([data[:MAX_LINE], data[MAX_LINE:]], MAX_LINE) == [
        (b"q" * MAX_LINE, True),
        (b"next", True),
    ]


@pytest.mark.parametrize("at", range(2 * LONG + 4))
async def test_lines_of_exactly_longest_bytes_are_whole_wherever_a_read_ends(at: int) -> None:
    data = b"y" * LONG + b"\n" + b"z" * (2 * LONG) + b"\nend\n"
    chunks = [c for c in (data[:at], data[at:]) if c]
    assert await batched(chunks, LONG) == line_by_line(data, LONG)


def test_split_leaves_an_unended_short_line_for_the_next_read() -> None:
    assert _split(b"a\nbc", LONG) == ([b"a"], [True], 2)
    assert _split(b"abc", LONG) == ([], [], 0)
    assert _split(b"x" * LONG, LONG) == ([], [], 0)  # its newline may be the next byte
    assert _split(b"x" * (LONG + 2), LONG) == ([b"x" * LONG], [False], LONG)
    assert _split(b"x" * LONG + b"\n", LONG) == ([b"x" * LONG], [True], LONG + 1)


async def pumped(data: bytes, journal: RunJournal) -> ScriptOutcome:
    outcome = ScriptOutcome()
    await _pump_stdout(Chunks([data[: len(data) // 2], data[len(data) // 2 :]]), journal, outcome)
    return outcome


async def test_output_frames_are_the_frames_offered_one_by_one() -> None:
    texts = ["plain", "", 'quo"te\\', "tab\tnew", "é ü 日本", "\x00\x1f", "\ufffd"]
    data = "\n".join(texts).encode() + b"\n\xff\xfe\n"
    batched_journal, single = RunJournal("run%d"), RunJournal("run%d")
    outcome = await pumped(data, batched_journal)
    for text in [*texts, "\ufffd\ufffd"]:
        single.offer(blank(OutputFrame, text=text, type=FrameType.STDOUT))

    def unstamped(j: RunJournal) -> list[bytes]:
        return [orjson.dumps({**f, "at": ""}) for f in j.frames]

    assert unstamped(batched_journal) == unstamped(single)
    assert data.startswith(bytes(outcome.stdout))  # kept no further than its start: not JSON
    assert batched_journal.ends == single.ends
    assert batched_journal.cost == single.cost
    assert len({f["at"] for f in batched_journal.frames}) <= 2  # one `at` per batch


async def test_stderr_in_batches_keeps_its_tail() -> None:
    journal, outcome = RunJournal("r"), ScriptOutcome()
    await _pump_stderr(Chunks([b"e1\ne", b"2\n"]), journal, outcome)
    assert [(f["type"], f["text"]) for f in journal.frames] == [("stderr", "e1"), ("stderr", "e2")]
    assert bytes(outcome.process.stderr_tail) == b"e1\ne2\n"


@pytest.mark.parametrize(("count", "budget"), [(50, 2000), (10_000, 600_000), (9000, 10**9)])
def test_a_batch_is_held_to_the_run_budget_as_single_frames_are(count: int, budget: int) -> None:
    texts = [f"line {i}" for i in range(count)]
    batched_journal, single = RunJournal("r", run_bytes=budget), RunJournal("r", run_bytes=budget)
    batched_journal.offer_output(FrameType.STDOUT, texts)
    for text in texts:
        single.offer(blank(OutputFrame, text=text, type=FrameType.STDOUT))
    assert len(batched_journal) == len(single)
    assert batched_journal.dropped_frames == single.dropped_frames
    assert batched_journal.dropped_bytes == single.dropped_bytes
    assert (batched_journal.cost, batched_journal.ends) == (single.cost, single.ends)
    assert [f["type"] for f in batched_journal.frames] == [f["type"] for f in single.frames]
    if budget < 10**9:
        assert batched_journal.dropped_frames > 0
        assert batched_journal.frames[-1]["type"] == "warning"


def test_a_batch_is_redacted() -> None:
    journal = RunJournal("r")
    journal.redactor = Redactor({"TOKEN": "s3cr3t-value-xyz"})
    journal.offer_output(FrameType.STDOUT, ["a s3cr3t-value-xyz b", "clean"])
    assert [f["text"] for f in journal.frames] == ["a [secret TOKEN] b", "clean"]
    assert all(b"s3cr3t" not in line for line in journal.lines)


def test_a_lone_surrogate_takes_the_frame_by_frame_way() -> None:
    journal = RunJournal("r")
    journal.offer_output(FrameType.STDOUT, ["a", "b\ud800", "c"])
    assert [f["seq"] for f in journal.frames] == [0, 1, 2]
    assert [f["text"][0] for f in journal.frames] == ["a", "b", "c"]


def test_a_batch_after_end_is_refused() -> None:
    journal = RunJournal("r")
    journal.seal("gone")
    with pytest.raises(RuntimeError):
        journal.offer_output(FrameType.STDOUT, ["late"])


async def test_a_follower_gets_the_lines_as_kept() -> None:
    journal = RunJournal("r")
    journal.offer_output(FrameType.STDOUT, ["a", "b"])
    got: list[list[bytes]] = []

    async def follow() -> None:
        async for batch in journal.follow(1).encoded():
            got.append(batch)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
        journal.offer_output(FrameType.STDOUT, ["c", "d"])
        await trio.testing.wait_all_tasks_blocked()
        journal.seal("done")
    assert got[:2] == [journal.lines[1:2], journal.lines[2:4]]  # what waited, then each batch
    assert [line for batch in got for line in batch] == journal.lines[1:]


@pytest.mark.parametrize(
    ("stdout", "value"),
    [
        (b"  [1, 2]\n", [1, 2]),
        (b'\n{"a": true}', {"a": True}),
        (b"line of output\n" * 1000, None),
        (b"-3", -3),
        (b"null", None),
        (b"\t", None),
        ('"é"'.encode("utf-16"), "é"),
    ],
)
def test_stdout_as_json_is_read_as_before(stdout: bytes, value: object) -> None:
    outcome = ScriptOutcome()
    outcome.stdout.extend(stdout)
    assert outcome.result_value(python=False) == value


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_decoded_at_once_is_each_line_decoded(seed: int) -> None:
    rng = random.Random(seed)
    pieces = [b"\xff", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3\xa9", b"\xed\xa0\x80", b"a", b"\n"]
    said = b"".join(rng.choice(pieces) for _ in range(rng.randrange(60))) + b"\n"
    lines = said[:-1].split(b"\n")
    texts, cut = _texts(lines, [True] * len(lines), said, Redactor({}), False)
    assert texts == [_text(line) for line in lines] and not cut


async def test_json_stdout_over_many_reads_is_kept_whole_and_read() -> None:
    data = b"[\n" + b"1,\n" * 5000 + b"2]\n"
    outcome = ScriptOutcome()
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    await _pump_stdout(Chunks(chunks), RunJournal("r"), outcome)
    assert bytes(outcome.stdout) == data
    assert outcome.result_value(python=False) == [1] * 5000 + [2]


@pytest.mark.parametrize("start", [b"not json ", b"[1, "])
async def test_stdout_past_what_is_read_as_a_result_is_cut_as_before(
    start: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(script, "MAX_RESULT_STDOUT", 100)
    data = start + b"x" * 40 + b"\n" + b"y" * 70 + b"\nz\n"
    outcome = ScriptOutcome()
    await _pump_stdout(Chunks([data[:30], data[30:]]), RunJournal("r"), outcome)
    assert outcome.stdout_cut
    assert outcome.result_value(python=False) is None
    assert outcome.result_warning(python=False) is not None
    if start.startswith(b"["):  # a line that did not fit is left out, a later one that does kept
        assert bytes(outcome.stdout) == data[: len(start) + 41] + b"z\n"


class _Binary(io.BytesIO):
    def __init__(self, broken: bool) -> None:
        super().__init__()
        self.broken = broken

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.broken:
            raise BrokenPipeError
        return super().write(data)


class _Text(io.StringIO):
    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.buffer = _Binary(broken)

    def fileno(self) -> int:
        return 1  # (`os.dup2` is not called in these tests)


def test_exec_json_prints_a_batch_of_lines_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = _Text()
    monkeypatch.setattr(sys, "stdout", stdout)
    out = Output()
    out.encoded([b'{"a":"\xc3\xa9"}', b"{}"])
    out.frame({"type": "end", "x": "é"}, as_json=True)
    assert stdout.buffer.getvalue() == '{"a":"é"}\n{}\n{"type":"end","x":"é"}\n'.encode()


def test_exec_json_to_a_text_only_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    Output().encoded([b'{"a":"\xc3\xa9"}'])
    assert stdout.getvalue() == '{"a":"é"}\n'


def test_exec_json_after_a_closed_pipe_says_once(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []
    monkeypatch.setattr(sys, "stdout", _Text(broken=True))
    monkeypatch.setattr("os.dup2", lambda a, b: None)  # keep pytest's own stdout
    out = Output(on_closed=lambda: closed.append(True))
    out.encoded([b"{}"])
    out.encoded([b"{}"])
    assert out.closed and closed == [True]


def test_a_pipe_on_stdout_is_widened_and_anything_else_left_alone(tmp_path: Path) -> None:
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb", closefd=False) as stream:
            widen_pipe(stream)
        if hasattr(fcntl, "F_GETPIPE_SZ"):
            assert fcntl.fcntl(write, fcntl.F_GETPIPE_SZ) >= min(PIPE_BYTES, _pipe_max())
    finally:
        os.close(read)
        os.close(write)
    with (tmp_path / "f").open("wb") as file:
        widen_pipe(file)
    widen_pipe(io.StringIO())  # no file descriptor
    closed = (tmp_path / "g").open("wb")
    closed.close()
    widen_pipe(closed)


def _pipe_max() -> int:
    try:
        return int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except OSError:
        return 65536


_TEXTS = st.lists(
    st.one_of(
        st.text(st.characters(exclude_categories=())),  # lone surrogates among them
        st.sampled_from(['","text":"x', '"type":"stdout"}', "\\", "tok3n-value", "é\u2028\x00"]),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(out_texts=_TEXTS, err_texts=_TEXTS, run_id=st.text(max_size=8))
def test_the_readable_view_reads_a_batch_as_its_frames_say(
    out_texts: list[str], err_texts: list[str], run_id: str
) -> None:
    """`exec`'s readable view reads an output frame's text from its journal line alone: what
    it prints is what each frame, decoded whole, shows (redacted, made safe, any text)."""
    from mcpx_hooks.supervisor.cli.view import frame_lines
    from mcpx_hooks.supervisor.core.frames import LogFrame

    journal = RunJournal(run_id)
    journal.redactor = Redactor({"TOKEN": "tok3n-value"})
    journal.offer_output(FrameType.STDOUT, out_texts)
    journal.append(blank(LogFrame, level="info", message='a "log", "type":"stdout"}'))
    journal.offer_output(FrameType.STDERR, err_texts)
    seen: list[object] = []
    printed: list[str] = []
    out = Output()
    out.line = printed.append  # type: ignore[method-assign]
    out.readable(journal.lines, seen.append)
    assert printed == ["\n".join(line for f in journal.frames for line in frame_lines(f))]
    assert [f["type"] for f in seen] == ["log"]


@pytest.mark.parametrize("budget", [10**9, 30_000])
async def test_the_end_chain_made_in_slices_is_the_chain_of_every_line_sent(budget: int) -> None:
    """The chain is extended in slices with checkpoints before `end` (the other tasks go on
    meanwhile), and over what is left when `end` is appended; what `end` carries is still
    the chain of every line before it, in order, whatever the budget dropped."""
    journal = RunJournal("r", run_bytes=budget)
    journal.offer_output(FrameType.STDOUT, [f"a{i}" for i in range(5000)])
    journal.offer(blank(OutputFrame, text="one", type=FrameType.STDERR))
    await journal.chain_lines()
    journal.offer_output(FrameType.STDERR, ["b\ud800", "c"])  # the frame-by-frame way
    journal.offer_output(FrameType.STDOUT, [f"d{i}" for i in range(30)])
    journal.seal("done")  # `append` hashes what `chain_lines` did not
    end = journal.frames[-1]
    assert end["type"] == "end"
    assert end["chain"] == extend(GENESIS, journal.lines[:-1]).hex()
    assert check(journal.lines) is None
    assert (journal.dropped_frames > 0) == (budget < 10**9)
