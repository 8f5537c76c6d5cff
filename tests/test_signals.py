"""The one signal policy (`process/signals.py`), with real signals sent to this process: the
first asks, the second stops, and the previous handlers are back afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from mcpx_hooks.supervisor.process.signals import STOP_SIGNALS, serve_stop_signals

#: Only a guard against a policy that never stops: every wait below ends on a signal.
GUARD_S = 10


@pytest.fixture(autouse=True)
def handlers_restored() -> Iterator[None]:
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def send(signum: signal.Signals) -> None:
    # Once `nursery.start` has returned the signal is taken: never this process's death.
    assert signal.getsignal(signum) is not signal.SIG_DFL
    os.kill(os.getpid(), signum)


@pytest.mark.parametrize("first", STOP_SIGNALS)
async def test_the_first_signal_asks_and_the_second_stops(first: signal.Signals) -> None:
    second = next(s for s in STOP_SIGNALS if s is not first)
    asked: list[signal.Signals] = []
    stopping: list[signal.Signals] = []
    heard = trio.Event()

    def ask(signum: signal.Signals) -> None:
        asked.append(signum)
        heard.set()

    with trio.fail_after(GUARD_S), trio.CancelScope() as stop:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_stop_signals, stop, ask, stopping.append)
            send(first)
            await heard.wait()
            assert (asked, stopping, stop.cancel_called) == ([first], [], False)
            send(second)
            await trio.sleep_forever()
    assert stop.cancelled_caught
    assert (asked, stopping) == ([first], [second])


async def test_without_a_graceful_end_the_first_signal_stops() -> None:
    with trio.fail_after(GUARD_S), trio.CancelScope() as stop:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_stop_signals, stop)
            send(signal.SIGINT)
            await trio.sleep_forever()
    assert stop.cancelled_caught


async def test_it_returns_after_stopping_a_scope_outside_it() -> None:
    """The scope to stop need not hold the watcher: it returns, and its nursery can close."""
    asked: list[signal.Signals] = []
    heard = trio.Event()

    def ask(signum: signal.Signals) -> None:
        asked.append(signum)
        heard.set()

    with trio.fail_after(GUARD_S):
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as stop:
                await nursery.start(serve_stop_signals, stop, ask)
                send(signal.SIGTERM)
                await heard.wait()  # one signal read before the next: trio coalesces them
                send(signal.SIGTERM)
                await trio.sleep_forever()
    assert stop.cancelled_caught and asked == [signal.SIGTERM]


async def test_cancelled_before_any_signal_it_gives_them_back() -> None:
    calls: list[signal.Signals] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_stop_signals, nursery.cancel_scope, calls.append, calls.append)
        nursery.cancel_scope.cancel()
    assert calls == []
    # and the autouse fixture finds the previous handlers back


async def test_with_on_more_it_goes_on_hearing_past_the_second() -> None:
    """`exec`'s third Ctrl-C: the watcher, outside the scope it stops, hears what follows."""
    calls: list[str] = []
    heard = trio.Semaphore(0)

    def noted(what: str) -> Callable[[signal.Signals], None]:
        def note(_: signal.Signals) -> None:
            calls.append(what)
            heard.release()

        return note

    with trio.fail_after(GUARD_S):
        async with trio.open_nursery() as nursery:
            stop = trio.CancelScope()
            start = partial(serve_stop_signals, on_more=noted("more"))
            await nursery.start(start, stop, noted("first"), noted("second"))
            for _ in range(4):
                send(signal.SIGINT)
                await heard.acquire()  # one read before the next: trio coalesces them
            assert stop.cancel_called
            nursery.cancel_scope.cancel()
    assert calls == ["first", "second", "more", "more"]


def test_sigterm_before_exec_runs_anything_exits_130_not_by_the_signal(tmp_path: Path) -> None:
    # A CI runner's SIGTERM in exec's first moments, before the run takes SIGTERM (here: while
    # it reads --files-from - on stdin, which it does before starting the run): 130, as
    # documented, and nothing run, rather than a death by the signal (143 to a shell).
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--files-from"]
    proc = subprocess.Popen(
        [*argv, "-", "--", "true"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    syscall = Path(f"/proc/{proc.pid}/syscall")
    for _ in range(3000):  # until its main thread waits in read(0, …): 30 s at most
        if syscall.read_text().startswith("0 0x0 "):
            break
        time.sleep(0.01)
    else:
        pytest.fail("exec never waited on its stdin")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert out == b""
