"""The one signal policy of a command in the foreground: the first signal asks, the second stops.

`serve`, `exec` (in process and `--remote`) and `events` end on SIGINT (Ctrl-C) or SIGTERM
(`kill`'s default) the same way: the first asks for a graceful end (stop accepting, cancel the
run) and lets the cleanup it starts finish (suffix hooks, the `end` frame, reaping); a second
one cancels everything at once. A command that knows no graceful end (`events`) stops at the
first.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Final

import trio

#: The signals that end a command in the foreground.
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


async def serve_stop_signals(
    stop: trio.CancelScope,
    on_first: Callable[[signal.Signals], object] | None = None,
    on_second: Callable[[signal.Signals], object] | None = None,
    *,
    on_more: Callable[[signal.Signals], object] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Takes SIGINT and SIGTERM until cancelled; start it with `nursery.start`, which returns
    once they are taken, so from then on neither takes its default action (no
    KeyboardInterrupt, no death by SIGTERM).

    The first signal calls `on_first(signal)`, in this task: it must not block (start a task
    from it for anything that waits), so that a second signal is always heard. The second
    calls `on_second(signal)`, then cancels `stop` and returns; everything under `stop` ends
    at once but for shielded cleanup (a run's suffix hooks, a reap), which keeps its own
    bound. Without
    `on_first`, the first signal is the second: it cancels `stop`. The same signal arriving
    twice before this task reads it counts once (trio coalesces them).

    With `on_more`, it goes on after the second (the caller starts it outside `stop`): each
    signal past the second calls `on_more(signal)`, for what the cleanup can still be told
    (`exec`: kill the suffix hooks it waits for), until it is cancelled.

    Cancelled or returned, it gives the signals back to their previous handlers; one still
    pending then is redelivered to those (trio's rule), so a signal past the second, once
    this task has ended, takes its default action.
    """
    with trio.open_signal_receiver(*STOP_SIGNALS) as received:
        task_status.started()
        asked = stopped = False
        async for signum in received:
            which = signal.Signals(signum)
            if on_first is not None and not asked:
                asked = True
                on_first(which)
            elif stopped and on_more is not None:
                on_more(which)
            else:
                if on_second is not None:
                    on_second(which)
                stop.cancel()
                stopped = True
                if on_more is None:
                    return
