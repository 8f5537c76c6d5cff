"""Running the script of a run: through the one spawn path, its output turned into frames.

The script's stdout and stderr become `stdout`/`stderr` frames line by line as they happen; the
frames channel (`MCPX_FRAMES_FD`, fd 3 in the script) gives `log`, `emit` and `result`; files
left under `MCPX_ARTIFACTS_DIR` become `artifact` frames once it has exited. Output is bounded:
past `MAX_RUN_OUTPUT` bytes of frames the rest is drained and dropped, and counted.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from .frames import (
    ArtifactFrame,
    EmitFrame,
    Frame,
    FrameType,
    LogFrame,
    OutputFrame,
    blank,
)
from .hookenv import ARTIFACTS_DIR_VAR, FRAMES_FD_VAR, INPUT_VAR, base_environment
from .hooks import STDERR_TAIL_BYTES
from .spawn import RUNNER_FLAGS, ChildSpec, Outcome, Spawner, runner_path

FRAMES_FD: Final = 3
#: Longest line kept whole; a longer one is cut into pieces of this size.
MAX_LINE: Final = 64 * 1024
#: Output frames one run may produce, in bytes; the rest is dropped and counted.
MAX_RUN_OUTPUT: Final = 16 * 1024 * 1024
#: stdout kept for an argv script's "stdout parsed as JSON" result.
MAX_RESULT_STDOUT: Final = 1024 * 1024
#: Artifacts reported at the most, per run.
MAX_ARTIFACTS: Final = 1000


@attrs.frozen
class Script:
    """What to run: exactly one of `argv`, `python_file`, `python_code`."""

    argv: tuple[str, ...] | None = None
    python_file: str | None = None
    python_code: str | None = None

    @property
    def shown_argv(self) -> tuple[str, ...]:
        """The argv as the `start` frame shows it."""
        if self.argv is not None:
            return self.argv
        if self.python_file is not None:
            return ("python", self.python_file)
        return ("python", "-c", self.python_code or "")


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
    dropped_bytes: int = 0

    @property
    def succeeded(self) -> bool:
        p = self.process
        return not self.timed_out and p.exited and p.exit_code == 0 and p.signal is None

    def result_value(self, python: bool) -> Any:
        """The script's result: the last `result` line; for argv scripts, else stdout as
        JSON; else None."""
        if self.result_line is not None:
            return self.result_line[0]
        if python:
            return None
        try:
            return json.loads(self.stdout) if self.stdout.strip() else None
        except (ValueError, UnicodeDecodeError):
            return None


class _Output:
    """Counts output frames against the run's cap and hands them on."""

    def __init__(self, emit: Callable[[Frame], object], outcome: ScriptOutcome) -> None:
        self.emit = emit
        self.outcome = outcome
        self.used = 0

    def send(self, frame: Frame, size: int) -> None:
        if self.used + size > MAX_RUN_OUTPUT:
            self.outcome.dropped_bytes += size
            return
        self.used += size
        self.emit(frame)


#: Lines handed on from one read before yielding to the scheduler: a 64 KiB read can hold
#: thousands of short lines, and their frames should reach readers while later ones are cut.
_LINES_PER_YIELD: Final = 256


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    """Lines (newline removed) of at most `MAX_LINE` bytes; the last one may lack a newline."""
    buf = bytearray()
    while chunk := await stream.receive_some(65536):
        buf.extend(chunk)
        given = 0
        while True:
            given += 1
            if given % _LINES_PER_YIELD == 0:
                await trio.lowlevel.checkpoint()
            cut = buf.find(b"\n")
            if cut < 0 and len(buf) < MAX_LINE:
                break
            end = cut if 0 <= cut < MAX_LINE else MAX_LINE
            yield bytes(buf[:end])
            del buf[: end + 1 if end == cut else end]
    if buf:
        yield bytes(buf)


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
    emit: Callable[[Frame], object],
) -> None:
    """Runs the script to its end, emitting its output frames as they come; fills `outcome`.

    The caller owns the timeout: cancelling kills the tree (SIGTERM, `kill_grace`, SIGKILL),
    and `outcome` still holds what was seen until then.
    """
    out = _Output(emit, outcome)
    async with spawner.open_child(spec, kill_grace=kill_grace, extra_fds=(FRAMES_FD,)) as child:
        outcome.process = child.outcome
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child._write_stdin, stdin)
            nursery.start_soon(_pump_stdout, child.stdout, out)
            nursery.start_soon(_pump_stderr, child.stderr, out)
            nursery.start_soon(_pump_frames, child.extra[0], out)
            await child.wait()


async def _pump_stdout(stream: trio.abc.ReceiveStream, out: _Output) -> None:
    kept = out.outcome.stdout
    async for line in _lines(stream):
        if len(kept) < MAX_RESULT_STDOUT:
            kept.extend(line[: MAX_RESULT_STDOUT - len(kept)] + b"\n")
        text = line.decode(errors="replace")
        out.send(blank(OutputFrame, text=text, type=FrameType.STDOUT), len(line))


async def _pump_stderr(stream: trio.abc.ReceiveStream, out: _Output) -> None:
    tail = out.outcome.process.stderr_tail
    async for line in _lines(stream):
        tail.extend(line + b"\n")
        if len(tail) > STDERR_TAIL_BYTES:
            del tail[: len(tail) - STDERR_TAIL_BYTES]
        text = line.decode(errors="replace")
        out.send(blank(OutputFrame, text=text, type=FrameType.STDERR), len(line))


async def _pump_frames(stream: trio.abc.ReceiveStream, out: _Output) -> None:
    """The frames channel: JSON lines `log`, `emit`, `result` (and the launcher's
    `exception`). A line that is not one of them becomes a warning `log` frame."""
    async for line in _lines(stream):
        try:
            msg = json.loads(line)
            kind = msg.get("type") if isinstance(msg, dict) else None
        except ValueError:
            msg, kind = None, None
        if kind == "result" and isinstance(msg, dict):
            out.outcome.result_line = (msg.get("value"),)
        elif kind == "exception" and isinstance(msg, dict):
            out.outcome.exception = f"{msg.get('exceptionType')}: {msg.get('message')}"
        elif kind == "emit" and isinstance(msg, dict):
            out.send(blank(EmitFrame, value=msg.get("value")), len(line))
        elif kind == "log" and isinstance(msg, dict):
            attrs_ = msg.get("attrs")
            out.send(
                blank(
                    LogFrame,
                    level=str(msg.get("level", "info")),
                    message=str(msg.get("message", "")),
                    attributes=attrs_ if isinstance(attrs_, dict) else {},
                ),
                len(line),
            )
        else:
            text = line[:200].decode(errors="replace")
            out.send(
                blank(LogFrame, level="warning", message=f"frames channel: not a frame: {text}"),
                len(line),
            )


def artifact_frames(directory: str) -> list[ArtifactFrame]:
    """An `artifact` frame for each regular file under `directory` (sorted, bounded).

    Blocking file I/O: call it through `trio.to_thread.run_sync`.
    """
    root = Path(directory)
    frames: list[ArtifactFrame] = []
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for index, path in enumerate(files[:MAX_ARTIFACTS]):
        digest = hashlib.sha256()
        size = 0
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        name = str(path.relative_to(root))
        frames.append(
            blank(
                ArtifactFrame,
                id=f"a{index}",
                name=name,
                mime=mimetypes.guess_type(name)[0] or "application/octet-stream",
                size=size,
                sha256=digest.hexdigest(),
            )
        )
    return frames
