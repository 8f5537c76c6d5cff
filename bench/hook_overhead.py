"""A `run` hook of /bin/true, as a ratio to a bare `posix_spawn` + `waitpid` of /bin/true.

    .venv/bin/python bench/hook_overhead.py [--rounds 10] [--per-round 40]

The whole per-hook path: `run_hook` (clamp, scratch directory, environment, JSON input on
stdin, spawn, output read and parsed, hook frame), profile `none`, against the bare spawn in
the same process, interleaved in rounds; medians over every sample. Goal: ratio <= 1.3
(issues 2 and 6).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import trio
from _timing import TRUE, interleaved, medians, report

from mcpx_hooks.supervisor.frames import HookStatus
from mcpx_hooks.supervisor.hookrun import HookContext, run_hook
from mcpx_hooks.supervisor.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.points import Phase
from mcpx_hooks.supervisor.spawn import Spawner, open_spawner

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


async def hook(spawner: Spawner) -> float:
    start = time.perf_counter()
    report = await run_hook(spawner, HOOK, CTX)
    elapsed = time.perf_counter() - start
    assert report.frame.status is HookStatus.OK, report.frame
    return elapsed


async def main(rounds: int, per_round: int) -> None:
    async with open_spawner() as spawner:
        await hook(spawner)
        samples = await interleaved({"hook": functools.partial(hook, spawner)}, rounds, per_round)
    figures = medians(samples)
    print(f"{len(samples['hook'])} hooks (spawner mode {spawner.mode}), medians:")
    print(f"  baseline  posix_spawn+waitpid {TRUE}: {figures['bare'] * 1e3:7.3f} ms")
    label = f"run hook of {TRUE}, profile none"
    print(report("run_hook_none", label, figures["hook"], figures["bare"], GOAL))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=40)
    args = parser.parse_args(sys.argv[1:])
    trio.run(main, args.rounds, args.per_round)
