"""1,000 hooks each sleeping 1 s, all at once: wall time against a bare wave of as many spawns, and
what it costs in memory.

    .venv/bin/python bench/many_hooks.py [--hooks 1000] [--waves 3] [--profiles none,strict]
        [--nofile N]

One wave: `--hooks` `run` hooks of `/bin/sleep 1` started together in one trio nursery, each
through `run_hook` (the whole per-hook path), on one spawner; the figure is the wave's wall
time, from the first `start_soon` to the last hook's frame. Every hook must come back `ok`.
The baseline is the bare wave, measured in the same run before each wave: as many
`os.posix_spawn` of `/bin/sleep 1` from this process, then `waitpid` of each, what the machine
itself needs to start and reap that many processes. (The goals were first set against 1 s, the
time one hook sleeps; the bare wave alone takes about 1.5 s on the 2-core machine, so those
goals asked a wave of hooks to cost what no hooks cost: docs/internals/bench.md, "1,000 hooks
against the bare wave".) Also for context: a `posix_spawn`+`waitpid` of /bin/true with as many
close-on-exec fds open as the spawner holds at the wave's peak (four a hook), against none: why
a wave slopes.

Memory and fds, sampled every 0.25 s during each wave: this process's RSS (the supervisor side:
trio, the hooks' tasks, pipes; and its lifetime peak from `getrusage`), the spawner's RSS
(`Spawner.pid`), and both processes' open fds.

Goals: wall <= 1.5x the bare wave under `none` and <= 2x under `strict` (RESULT
`many_hooks_<profile>`, medians over the waves; the ratios first asked of 1 s), supervisor
RSS printed and bounded: RESULT `many_hooks_<profile>_rss_growth`, the supervisor's RSS growth
over its idle size (baseline column) at the peak of the waves, against 64 MiB at 1,000 hooks
(abs): 64 KiB a hook, where a task, its hook frame and two fds need a few KiB. `strict` runs as
its own rows where this machine can enforce it (root here), else it is skipped with the reason.

1,000 hooks need about 2 fds each here (a control socket and, while its input is written, a
pipe end) and 4 in the spawner (a pidfd, the control socket, the stdout and stderr pipes whose
output it collects): the script raises its RLIMIT_NOFILE soft limit to the
hard one before the spawner starts (which inherits it; `open_spawner` does too); `--nofile N`
sets both to N instead, to see what a smaller limit does. Exits 1 when a hook is not `ok`, a
wave cannot be run, or a process is left once the spawner is closed. Takes 20-60 s.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--hooks 20 --waves 1`: one wave per
profile.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import sys
import time
import traceback

import psutil
import trio
from _quick import parse_args
from _timing import TRUE, enforceable, result

from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook

#: The wall of a wave against the bare wave's, by profile.
GOAL_RATIOS = {"none": 1.5, "strict": 2.0}
#: The supervisor's RSS growth at the peak of a 1,000-hook wave, over its idle size.
GOAL_RSS_GROWTH_MB = 64
SLEEP = ("/bin/sleep", "1")
SAMPLE_EVERY_S = 0.25
CTX = HookContext(run=None)
#: The `failures` key for processes left behind.
LEFTOVER = "leftover"


def sleep_hook(profile: Profile) -> Hook:
    return Hook(
        name="sleep",
        on="script",
        phase=Phase.BEFORE,
        action=Action.RUN,
        target=SLEEP,
        declaring_dir="/",
        source=Provenance(SourceKind.COMMAND_LINE),
        sandbox=profile,
    )


class Peaks:
    """Highest RSS (KiB) and fd counts seen of this process and of the spawner."""

    def __init__(self, spawner_pid: int) -> None:
        self.me = psutil.Process()
        self.spawner = psutil.Process(spawner_pid)
        self.rss_kb = 0
        self.spawner_rss_kb = 0
        self.fds = 0
        self.spawner_fds = 0

    def sample(self) -> None:
        self.rss_kb = max(self.rss_kb, self.me.memory_info().rss // 1024)
        self.fds = max(self.fds, self.me.num_fds())
        self.spawner_rss_kb = max(self.spawner_rss_kb, self.spawner.memory_info().rss // 1024)
        self.spawner_fds = max(self.spawner_fds, self.spawner.num_fds())

    async def serve_sampling(self) -> None:
        """Samples every `SAMPLE_EVERY_S` until cancelled (a measurement, not a wait)."""
        while True:
            self.sample()
            await trio.sleep(SAMPLE_EVERY_S)


async def one_hook(
    spawner: Spawner, hook: Hook, statuses: collections.Counter[str], reasons: list[str]
) -> None:
    report = await run_hook(spawner, hook, CTX)
    frame = report.frame
    statuses[frame.status.value] += 1
    if frame.status is not HookStatus.OK and len(reasons) < 3:
        reasons.append(f"{frame.status}: {frame.reason} {frame.stderr_tail or ''}".strip())


async def wave(spawner: Spawner, hook: Hook, hooks: int, peaks: Peaks) -> float:
    statuses: collections.Counter[str] = collections.Counter()
    reasons: list[str] = []
    async with trio.open_nursery() as outer:
        outer.start_soon(peaks.serve_sampling)
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(hooks):
                nursery.start_soon(one_hook, spawner, hook, statuses, reasons)
        elapsed = time.perf_counter() - start
        outer.cancel_scope.cancel()
    if statuses["ok"] != hooks:
        raise WaveFailed(
            f"{dict(statuses)} in {elapsed:.3f} s (supervisor RSS peak "
            f"{peaks.rss_kb / 1024:.1f} MiB, fds peak {peaks.fds}; spawner fds peak "
            f"{peaks.spawner_fds}); first failures: {reasons}"
        )
    return elapsed


class WaveFailed(Exception):
    """Not every hook of a wave came back ok, or the wave could not be run."""


def bare_wave(hooks: int) -> float:
    """posix_spawn `hooks` sleeps from this process, then waitpid each: the machine's floor."""
    start = time.perf_counter()
    pids = [os.posix_spawn(SLEEP[0], list(SLEEP), {}) for _ in range(hooks)]
    for pid in pids:
        os.waitpid(pid, 0)
    return time.perf_counter() - start


def spawn_with_fds_open(count: int, samples: int = 200) -> float:
    """Median `posix_spawn`+`waitpid` of /bin/true with `count` close-on-exec fds open here:
    each spawn copies this process's fd table and the child's exec closes them all, so a
    spawner holding fds for running children spawns ever slower as a wave builds up."""
    held = []
    try:
        for _ in range(count // 2):
            held.extend(os.pipe2(os.O_CLOEXEC))
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            os.waitpid(os.posix_spawn(TRUE, [TRUE], {}), 0)
            times.append(time.perf_counter() - start)
    finally:
        for fd in held:
            os.close(fd)
    return statistics.median(times)


async def measure(
    profiles: list[Profile], hooks: int, waves: int
) -> tuple[dict[str, list[float]], dict[str, Peaks], dict[Profile, str], dict[str, str], int]:
    walls: dict[str, list[float]] = collections.defaultdict(list)
    peaks: dict[str, Peaks] = {}
    failures: dict[str, str] = {}
    async with open_spawner() as spawner:
        idle_rss_kb = psutil.Process().memory_info().rss // 1024
        runnable, skipped = enforceable(profiles, spawner)
        peaks.update((profile, Peaks(spawner.pid)) for profile in runnable)
        for i in range(waves):
            walls["bare"].append(bare_wave(hooks))
            for profile in runnable[i % len(runnable) :] + runnable[: i % len(runnable)]:
                if profile in failures:
                    continue
                try:
                    walls[profile].append(
                        await wave(spawner, sleep_hook(profile), hooks, peaks[profile])
                    )
                except* WaveFailed as group:
                    failures[profile] = str(group.exceptions[0])
                except* OSError as group:  # e.g. out of fds here: run_hook raised it
                    failures[profile] = _raised(group)
    left = psutil.Process().children(recursive=True)
    if left:
        failures[LEFTOVER] = f"processes left after the spawner closed: {left[:5]}"
    return walls, peaks, skipped, failures, idle_rss_kb


def _raised(group: BaseExceptionGroup[OSError]) -> str:
    """What run_hook raised, in one line: how many, the first, and where."""
    leaves: list[BaseException] = []
    todo: list[BaseException] = [group]
    while todo:
        exc = todo.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            todo.extend(exc.exceptions)
        else:
            leaves.append(exc)
    first = leaves[0]
    where = traceback.extract_tb(first.__traceback__)[-1]
    return (
        f"run_hook raised {len(leaves)} exceptions, the first {first!r} "
        f"at {os.path.basename(where.filename)}:{where.lineno} ({where.line})"
    )


def set_nofile(soft: int | None) -> tuple[int, int]:
    """RLIMIT_NOFILE to `soft` (soft and hard: `open_spawner` raises the soft limit to the
    hard one), or the soft limit to the hard one; returns the new pair."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft is not None:
        hard = soft
    want = hard if soft is None else soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hooks", type=int, default=1000)
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--profiles", default="none,strict")
    parser.add_argument("--nofile", type=int, default=None, help="RLIMIT_NOFILE soft limit")
    args = parse_args(parser, hooks=20, waves=1)
    profiles = [Profile(p) for p in args.profiles.split(",") if p]
    started = time.perf_counter()
    soft, hard = set_nofile(args.nofile)
    walls, peaks, skipped, failures, idle_kb = trio.run(measure, profiles, args.hooks, args.waves)
    n = args.hooks
    print(f"{n} hooks of {' '.join(SLEEP)} at once, {args.waves} waves, medians;")
    print(f"  RLIMIT_NOFILE {soft}/{hard}; supervisor idle RSS {idle_kb / 1024:.1f} MiB")
    bare = statistics.median(walls["bare"])
    print(
        f"  baseline  bare posix_spawn+waitpid wave {bare:6.3f} s "
        f"(waves {_seconds(walls['bare'])}); what one hook sleeps: 1 s"
    )
    few, many = spawn_with_fds_open(0), spawn_with_fds_open(4 * n)
    print(
        f"  context   posix_spawn+waitpid of {TRUE} with {4 * n} close-on-exec fds open (what "
        f"the spawner holds at {n} running hooks): {many * 1e3:.3f} ms, with none "
        f"{few * 1e3:.3f} ms"
    )
    results = []
    for profile in profiles:
        if profile in skipped:
            print(f"  profile {profile}: skipped: {skipped[profile]}")
            continue
        if profile in failures:
            print(f"  profile {profile}: FAILED: {failures[profile]}")
            continue
        wall = statistics.median(walls[profile])
        p = peaks[profile]
        growth_kb = max(0, p.rss_kb - idle_kb)
        per_hook_kb = growth_kb / n
        goal = GOAL_RATIOS[profile]
        verdict = "meets" if wall / bare <= goal else "misses"
        print(
            f"  profile {profile}: wall {wall:6.3f} s  ratio {wall / bare:5.2f}x "
            f"({verdict} the goal <= {goal:g}x); waves {_seconds(walls[profile])}"
        )
        print(
            f"    supervisor RSS peak {p.rss_kb / 1024:.1f} MiB "
            f"(+{growth_kb / 1024:.1f} MiB, {per_hook_kb:.1f} KiB a hook), fds peak {p.fds}; "
            f"spawner RSS peak {p.spawner_rss_kb / 1024:.1f} MiB, fds peak {p.spawner_fds}"
        )
        results.append(
            result(
                f"many_hooks_{profile}",
                wall * 1e3,
                bare * 1e3,
                wall / bare,
                goal,
                unit="ms",
            )
        )
        results.append(
            result(
                f"many_hooks_{profile}_rss_growth",
                growth_kb / 1024,
                idle_kb / 1024,
                growth_kb / idle_kb,
                GOAL_RSS_GROWTH_MB,
                direction="abs",
                unit="MiB",
            )
        )
    if LEFTOVER in failures:
        print(f"  FAILED: {failures[LEFTOVER]}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  supervisor lifetime peak RSS (getrusage) {peak / 1024:.1f} MiB")
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))
    return 1 if failures else 0


def _seconds(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
