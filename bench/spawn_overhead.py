"""Per-spawn cost of the spawn path, as a ratio to a bare `posix_spawn` + `waitpid`.

    .venv/bin/python bench/spawn_overhead.py [--rounds 30] [--per-round 40] [--modes pidns,keeper]

One `run`-style child of /bin/true through the spawn path (`open_child` + `communicate` with
empty stdin, block left, tree reaped) against `os.posix_spawn` + `os.waitpid` of /bin/true in
the same process. The measurements are interleaved in rounds (each round times every mode and
the baseline, in a rotating order) so that the machine's noise falls on all of them alike;
the figures are medians over every single spawn. Goal: ratio <= 1.3. Takes well under 60 s.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2`, every
mode.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import time
from collections.abc import Sequence

import trio
from _quick import parse_args
from _timing import TRUE, interleaved, medians, report

from mcpx_hooks.supervisor.process.spawner import (
    SPAWN_MODE_ENV,
    SPAWN_MODES,
    ChildSpec,
    Spawner,
    open_spawner,
)

GOAL = 1.3
SPEC = ChildSpec((TRUE,), "/", {})


async def path_spawn(spawner: Spawner) -> float:
    start = time.perf_counter()
    async with spawner.open_child(SPEC, kill_grace=0.5) as child:
        outcome = await child.communicate(b"", 1 << 16, 1 << 12)
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0, outcome
    return elapsed


async def measure(modes: Sequence[str], rounds: int, per_round: int) -> dict[str, list[float]]:
    spawners: dict[str, Spawner] = {}
    async with contextlib.AsyncExitStack() as stack:
        for mode in modes:
            os.environ[SPAWN_MODE_ENV] = mode
            spawners[mode] = await stack.enter_async_context(open_spawner())
        os.environ.pop(SPAWN_MODE_ENV)
        samplers = {
            mode: functools.partial(path_spawn, spawner) for mode, spawner in spawners.items()
        }
        return await interleaved(samplers, rounds, per_round)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--modes", default=",".join(m for m in SPAWN_MODES if _possible(m)))
    args = parse_args(parser, rounds=1, per_round=2)
    modes = [m for m in args.modes.split(",") if m]
    started = time.perf_counter()
    samples = trio.run(measure, modes, args.rounds, args.per_round)
    figures = medians(samples)
    bare = figures["bare"]
    print(f"{len(samples['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    print(f"  baseline  posix_spawn+waitpid {TRUE}: {bare * 1e3:7.3f} ms")
    results = [
        report(f"spawn_{mode}", f"{mode:8}  open_child+communicate", figures[mode], bare, GOAL)
        for mode in modes
    ]
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))


def _possible(mode: str) -> bool:
    return mode != "pidns" or os.geteuid() == 0


if __name__ == "__main__":
    main()
