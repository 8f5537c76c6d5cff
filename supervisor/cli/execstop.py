"""`exec`'s Ctrl-C, in process: the first cancels the run (its suffix hooks and `end` still
come, printed; stderr names each suffix hook as it starts then, and how long it may take,
so that a job its runner cancelled with SIGTERM says what it still waits for); the second
stops printing and says what the command still waits for (the suffix hooks running, each
until its own timeout) and how to stop waiting; a third kills them now (their trees, as a
timeout would), and the run still ends with its `end` frame in the history.

A suffix hook that ignores SIGTERM and sleeps would otherwise hold a silent terminal for up
to its `timeoutMs` after the second Ctrl-C, with no word of why.

`exec --remote` (`RemoteStopping`) comes as close as the wire allows: the first Ctrl-C sends
`cancel`; the second stops printing and says what the server's run still runs (the hooks
started and not finished, from its events, when the readable view follows them); a third
leaves at once, since the wire has no way to cut a cancelled run's suffix hooks short: the
server runs each to its end or its timeout, and its `end` is in the server's history.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from ..core.events import Event, EventKind
from ..core.points import Phase
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
        #: Whether the first Ctrl-C (or SIGTERM) came.
        self.cancelling = False

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
            if self.cancelling and data.get("phase") == Phase.SUFFIX:
                (waits,) = self._waits([name])
                self.say(printable(f"mcpx-hooks exec: cancelling; {waits} runs first"))
        elif kind in (EventKind.HOOK_FINISHED, EventKind.HOOK_FAILED):
            self.running.pop(name, None)

    def first(self, _: signal.Signals) -> None:
        self.cancelling = True
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

    def _waits(self, names: Iterable[str] | None = None) -> list[str]:
        """Each running hook (of `names`) in words: its name, point, time it may still take."""
        now = time.monotonic()
        said = []
        for name in self.running if names is None else names:
            where, started = self.running[name]
            hook = self.config.find(name)
            left = "" if hook is None else _seconds(hook.timeout_ms / 1000 - (now - started))
            said.append(f"hook {name} ({where}{left})")
        return said


def _seconds(left: float) -> str:
    return f", at most {max(left, 0.0):.0f} s more" if left >= 0.5 else ", about to be killed"


class RemoteStopping:
    """`exec --remote`'s second and third Ctrl-C (`service.remote.exec_remote`'s `on_stop`):
    what to say. `running` is filled from the server's events by the readable view (`saw`);
    without them (`--json`, or a server that will not give its events) it is None."""

    def __init__(self, say: Callable[[str], object]) -> None:
        self.say = say
        self.running: dict[str, str] | None = None
        self.run_id = ""
        self.url = ""
        #: Set by the second Ctrl-C: nothing more of the run is printed; by the third: left.
        self.stopped = self.left = False

    def following(self) -> None:
        """The server's events are followed: `running` is known from now."""
        self.running = {}

    def saw(self, kind: str, data: Any) -> None:
        if self.running is None:
            return
        name = str(data.get("name"))
        if kind == EventKind.HOOK_STARTED:
            self.running[name] = f"{data.get('on')}.{data.get('phase')}"
        elif kind in (EventKind.HOOK_FINISHED, EventKind.HOOK_FAILED):
            self.running.pop(name, None)

    def __call__(self, count: int) -> None:
        self.stopped = True
        waits = self._waits()
        if count == 2 and waits is None:
            self.say(
                "mcpx-hooks exec: stopping; waiting for the run's end on the server (its suffix"
                " hooks run there, each until its timeoutMs); Ctrl-C again to leave now"
            )
        elif count == 2 and waits:
            them = "them" if len(waits) > 1 else "it"
            killed = "each killed at its timeoutMs" if len(waits) > 1 else "killed at its timeoutMs"
            self.say(
                printable(
                    f"mcpx-hooks exec: stopping; the server still runs {', '.join(waits)},"
                    f" {killed}; Ctrl-C again to leave now (the server runs {them} to the end"
                    " all the same)"
                )
            )
        elif count > 2:
            self.left = True
            their = "their" if waits and len(waits) > 1 else "its"
            running = f"{', '.join(waits)} to {their} end" if waits else "the rest of the run"
            where = (
                f": mcpx-hooks runs show {self.run_id} --remote {self.url}" if self.run_id else ""
            )
            self.say(
                printable(
                    f"mcpx-hooks exec: leaving; the server runs {running} all the same (the"
                    f" run's end is in its history{where})"
                )
            )

    def _waits(self) -> list[str] | None:
        if self.running is None:
            return None
        return [f"hook {name} ({where})" for name, where in self.running.items()]
