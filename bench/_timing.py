"""What every benchmark here shares: the bare-spawn baseline, interleaved rounds, the report.

Not a benchmark itself (`run_all.py` skips files starting with `_`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping

TRUE = "/bin/true"

#: A sampler times one operation and returns seconds.
Sampler = Callable[[], Awaitable[float]]


def bare_spawn() -> float:
    """The baseline: `posix_spawn` + `waitpid` of /bin/true, in this process."""
    start = time.perf_counter()
    pid = os.posix_spawn(TRUE, [TRUE], {})
    os.waitpid(pid, 0)
    return time.perf_counter() - start


async def _bare() -> float:
    return bare_spawn()


async def interleaved(
    samplers: Mapping[str, Sampler], rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Samples of each sampler and of `"bare"`, taken in rounds that rotate their order so
    the machine's noise falls on all alike. Round 0 warms up and is dropped."""
    every: dict[str, Sampler] = {**samplers, "bare": _bare}
    names = list(every)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            got = [await every[name]() for _ in range(per_round)]
            if r:
                samples[name].extend(got)
    return samples


def report(figure: str, label: str, value_s: float, base_s: float, goal: float) -> str:
    """Prints one figure against the baseline; returns its `RESULT` line for run_all.py."""
    ratio = value_s / base_s
    verdict = "meets" if ratio <= goal else "misses"
    print(
        f"  {label}: {value_s * 1e3:7.3f} ms  ratio {ratio:5.2f}x  ({verdict} the goal <= {goal}x)"
    )
    return f"RESULT {figure} {value_s * 1e3:.3f} {base_s * 1e3:.3f} {ratio:.3f} {goal}"


def medians(samples: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items()}
