"""`exec`'s live output: frames printed as they come, a closed pipe taken quietly, a line for
a hook still running after a second, and on stderr the observe hooks that failed or were cut
short.

A closed stdout (`exec … | head -1`) is not an error a person should read: the rest of the
output goes nowhere, the caller is told once (`on_closed`, which cancels the run), and the
command exits as its run ended.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from ..core.events import Event, EventKind
from ..run.bus import Bus
from ..run.observe import ObserverStats
from .view import frame_lines

#: After how long a hook still running gets a line of its own in the readable view.
STILL_RUNNING_S: Final = 1.0


class Output:
    """Lines to stdout, flushed each; a closed pipe stops them quietly.

    On the first `BrokenPipeError`, stdout is pointed at /dev/null (so that Python's own
    flush at exit has nowhere to fail) and `on_closed` is called once.
    """

    def __init__(self, on_closed: Callable[[], object] = lambda: None) -> None:
        self.closed = False
        self._on_closed = on_closed

    def line(self, text: str) -> None:
        if self.closed:
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            self.closed = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            self._on_closed()

    def frame(self, frame: Mapping[str, Any], as_json: bool) -> None:
        """One frame: a JSON line, or its lines for a person (none for a type not known)."""
        if as_json:
            self.line(json.dumps(frame))
        elif lines := frame_lines(frame):
            self.line("\n".join(lines))


class OutputClosed(Exception):
    """stdout closed under a remote run: `exec` leaves (`raise_closed`), and the server,
    asked to cancel on disconnect, cancels the run."""


def raise_closed() -> None:
    raise OutputClosed


def still_running_line(event: Event) -> str:
    """What a person reads of a hook that has not finished after `STILL_RUNNING_S`."""
    where = f" ({event.data['on']}.{event.data['phase']})" if "phase" in event.data else ""
    return f"hook {event.data.get('name')}{where}: still running after {STILL_RUNNING_S:g} s..."


async def serve_still_running(
    bus: Bus,
    run_id: str,
    say: Callable[[str], object],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Until cancelled: for each hook of run `run_id` that starts and has not finished
    `STILL_RUNNING_S` later, `say` a line naming it (once). Started once subscribed."""
    async with bus.subscribe(kinds=("hook",)) as sub, trio.open_nursery() as nursery:
        task_status.started()
        waiting: dict[str, trio.CancelScope] = {}
        async for event in sub:
            if not isinstance(event, Event) or event.run_id != run_id:
                continue
            if event.caused_by_observer:
                continue  # an observe hook's: it holds nothing up, `exec` reports it at the end
            name = str(event.data.get("name"))
            if event.kind == EventKind.HOOK_STARTED:
                waiting[name] = await nursery.start(_say_later, event, say)
            elif event.kind == EventKind.HOOK_FINISHED and name in waiting:
                waiting.pop(name).cancel()


async def _say_later(
    event: Event,
    say: Callable[[str], object],
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.CancelScope() as scope:
        task_status.started(scope)
        await trio.sleep(STILL_RUNNING_S)
        say(still_running_line(event))


def observer_lines(stats: ObserverStats, drain_ms: int) -> list[str]:
    """What `exec` says on stderr of its observe hooks once it ends: each that failed, each
    cut short by `[observe] drainMs`, and what was left unread."""
    lines = [
        f"mcpx-hooks exec: observe hook {u.name} (on {u.kind}) failed [{u.status}]: {u.reason}"
        for u in stats.failed
    ]
    lines.extend(
        f"mcpx-hooks exec: observe hook {u.name} (on {u.kind}) was cut short: {u.reason} when"
        f" [observe] drainMs ({drain_ms} ms) passed after the run's end; it was killed"
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
