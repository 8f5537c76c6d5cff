"""`exec`'s live output: frames printed as they come, a closed pipe taken quietly, a line for
a hook still running after a second, and on stderr the observe hooks that failed or were cut
short.

A closed stdout (`exec … | head -1`) is not an error a person should read: the rest of the
output goes nowhere, the caller is told once (`on_closed`, which cancels the run), and the
command exits as its run ended.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson
import trio

from ..core.errors import HooksError
from ..core.events import Event, EventKind
from ..core.frames import STREAM_ENDS, STREAM_TYPES
from ..core.jsontext import dumps, wire_loads
from ..run.bus import Bus
from ..run.observerstats import ObserverStats
from .printable import cut_line, printable
from .runview import RunView
from .view import frame_lines

if TYPE_CHECKING:
    pass

#: After how long a hook still running gets a line of its own in the readable view.
STILL_RUNNING_S: Final = 1.0
#: What a pipe on `exec --json`'s stdout is asked to hold (`widen_pipe`).
PIPE_BYTES: Final = 1024 * 1024
#: How the journal's line of a script's output frame ends, its text just before
#: (`RunJournal.offer_output` writes them so, in orjson's key order), with what the readable
#: view puts before that text (its own rendering of such a frame with no text).
OUTPUT_ENDS: Final = {
    end: frame_lines({"type": kind, "text": ""})[0] for kind, end in STREAM_ENDS.items()
}
_END_SIZES: Final = sorted({len(end) for end in OUTPUT_ENDS})
_TEXT_KEY: Final = b',"text":'
#: The same marks by frame type, for frames already decoded.
_MARKS: Final = {str(kind): frame_lines({"type": kind, "text": ""})[0] for kind in STREAM_TYPES}


def _output_line(line: bytes) -> str | None:
    """What the readable view shows of a journal line that is a script's output frame, read
    from the line alone; None for any other line (and for one whose text cannot be read so,
    which is then decoded whole)."""
    for size in _END_SIZES:
        if (mark := OUTPUT_ENDS.get(line[-size:])) is not None:
            try:
                said = orjson.loads(line[line.index(_TEXT_KEY) + len(_TEXT_KEY) : -size])
            except (ValueError, orjson.JSONDecodeError):
                return None
            return mark + said if isinstance(said, str) else None
    return None


class Output:
    """Lines to stdout, flushed each; a closed pipe stops them quietly.

    On the first `BrokenPipeError`, stdout is pointed at /dev/null (so that Python's own
    flush at exit has nowhere to fail) and `on_closed` is called once.
    """

    def __init__(self, on_closed: Callable[[], object] = lambda: None) -> None:
        self.closed = False
        self._on_closed = on_closed
        self._widened = False
        #: The lines for a person that `frame(flush=False)` holds until `flush`.
        self._lines: list[str] = []
        #: What the run's earlier frames tell about its later ones (`runview.py`).
        self.view = RunView()

    def line(self, text: str) -> None:
        """`text` printed and flushed, after what `frame` holds."""
        if self.closed:
            return
        if self._lines:
            text = "\n".join([*self._lines, text])
            self._lines.clear()
        try:
            print(text, flush=True)
        except BrokenPipeError:
            self._close()

    def encoded(self, lines: list[bytes]) -> None:
        """Lines of UTF-8 (frames as the journal keeps them), written and flushed at once."""
        if self.closed or not lines:
            return
        self._write(b"\n".join(lines) + b"\n")
        self.flush()

    def _close(self) -> None:
        self.closed = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        self._on_closed()

    def readable(
        self, batch: list[bytes], see: Callable[[Mapping[str, Any]], object] | None = None
    ) -> None:
        """A batch of the journal's lines for a person, printed at once; `see` is given every
        frame but the script's output. An output frame's text is read from its line alone:
        nothing else of it is shown, and it is most of what a run prints."""
        shown: list[str] = []
        for line in batch:
            if (text := _output_line(line)) is not None:
                shown.append(text)
                continue
            frame = wire_loads(line)
            if see is not None:
                see(frame)
            shown.extend(self.view.lines(frame))
        if shown:
            self.line("\n".join(shown))

    def frame(self, frame: Mapping[str, Any], as_json: bool, *, flush: bool = True) -> None:
        """One frame: a JSON line (as the journal writes it), or its lines for a person;
        `flush=False` leaves it to `flush`, to print a batch at once."""
        if self.closed:
            return
        if as_json:
            self._write(dumps(frame) + b"\n")
        elif (mark := _MARKS.get(str(frame.get("type")))) is not None:
            self._lines.append(mark + str(frame.get("text")))
        elif lines := self.view.lines(frame):
            self._lines.extend(lines)
        if flush:
            self.flush()

    def output(self, frames: list[dict[str, Any]], as_json: bool) -> None:
        """`frame(flush=False)` of each of `frames`, a script's output frames (with their
        text), at once."""
        if self.closed:
            return
        if as_json:
            self._write(b"".join([dumps(frame) + b"\n" for frame in frames]))
        else:
            self._lines.extend([_MARKS[frame["type"]] + frame["text"] for frame in frames])

    def flush(self) -> None:
        """What `frame(flush=False)` left, printed and flushed."""
        if self._lines:
            shown = "\n".join(self._lines)
            self._lines.clear()
            self.line(shown)
            return
        if self.closed:
            return
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            self._close()

    def _write(self, data: bytes) -> None:
        """`data` into stdout's buffer, as it is (the pipe widened first)."""
        if not self._widened:
            self._widened = True
            widen_pipe(sys.stdout)
        binary = getattr(sys.stdout, "buffer", None)  # none when stdout is made text only
        try:
            if binary is None:
                sys.stdout.write(data.decode())
            else:  # (text is printed with `line`, which flushes it at once)
                binary.write(data)
        except BrokenPipeError:
            self._close()


def widen_pipe(stream: object) -> None:
    """A pipe behind `stream` gets room for `PIPE_BYTES` (Linux; as much as an unprivileged
    process may ask): frames then reach their reader in fewer, larger writes, each waking it
    once. Anything else (a file, a terminal, a pipe that cannot grow) is left as it is."""
    import fcntl

    fileno = getattr(stream, "fileno", None)
    grow = getattr(fcntl, "F_SETPIPE_SZ", None)
    with contextlib.suppress(OSError, ValueError):  # (io.UnsupportedOperation is both)
        if fileno is not None and grow is not None and stat.S_ISFIFO(os.fstat(fileno()).st_mode):
            fcntl.fcntl(fileno(), grow, PIPE_BYTES)


class OutputClosed(HooksError):
    """stdout closed under a remote run: `exec` leaves (`raise_closed`), and the server,
    asked to cancel on disconnect, cancels the run."""


def raise_closed() -> None:
    raise OutputClosed


def still_running_line(data: Mapping[str, Any]) -> str:
    """What a person reads of a hook (its `hook.started` data) that has not finished after
    `STILL_RUNNING_S`."""
    where = f" ({data['on']}.{data['phase']})" if "on" in data and "phase" in data else ""
    hook = printable(f"hook {data.get('name')}{where}")
    return f"{hook}: still running after {STILL_RUNNING_S:g} s..."


async def serve_still_running(
    bus: Bus,
    run_id: str,
    say: Callable[[str], object],
    *,
    asking: Callable[[str], bool] = lambda _: False,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Until cancelled: for each hook of run `run_id` that starts and has not finished
    `STILL_RUNNING_S` later, `say` a line naming it (once), unless `asking` says the run
    awaits the answer to its ask (its process has ended). Started once subscribed."""

    async def own() -> AsyncIterator[tuple[str, Mapping[str, Any]]]:
        async for event in sub:
            # An observe hook's events: it holds nothing up; `exec` reports it at the end.
            if isinstance(event, Event) and event.run_id == run_id and not event.caused_by_observer:
                yield event.kind, event.data

    async with bus.subscribe(kinds=("hook",)) as sub:
        task_status.started()
        await say_still_running(own(), say, asking)


async def say_still_running(
    events: AsyncIterator[tuple[str, Mapping[str, Any]]],
    say: Callable[[str], object],
    asking: Callable[[str], bool],
) -> None:
    async with trio.open_nursery() as nursery:
        waiting: dict[str, trio.CancelScope] = {}
        async for kind, data in events:
            name = str(data.get("name"))
            if kind == EventKind.HOOK_STARTED:
                waiting[name] = await nursery.start(_say_later, data, say, asking)
            elif kind == EventKind.HOOK_FINISHED and name in waiting:
                waiting.pop(name).cancel()


async def _say_later(
    data: Mapping[str, Any],
    say: Callable[[str], object],
    asking: Callable[[str], bool],
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.CancelScope() as scope:
        task_status.started(scope)
        await trio.sleep(STILL_RUNNING_S)
        if not asking(str(data.get("name"))):  # its process ended; the run awaits an answer
            say(still_running_line(data))


def observer_lines(stats: ObserverStats, drain_ms: int) -> list[str]:
    """What `exec` says on stderr of its observe hooks once it ends: each that failed, each
    cut short by `[observe] drainMs`, and what was left unread."""
    lines = [
        printable(f"mcpx-hooks exec: observe hook {u.name} (on {u.kind}) failed [{u.status}]: ")
        + _reason(u.reason)
        for u in stats.failed
    ]
    lines.extend(
        printable(f"mcpx-hooks exec: observe hook {u.name} (on {u.kind}) was cut short: ")
        + _reason(u.reason)
        + f" when [observe] drainMs ({drain_ms} ms) passed after the run's end; it was killed"
        for u in stats.cut_short
    )
    named = len(stats.failed) + len(stats.cut_short)
    if stats.unwell > named:
        lines.append(f"mcpx-hooks exec: and {stats.unwell - named} more observe hooks like these")
    if stats.unread:
        lines.append(
            f"mcpx-hooks exec: {stats.unread} events were not yet observed when [observe]"
            f" drainMs ({drain_ms} ms) passed"
        )
    return lines


def _reason(reason: str) -> str:
    """An observe hook's reason on its one line of stderr: `printable`, cut at `LINE_CHARS`
    characters, with how many were left out (a run keeps no frame of an observe hook)."""
    shown, left = cut_line(reason)
    return f"{shown} ({left} more characters)" if left else shown
