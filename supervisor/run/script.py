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
    EmitFrame,
    FrameType,
    LogFrame,
    OutputFrame,
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
MAX_LINE: Final = 64 * 1024
#: Longest frames-channel line: a `result` or `emit` value up to this is delivered intact.
MAX_FRAME_LINE: Final = 16 * 1024 * 1024
#: stdout kept for an argv script's "stdout parsed as JSON" result.
MAX_RESULT_STDOUT: Final = MAX_FRAME_LINE
#: The end of stdout kept for `onError` hooks (`error.stdoutTail`): a test runner prints its
#: failures there.
STDOUT_TAIL_BYTES: Final = 64 * 1024


@attrs.define
class ScriptOutcome:
    process: Outcome = attrs.field(factory=Outcome)
    #: Set by the caller when its deadline cancelled the script.
    timed_out: bool = False
    #: `(value,)` from the last `result` line on the frames channel.
    result_line: tuple[Any] | None = None
    #: From the Python launcher: the exception that failed the script.
    exception: str | None = None
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
        if python or self.stdout_cut or not self.stdout.strip():
            return None
        try:
            return loads(bytes(self.stdout))
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


#: Lines handed on from one read before yielding to the scheduler: a 64 KiB read can hold
#: thousands of short lines, and their frames should reach readers while later ones are cut.
_LINES_PER_YIELD: Final = 256


async def _lines(stream: trio.abc.ReceiveStream, longest: int) -> AsyncIterator[tuple[bytes, bool]]:
    """Lines (newline removed) of at most `longest` bytes, a longer one cut into pieces of
    that size; each with whether a newline ended it (False for a piece of a longer line, and
    for a last line without one)."""
    buf = bytearray()
    while chunk := await stream.receive_some(65536):
        buf.extend(chunk)
        given = 0
        searched = 0
        while True:
            given += 1
            if given % _LINES_PER_YIELD == 0:
                await trio.lowlevel.checkpoint()
            cut = buf.find(b"\n", searched)
            if cut < 0 and len(buf) < longest:
                break
            end = cut if 0 <= cut < longest else longest
            yield bytes(buf[:end]), end == cut
            del buf[: end + 1 if end == cut else end]
            searched = 0
        searched = len(buf)  # a long line's start is never searched again
    if buf:
        yield bytes(buf), False


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
    async for line, whole in _lines(stream, MAX_LINE):
        # Kept as written: a piece of a long line gets no newline of its own, so one JSON
        # value over `MAX_LINE` on one line still reads as one.
        said = line + b"\n" if whole else line
        if len(kept) + len(said) <= MAX_RESULT_STDOUT:
            kept.extend(said)
        else:
            outcome.stdout_cut = True
        tail.extend(said)
        if len(tail) > 2 * STDOUT_TAIL_BYTES:  # trimmed now and then, not at every line
            del tail[: len(tail) - STDOUT_TAIL_BYTES]
        journal.offer(blank(OutputFrame, text=_text(line), type=FrameType.STDOUT))


async def _pump_stderr(
    stream: trio.abc.ReceiveStream, journal: RunJournal, outcome: ScriptOutcome
) -> None:
    tail = outcome.process.stderr_tail
    async for line, whole in _lines(stream, MAX_LINE):
        tail.extend(line + b"\n" if whole else line)
        if len(tail) > STDERR_TAIL_BYTES:
            del tail[: len(tail) - STDERR_TAIL_BYTES]
        journal.offer(blank(OutputFrame, text=_text(line), type=FrameType.STDERR))


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
    async for line, whole in _lines(stream, MAX_FRAME_LINE):
        cut = not whole and len(line) == MAX_FRAME_LINE
        if cut or too_long:
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
            continue
        _frame_line(line, journal, outcome, calls)


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
