"""A `run` hook of /bin/true, as a ratio to a bare `posix_spawn` + `waitpid` of /bin/true.

    .venv/bin/python bench/hook_overhead.py [--rounds 10] [--per-round 40]

The whole per-hook path: `run_hook` (clamp, scratch directory, environment, JSON input on
stdin, spawn, output read and parsed, hook frame), profile `none`, against the bare spawn in
the same process, interleaved in rounds; medians over every sample. Goal: ratio <= 1.3
(issues 2 and 6).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import trio

from mcpx_hooks.supervisor.frames import HookStatus
from mcpx_hooks.supervisor.hookrun import HookContext, run_hook
from mcpx_hooks.supervisor.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.points import Phase
from mcpx_hooks.supervisor.spawn import Spawner, open_spawner

TRUE = "/bin/true"
GOAL = 1.3
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


def bare() -> float:
    start = time.perf_counter()
    pid = os.posix_spawn(TRUE, [TRUE], {})
    os.waitpid(pid, 0)
    return time.perf_counter() - start


async def hook(spawner: Spawner) -> float:
    start = time.perf_counter()
    report = await run_hook(spawner, HOOK, CTX)
    elapsed = time.perf_counter() - start
    assert report.frame.status is HookStatus.OK, report.frame
    return elapsed


async def main(rounds: int, per_round: int) -> None:
    ours: list[float] = []
    base: list[float] = []
    async with open_spawner() as spawner:
        await hook(spawner)
        for _ in range(rounds):
            for _ in range(per_round):
                ours.append(await hook(spawner))
            base.extend(bare() for _ in range(per_round))
    o, b = statistics.median(ours) * 1000, statistics.median(base) * 1000
    verdict = "meets" if o / b <= GOAL else "misses"
    print(f"{len(ours)} hooks (spawner mode {spawner.mode}), medians:")
    print(f"  baseline  posix_spawn+waitpid {TRUE}: {b:7.3f} ms")
    print(
        f"  run hook of {TRUE}, profile none:  {o:7.3f} ms  ratio {o / b:5.2f}x  "
        f"({verdict} the goal <= {GOAL}x)"
    )
    print(f"RESULT run_hook_none {o:.3f} {b:.3f} {o / b:.3f} {GOAL}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=40)
    args = parser.parse_args(sys.argv[1:])
    trio.run(main, args.rounds, args.per_round)
