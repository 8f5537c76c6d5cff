"""Running the script of a run: through the one spawn path, its output turned into frames.

The script's stdout and stderr become `stdout`/`stderr` frames line by line as they happen
(a line longer than `MAX_LINE` is cut into pieces of that size); the frames channel
(`MCPX_FRAMES_FD`, fd 3 in the script) gives `log`, `emit` and `result`, one JSON line each,
kept whole up to `MAX_FRAME_LINE` (a longer line is dropped with a warning, never cut); files
left under `MCPX_ARTIFACTS_DIR` become `artifact` frames once it has exited, their contents
kept with the run (`artifacts.py`). Output frames are
offered to the run's journal, which holds them within the run's budget and counts the rest;
everything the script writes is read, so a script is never blocked by its own output.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..core.frames import (
    MAX_OUTPUT_LINE,
    EmitFrame,
    FrameType,
    LogFrame,
    WarningFrame,
    blank,
)
from ..core.hookenv import (
    ARTIFACTS_DIR_VAR,
    CALLS_FD_VAR,
    FRAMES_FD_VAR,
    INPUT_VAR,
    base_environment,
)
from ..core.hooks import STDERR_TAIL_BYTES
from ..core.jsontext import JsonError, loads
from ..core.records import Record
from ..core.redact import Redactor
from ..core.scripts import Script
from ..process.child import Outcome
from ..process.launch import RUNNER_FLAGS
from ..process.runnerside import runner_path
from ..process.spawner import Spawner
from ..process.spawnspec import ChildSpec
from .journal import RunJournal

if TYPE_CHECKING:
    from .calls import ScriptCalls

FRAMES_FD: Final = 3
#: Where the script reads the answers to its tool calls (`calls.py`).
CALLS_FD: Final = 4
#: Longest stdout or stderr line kept whole; a longer one is cut into pieces of this size.
MAX_LINE: Final = MAX_OUTPUT_LINE
#: Longest frames-channel line: a `result` or `emit` value up to this is delivered intact.
MAX_FRAME_LINE: Final = 16 * 1024 * 1024
#: stdout kept for an argv script's "stdout parsed as JSON" result.
MAX_RESULT_STDOUT: Final = MAX_FRAME_LINE
#: The end of stdout kept for `onError` hooks (`error.stdoutTail`): a test runner prints its
#: failures there.
STDOUT_TAIL_BYTES: Final = 64 * 1024


@attrs.define(repr=False)
class ScriptOutcome(Record):
    process: Outcome = attrs.field(factory=Outcome)
    #: Set by the caller when its deadline cancelled the script.
    timed_out: bool = False
    #: `(value,)` from the last `result` line on the frames channel.
    result_line: tuple[Any] | None = None
    #: From the Python launcher: the exception that failed the script.
    exception: str | None = None
    #: stdout, for an argv script's result; once its start shows it is not JSON (`_not_json`),
    #: the rest is not kept (it would never be read), only counted for `stdout_cut`.
    stdout: bytearray = attrs.field(factory=bytearray)
    #: stdout past `MAX_RESULT_STDOUT`: the "stdout as JSON" result is then not read.
    stdout_cut: bool = False
    #: The last `STDOUT_TAIL_BYTES` (or up to twice that) of stdout, whatever its length.
    stdout_tail: bytearray = attrs.field(factory=bytearray)

    @property
    def succeeded(self) -> bool:
        p = self.process
        return not self.timed_out and p.exited and p.exit_code == 0 and p.signal is None

    def result_value(self, python: bool) -> Any:
        """The script's result: the last `result` line; for argv scripts, else stdout as
        JSON; else None."""
        if self.result_line is not None:
            return self.result_line[0]
        stdout = self.stdout
        if python or self.stdout_cut or not stdout or stdout.isspace() or _not_json(stdout):
            return None
        try:
            return loads(bytes(stdout))
        except JsonError:
            return None

    def result_warning(self, python: bool) -> str | None:
        """Why an argv script's result is null though it printed: its stdout was longer than
        is kept for it (None when that is not why)."""
        if python or self.result_line is not None or not self.stdout_cut:
            return None
        return (
            f"the script's stdout is over {MAX_RESULT_STDOUT // (1024 * 1024)} MiB, more than"
            " is read as its result, so its result is null; a larger value can be left as a"
            f" file under ${ARTIFACTS_DIR_VAR} (an artifact)"
        )

    def failure(self, timeout_ms: int) -> str:
        """Why the script failed, in words (it did not succeed)."""
        process = self.process
        if self.timed_out:
            return f"the script timed out after {timeout_ms} ms; its tree was killed"
        if self.exception:
            return self.exception
        if process.lost:
            return (
                "the spawner died while the script ran, and the script's tree with it; a new "
                "spawner serves the next run (this one is not retried)"
            )
        if (over := process.over_memory) is not None:
            return f"over memoryMb {over}: the script's tree went over its memory bound"
        if process.signal is not None:
            return f"the script was killed by signal {process.signal}"
        return f"the script exited with status {process.exit_code}"


#: What a JSON document can begin with (after white space), as `loads` reads it.
_JSON_STARTS: Final = frozenset(b'{["-0123456789tfnNI')


def _not_json(stdout: bytearray) -> bool:
    """Whether `stdout` is surely not a JSON document, seen from its first bytes (a long
    output that is not one is then not copied twice to be parsed and refused)."""
    head = bytes(stdout[:64]).lstrip()
    return bool(head) and 0x21 <= head[0] <= 0x7E and head[0] not in _JSON_STARTS


#: Most bytes taken from a pipe at one read (what a pipe holds): its lines become one batch.
_READ_BYTES: Final = 64 * 1024

#: A batch of lines from one read: the lines (newline removed) of at most `longest` bytes, a
#: longer one cut into pieces of that size; for each, whether a newline ended it (False for a
#: piece of a longer line, and for a last line without one); and the bytes they were read as
#: (each line followed by its newline, if it had one).
Batch = tuple[list[bytes], list[bool], bytes]


async def _batches(stream: trio.abc.ReceiveStream, longest: int) -> AsyncIterator[Batch]:
    """The lines of `stream`, a batch for each read that ends one or more (`Batch`)."""
    pending = bytearray()  # the start of a line not yet ended, at most `longest` bytes
    while chunk := await stream.receive_some(_READ_BYTES):
        if pending:
            pending += chunk
            if b"\n" not in chunk and len(pending) <= longest:
                continue  # a long line's start is copied once, when it ends or is cut
            data = bytes(pending)
            pending.clear()
        else:
            data = chunk if isinstance(chunk, bytes) else bytes(chunk)
        lines, wholes, used = _split(data, longest)
        pending += memoryview(data)[used:]
        if lines:
            yield lines, wholes, data if used == len(data) else data[:used]
    if pending:
        rest = bytes(pending)
        yield [rest], [False], rest


def _split(data: bytes, longest: int) -> tuple[list[bytes], list[bool], int]:
    """The lines of `data` as `_batches` gives them, and how many of its bytes they took
    (the rest is the start of a line of at most `longest` bytes and not yet ended: one of
    exactly `longest` is cut only once the byte after it is known not to be its newline)."""
    last = data.rfind(b"\n")
    lines = data[:last].split(b"\n") if last >= 0 else []
    if lines and max(map(len, lines)) <= longest:  # no line to cut: all of them whole
        wholes, at = [True] * len(lines), last + 1
    else:
        lines, wholes, at = [], [], 0
    while True:  # what is left: lines over `longest` are cut
        cut = data.find(b"\n", at, at + longest + 1)
        if cut < 0 and len(data) - at <= longest:
            return lines, wholes, at
        whole = cut >= 0
        end = cut if whole else at + longest
        lines.append(data[at:end])
        wholes.append(whole)
        at = end + 1 if whole else end


def script_argv(script: Script, plan_path: str) -> tuple[str, ...]:
    if script.argv is not None:
        return script.argv
    return (sys.executable, *RUNNER_FLAGS, runner_path("launcher.py"), plan_path)


def script_environment(
    scratch: str, artifacts: str, extra: Mapping[str, str], input_path: str | None
) -> dict[str, str]:
    env = base_environment(os.environ, scratch)
    env.update(extra)
    env[FRAMES_FD_VAR] = str(FRAMES_FD)
    env[CALLS_FD_VAR] = str(CALLS_FD)
    env[ARTIFACTS_DIR_VAR] = artifacts
    if input_path is not None:
        env[INPUT_VAR] = input_path
    return env


async def run_script(
    spawner: Spawner,
    spec: ChildSpec,
    outcome: ScriptOutcome,
    *,
    stdin: bytes,
    kill_grace: float,
    journal: RunJournal,
    calls: ScriptCalls | None = None,
) -> None:
    """Runs the script to its end, putting its output frames in `journal` as they come;
    fills `outcome`. Its tool calls are served by `calls` while it runs (none in flight
    outlives it).

    The caller owns the timeout: cancelling kills the tree (SIGTERM, `kill_grace`, SIGKILL),
    and `outcome` still holds what was seen until then.
    """
    spec = attrs.evolve(spec, input_fds=(CALLS_FD,))
    async with (
        spawner.open_child(spec, kill_grace=kill_grace, extra_fds=(FRAMES_FD,)) as child,
        trio.open_nursery() as serving,
    ):
        outcome.process = child.outcome
        if calls is not None:
            serving.start_soon(calls.serve, child.extra[1])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child._write_stdin, stdin)
            nursery.start_soon(_pump_stdout, child.stdout, journal, outcome)
            nursery.start_soon(_pump_stderr, child.stderr, journal, outcome)
            nursery.start_soon(_pump_frames, child.extra[0], journal, outcome, calls)
            await child.wait()
        serving.cancel_scope.cancel()


async def _pump_stdout(
    stream: trio.abc.ReceiveStream, journal: RunJournal, outcome: ScriptOutcome
) -> None:
    kept, tail = outcome.stdout, outcome.stdout_tail
    held = 0  # what `kept` would hold if all of stdout were kept (see `ScriptOutcome.stdout`)
    cut = False  # whether the last line so far was a piece of a longer one
    async for lines, wholes, said in _batches(stream, MAX_LINE):
        # Kept as written: a piece of a long line gets no newline of its own, so one JSON
        # value over `MAX_LINE` on one line still reads as one.
        if held + len(said) <= MAX_RESULT_STDOUT:
            held += len(said)
            if not _not_json(kept):
                kept.extend(said)
        else:
            held = _keep_each(kept, held, (lines, wholes, said), outcome)
        tail.extend(said)
        if len(tail) > 2 * STDOUT_TAIL_BYTES:  # trimmed now and then, not at every line
            del tail[: len(tail) - STDOUT_TAIL_BYTES]
        texts, cut = _texts(lines, wholes, said, journal.redactor, cut)
        journal.offer_output(FrameType.STDOUT, texts)


def _keep_each(kept: bytearray, held: int, batch: Batch, outcome: ScriptOutcome) -> int:
    """Keeps each line of a batch that still fits in `MAX_RESULT_STDOUT`; what `held` is then."""
    keep = not _not_json(kept)
    lines, wholes, _ = batch
    for line, whole in zip(lines, wholes, strict=True):
        said = line + b"\n" if whole else line
        if held + len(said) <= MAX_RESULT_STDOUT:
            held += len(said)
            if keep:
                kept.extend(said)
        else:
            outcome.stdout_cut = True
    return held


async def _pump_stderr(
    stream: trio.abc.ReceiveStream, journal: RunJournal, outcome: ScriptOutcome
) -> None:
    tail = outcome.process.stderr_tail
    cut = False
    async for lines, wholes, said in _batches(stream, MAX_LINE):
        tail.extend(said)
        if len(tail) > STDERR_TAIL_BYTES:
            del tail[: len(tail) - STDERR_TAIL_BYTES]
        texts, cut = _texts(lines, wholes, said, journal.redactor, cut)
        journal.offer_output(FrameType.STDERR, texts)


def _texts(
    lines: list[bytes], wholes: list[bool], said: bytes, redactor: Redactor, cut: bool
) -> tuple[list[str], bool]:
    """`_text` of each line of a batch, and whether its last is a piece of a longer line
    (`cut`: whether the line before the batch's first was). Lines that each had their
    newline are decoded at once: a newline is never part of a UTF-8 sequence, so a bad
    sequence ends before it and becomes the same U+FFFD either way. Where a line was cut in
    pieces, a secret's value the cut fell in is left out of both (`Redactor.cut`): each piece
    is a frame of its own, redacted alone."""
    if not cut and all(wholes):
        texts = _text(said).split("\n")
        texts.pop()  # after the last newline
        return texts, False
    texts = []
    for line, whole in zip(lines, wholes, strict=True):
        ends_cut = not whole and len(line) >= MAX_LINE  # (not the end of the output)
        text = _text(line)
        texts.append(redactor.cut(text, start=cut, end=ends_cut) if cut or ends_cut else text)
        cut = ends_cut
    return texts, cut


def _text(line: bytes) -> str:
    """A line of output as text: bytes that are not UTF-8 become U+FFFD."""
    return line.decode(errors="replace")


async def _pump_frames(
    stream: trio.abc.ReceiveStream,
    journal: RunJournal,
    outcome: ScriptOutcome,
    calls: ScriptCalls | None = None,
) -> None:
    """The frames channel: JSON lines `log`, `emit`, `result` (and the launcher's
    `exception`). A line that is not one of them becomes a warning `log` frame; a line over
    `MAX_FRAME_LINE` is dropped whole, with a warning."""
    too_long = False
    async for lines, wholes, _ in _batches(stream, MAX_FRAME_LINE):
        for line, whole in zip(lines, wholes, strict=True):
            cut = not whole and len(line) == MAX_FRAME_LINE
            if not (cut or too_long):
                _frame_line(line, journal, outcome, calls)
                continue
            # A piece of a line past the cap: what is left of that line is not a frame either.
            if not too_long:
                journal.append(
                    blank(
                        WarningFrame,
                        message=f"frames channel: a line over {MAX_FRAME_LINE} bytes was "
                        "dropped (a result or emit value must fit in it)",
                    )
                )
            too_long = cut


def _frame_line(
    line: bytes, journal: RunJournal, outcome: ScriptOutcome, calls: ScriptCalls | None
) -> None:
    try:
        msg = loads(line)
    except JsonError as exc:
        msg, why = None, str(exc)
    else:
        why = "not a frame object"
    # The channel speaks the frames' words (`runners/launcher.py`), and one of its own:
    # `exception`, which the run turns into its `error` frame.
    kind = msg.get("type") if isinstance(msg, dict) else None
    if kind == FrameType.RESULT and isinstance(msg, dict):
        outcome.result_line = (msg.get("value"),)
    elif kind == "exception" and isinstance(msg, dict):
        outcome.exception = f"{msg.get('exceptionType')}: {msg.get('message')}"
    elif kind == FrameType.CALL and isinstance(msg, dict) and calls is not None:
        calls.submit(msg)
    elif kind == FrameType.EMIT and isinstance(msg, dict):
        journal.offer(blank(EmitFrame, value=msg.get("value")))
    elif kind == FrameType.LOG and isinstance(msg, dict):
        attrs_ = msg.get("attrs")
        journal.offer(
            blank(
                LogFrame,
                level=str(msg.get("level", "info")),
                message=str(msg.get("message", "")),
                attributes=attrs_ if isinstance(attrs_, dict) else {},
            )
        )
    else:
        text = _text(line[:200])
        journal.offer(blank(LogFrame, level="warning", message=f"frames channel: {why}: {text}"))
