"""`exec`'s Ctrl-C, in process: the first cancels the run (its suffix hooks and `end` still
come, printed); the second stops printing and says what the command still waits for (the
suffix hooks running, each until its own timeout) and how to stop waiting; a third kills
them now (their trees, as a timeout would), and the run still ends with its `end` frame in
the history.

A suffix hook that ignores SIGTERM and sleeps would otherwise hold a silent terminal for up
to its `timeoutMs` after the second Ctrl-C, with no word of why.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from ..core.events import Event, EventKind
from ..process.signals import serve_stop_signals
from .printable import printable

if TYPE_CHECKING:
    from ..core.hooks import Config
    from ..run.bus import Bus
    from ..run.scriptrun import Run


class Stopping:
    """The hooks of one run that are running now (from the bus), and what each Ctrl-C does."""

    def __init__(self, run: Run, config: Config, say: Callable[[str], object]) -> None:
        self.run, self.config, self.say = run, config, say
        #: The run's hooks started and not finished: name → (its `on.phase`, when it started).
        self.running: dict[str, tuple[str, float]] = {}
        #: What the second Ctrl-C cancels: the run's printing (and with it the run).
        self.stop = trio.CancelScope()

    async def serve(self, bus: Bus, *, task_status: trio.TaskStatus[None]) -> None:
        """Follows the run's hook events and takes SIGINT and SIGTERM until cancelled; start
        it outside `stop`, which the second signal cancels (it goes on hearing a third)."""
        async with bus.subscribe(kinds=("hook",)) as sub, trio.open_nursery() as nursery:
            signals = partial(serve_stop_signals, on_more=self.more)
            await nursery.start(signals, self.stop, self.first, self.second)
            task_status.started()
            async for event in sub:
                if not isinstance(event, Event) or event.caused_by_observer:
                    continue  # (an observe hook's: `[observe] drainMs` bounds those)
                if event.run_id == self.run.request.run_id:
                    self._saw(event.kind, event.data)

    def _saw(self, kind: str, data: Any) -> None:
        name = str(data.get("name"))
        if kind == EventKind.HOOK_STARTED:
            where = f"{data.get('on')}.{data.get('phase')}"
            self.running[name] = (where, time.monotonic())
        elif kind in (EventKind.HOOK_FINISHED, EventKind.HOOK_FAILED):
            self.running.pop(name, None)

    def first(self, _: signal.Signals) -> None:
        self.run.cancel()

    def second(self, _: signal.Signals) -> None:
        if self.running:
            many = len(self.running) > 1
            waits, them = ", ".join(self._waits()), "them" if many else "it"
            killed = "each killed at its timeoutMs" if many else "killed at its timeoutMs"
            self.say(
                printable(
                    f"mcpx-hooks exec: stopping; still waiting for {waits}, {killed};"
                    f" Ctrl-C again to kill {them} now"
                )
            )

    def more(self, _: signal.Signals) -> None:
        names = ", ".join(self.running) or "nothing"
        self.say(printable(f"mcpx-hooks exec: killing {names} now"))
        self.run.ending_scope.cancel()

    def _waits(self) -> list[str]:
        now = time.monotonic()
        said = []
        for name, (where, started) in self.running.items():
            hook = self.config.find(name)
            left = "" if hook is None else _seconds(hook.timeout_ms / 1000 - (now - started))
            said.append(f"hook {name} ({where}{left})")
        return said


def _seconds(left: float) -> str:
    return f", at most {max(left, 0.0):.0f} s more" if left >= 0.5 else ", about to be killed"
