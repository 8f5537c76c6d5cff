"""A `run` hook of /bin/true, as a ratio to a bare `posix_spawn` + `waitpid` of /bin/true.

    .venv/bin/python bench/hook_overhead.py [--rounds 10] [--per-round 40]

The whole per-hook path: `run_hook` (clamp, scratch directory, environment, JSON input on
stdin, spawn, output read and parsed, hook frame), profile `none`, against the bare spawn in
the same process, interleaved in rounds; medians over every sample. Goal: ratio <= 1.8 (issue
27; it was 1.3 from issues 2 and 6, which the measured critical path in docs/internals/bench.md
shows below this design's floor: a bare spawn, two more wake-ups of a sleeping process, and the
supervisor's and the spawner's own steps on the way). Printed beside it, for context, from the
same rounds: the peer a user would write instead, `trio.run_process` of /bin/true, and the hook
as a ratio to it.

Then, for context, where a hook's time goes (`--breakdown N` more hooks, one after another):
CPU per hook of the supervisor (this process), of the spawner, and of the hooks themselves
(the spawner's reaped children), from the kernel's accounting; and the round trip of one
byte between two processes that were idle (what each hop between processes costs here, on
top of the work: the spawner is one hop away, and back).

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2 --breakdown
5`.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time

import psutil
import trio
from _quick import parse_args
from _timing import TRUE, interleaved, medians, percentile, report

from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook

GOAL = 1.8
HOOK = Hook(
    name="true",
    on="script",
    phase=Phase.BEFORE,
    action=Action.RUN,
    target=(TRUE,),
    declaring_dir="/",
    source=Provenance(SourceKind.COMMAND_LINE),
    sandbox=Profile.NONE,
)
CTX = HookContext(run=None)


async def hook(spawner: Spawner) -> float:
    start = time.perf_counter()
    report = await run_hook(spawner, HOOK, CTX)
    elapsed = time.perf_counter() - start
    assert report.frame.status is HookStatus.OK, report.frame
    return elapsed


async def breakdown(spawner: Spawner, count: int) -> None:
    """CPU per hook of the supervisor, the spawner and the hooks, over `count` hooks."""
    them = psutil.Process(spawner.pid)
    mine, theirs = os.times(), them.cpu_times()
    for _ in range(count):
        await hook(spawner)
    mine_after, theirs_after = os.times(), them.cpu_times()
    per = 1e3 / count
    supervisor = (mine_after.user + mine_after.system - mine.user - mine.system) * per
    spawner_cpu = (theirs_after.user + theirs_after.system - theirs.user - theirs.system) * per
    hooks = (
        theirs_after.children_user
        + theirs_after.children_system
        - theirs.children_user
        - theirs.children_system
    ) * per
    print(f"  where a hook's time goes ({count} hooks), CPU per hook:")
    print(f"    supervisor {supervisor:.3f} ms, spawner {spawner_cpu:.3f} ms, hook {hooks:.3f} ms")


async def run_process() -> float:
    """The peer a user would write instead: `trio.run_process` of /bin/true."""
    start = time.perf_counter()
    await trio.run_process((TRUE,))
    return time.perf_counter() - start


#: Echoes each byte back: the other end of `idle_round_trip`.
_ECHO = "import os\nwhile b := os.read(0, 1):\n    os.write(1, b)\n"


def idle_round_trip(count: int = 200) -> tuple[float, float]:
    """Median and 90th percentile of the time for one byte to go to another process and
    back, each side having been idle (1 ms pause between trips): two wake-ups of a process
    that was asleep (on a VM, of a virtual CPU that may have been halted)."""
    echo = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert echo.stdin is not None and echo.stdout is not None
    trips = []
    try:
        for _ in range(count):
            time.sleep(0.001)
            start = time.perf_counter()
            os.write(echo.stdin.fileno(), b"x")
            os.read(echo.stdout.fileno(), 1)
            trips.append(time.perf_counter() - start)
    finally:
        echo.stdin.close()
        echo.wait()
        echo.stdout.close()
    return statistics.median(trips), percentile(trips, 90)


async def main(rounds: int, per_round: int, count: int) -> None:
    async with open_spawner() as spawner:
        await hook(spawner)
        samplers = {"hook": functools.partial(hook, spawner), "run_process": run_process}
        samples = await interleaved(samplers, rounds, per_round)
        if count:
            await breakdown(spawner, count)
    if count:
        p50, p90 = idle_round_trip()
        print(
            "    one round trip between two idle processes: "
            f"p50 {p50 * 1e3:.3f} ms, p90 {p90 * 1e3:.3f} ms"
        )
    figures = medians(samples)
    print(f"{len(samples['hook'])} hooks (spawner mode {spawner.mode}), medians:")
    print(f"  baseline  posix_spawn+waitpid {TRUE}: {figures['bare'] * 1e3:7.3f} ms")
    peer = figures["run_process"]
    print(
        f"  peer      trio.run_process({TRUE}):   {peer * 1e3:7.3f} ms  ratio"
        f" {peer / figures['bare']:5.2f}x  (context: the hook is {figures['hook'] / peer:.2f}x it)"
    )
    label = f"run hook of {TRUE}, profile none"
    print(report("run_hook_none", label, figures["hook"], figures["bare"], GOAL))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--breakdown", type=int, default=300, help="hooks for the CPU figures")
    args = parse_args(parser, rounds=1, per_round=2, breakdown=5)
    trio.run(main, args.rounds, args.per_round, args.breakdown)
