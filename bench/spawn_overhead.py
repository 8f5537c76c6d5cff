"""Per-spawn cost of the spawn path, as a ratio to a bare `posix_spawn` + `waitpid`.

    .venv/bin/python bench/spawn_overhead.py [--rounds 30] [--per-round 40] [--modes pidns,keeper]

One `run`-style child of /bin/true through the spawn path (`open_child` + `communicate` with
empty stdin, block left, tree reaped) against `os.posix_spawn` + `os.waitpid` of /bin/true in
the same process. The measurements are interleaved in rounds (each round times every mode and
the baseline, in a rotating order) so that the machine's noise falls on all of them alike;
the figures are medians over every single spawn. Goal: ratio <= 1.3. Takes well under 60 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Sequence

import trio

from mcpx_hooks.supervisor.spawn import (
    SPAWN_MODE_ENV,
    SPAWN_MODES,
    ChildSpec,
    Spawner,
    open_spawner,
)

TRUE = "/bin/true"
GOAL = 1.3
SPEC = ChildSpec((TRUE,), "/", {})


def bare_spawn() -> float:
    start = time.perf_counter()
    pid = os.posix_spawn(TRUE, [TRUE], {})
    os.waitpid(pid, 0)
    return time.perf_counter() - start


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
        names = [*modes, "bare"]
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds + 1):  # round 0 warms up and is dropped
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                got: list[float] = []
                for _ in range(per_round):
                    if name == "bare":
                        got.append(bare_spawn())
                    else:
                        got.append(await path_spawn(spawners[name]))
                if r:
                    samples[name].extend(got)
        return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--modes", default=",".join(m for m in SPAWN_MODES if _possible(m)))
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    started = time.perf_counter()
    samples = trio.run(measure, modes, args.rounds, args.per_round)
    bare = statistics.median(samples["bare"])
    results: list[str] = []  # for bench/run_all.py: value and baseline in ms
    print(f"{len(samples['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    print(f"  baseline  posix_spawn+waitpid {TRUE}: {bare * 1e3:7.3f} ms")
    for mode in modes:
        figure = statistics.median(samples[mode])
        verdict = "meets" if figure / bare <= GOAL else "misses"
        print(
            f"  {mode:8}  open_child+communicate:      {figure * 1e3:7.3f} ms"
            f"  ratio {figure / bare:5.2f}x  ({verdict} the goal <= {GOAL}x)"
        )
        results.append(
            f"RESULT spawn_{mode} {figure * 1e3:.3f} {bare * 1e3:.3f} {figure / bare:.3f} {GOAL}"
        )
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))


def _possible(mode: str) -> bool:
    return mode != "pidns" or os.geteuid() == 0


if __name__ == "__main__":
    main()
