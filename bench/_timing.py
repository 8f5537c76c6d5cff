"""What every benchmark here shares: the bare-spawn baseline, interleaved rounds, the report.

Not a benchmark itself (`run_all.py` skips files starting with `_`).
"""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path

from mcpx_hooks.supervisor.core.errors import SandboxUnavailable
from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.process.spawner import Spawner

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


def report(
    figure: str, label: str, value_s: float, base_s: float, goal: float, *, unit: str = ""
) -> str:
    """Prints one figure against the baseline; returns its `RESULT` line for run_all.py
    (values in ms; `unit`, when given, is written on the line for the table)."""
    ratio = value_s / base_s
    verdict = "meets" if ratio <= goal else "misses"
    print(
        f"  {label}: {value_s * 1e3:7.3f} ms  ratio {ratio:5.2f}x  ({verdict} the goal <= {goal}x)"
    )
    line = f"RESULT {figure} {value_s * 1e3:.3f} {base_s * 1e3:.3f} {ratio:.3f} {goal}"
    return f"{line} le {unit}" if unit else line


def medians(samples: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items()}


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) of `values`, nearest rank: a sample that was measured."""
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def result(
    figure: str,
    value: float,
    baseline: float,
    ratio: float,
    goal: float,
    *,
    direction: str = "le",
    unit: str = "",
) -> str:
    """A `RESULT` line for run_all.py (see its docstring for the fields and directions)."""
    line = f"RESULT {figure} {value:.3f} {baseline:.3f} {ratio:.3f} {goal:g} {direction}"
    return f"{line} {unit}" if unit else line


def enforceable(
    profiles: Iterable[Profile], spawner: Spawner
) -> tuple[list[Profile], dict[Profile, str]]:
    """The profiles this machine can enforce, and why each other one cannot be."""
    runnable: list[Profile] = []
    skipped: dict[Profile, str] = {}
    for profile in profiles:
        try:
            sandbox.require(profile, spawner)
        except SandboxUnavailable as exc:
            skipped[profile] = str(exc)
            continue
        runnable.append(profile)
    return runnable, skipped


#: `mcpx-hooks serve` as this interpreter runs it.
SERVE = [sys.executable, "-m", "mcpx_hooks.supervisor", "serve"]


def start_serve(cwd: Path, env: Mapping[str, str]) -> tuple[subprocess.Popen[str], str]:
    """`mcpx-hooks serve` on a free port, with no token, on `cwd`'s `c.toml`; its URL once it
    says it listens. The caller ends it (`kill`, `wait`)."""
    proc = subprocess.Popen(
        [*SERVE, "--port", "0", "--no-auth", "--config", "c.toml"],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"listening on (ws://\S+?);", line)
    if not found:
        proc.kill()
        raise SystemExit(f"serve did not start: {line!r}")
    return proc, found.group(1)
