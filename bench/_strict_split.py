"""Where a spawn's work goes in the spawner, by profile: CPU and system calls per child, for
`docs/internals/bench.md`. Not a figure of `make bench` (its name starts with `_`): a tool to
read before cutting anything on the spawner's side.

    .venv/bin/python bench/_strict_split.py [--profile strict|none] [-n 1000] [--strace]

Children of /bin/true through `open_child` + `communicate`, one after another after 50
unmeasured ones, with the plan `bench/sandbox_overhead.py` gives its `strict_spawn` (or, with
`--profile none`, its `none_spawn`). Prints per child: the spawner's CPU time and its reaped
children's (the kernel's counters in `/proc/PID/stat`, which include each child's own exit,
its namespaces' teardown among it), this process's, and the wall time (median, 10th
percentile: on a loaded machine the low percentile moves far less than the median). With
`--strace`, `strace -c` attached to the spawner's thread for the children instead: the system
calls it makes per child, by name (each call is then slower; the counts are exact). Needs
root for strict.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time

import trio
from _timing import TRUE

from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import ChildSpec, Spawner, open_spawner

TICK = os.sysconf("SC_CLK_TCK")


def spawner_pid() -> int:
    """The spawner this process started (a child running runners/spawner.py)."""
    found: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    for pid in found:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"spawner.py" in f.read():
                return pid
    raise SystemExit("no spawner among this process's children")


def cpu(pid: int) -> list[float]:
    """utime, stime, cutime, cstime of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return [int(x) / TICK for x in fields[11:15]]


def start_strace(pid: int, out: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["strace", "-c", "-S", "calls", "-o", out, "-p", str(pid)])


def stop_strace(tracer: subprocess.Popen[bytes], out: str, n: int) -> list[str]:
    """Per child: each system call's name and count, most first."""
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    with open(out) as f:
        lines = f.read().splitlines()
    found = []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) >= 5 and parts[3].isdigit():
            found.append(f"  {parts[-1]:24s} {int(parts[3]) / n:6.1f}")
    return found


async def one(spawner: Spawner, spec: ChildSpec) -> float:
    start = time.perf_counter()
    async with spawner.open_child(spec, kill_grace=0.5) as child:
        outcome = await child.communicate(b"", 1 << 16, 1 << 12)
    assert outcome.exit_code == 0, outcome
    return time.perf_counter() - start


async def measure(profile: Profile, n: int, use_strace: bool, where: str) -> None:
    async with open_spawner() as spawner:
        pid = spawner_pid()
        with scratch_dir("bench-") as scratch:
            rlimits, plan = sandbox.plan(profile, spawner, scratch=scratch, dirs=(where,))
            spec = ChildSpec((TRUE,), where, {}, rlimits, plan)
            for _ in range(50):
                await one(spawner, spec)
            if use_strace:
                out = os.path.join(where, "strace.txt")
                tracer = start_strace(pid, out)
                await trio.sleep(1.0)  # (attached)
                for _ in range(n):
                    await one(spawner, spec)
                found = stop_strace(tracer, out, n)
                os.unlink(out)
                print(f"{profile.value}: the spawner's system calls per child, over {n}")
                print("\n".join(found))
                return
            before, mine = cpu(pid), time.process_time()
            times = [await one(spawner, spec) for _ in range(n)]
            after, mine = cpu(pid), time.process_time() - mine
    us = [(b - a) / n * 1e6 for a, b in zip(before, after, strict=True)]
    times.sort()
    print(
        f"{profile.value}, per child over {n}: spawner {us[0] + us[1]:.0f} us of CPU (system"
        f" {us[1]:.0f}), its children {us[2] + us[3]:.0f} us (system {us[3]:.0f}), this"
        f" process {mine / n * 1e6:.0f} us; wall median {statistics.median(times) * 1e3:.3f}"
        f" ms, p10 {times[len(times) // 10] * 1e3:.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--profile", choices=("strict", "none"), default="strict")
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--strace", action="store_true")
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="mcpx-bench-")
    os.chmod(where, 0o755)
    try:
        trio.run(measure, Profile(args.profile), args.n, args.strace, where)
    finally:
        os.rmdir(where)


if __name__ == "__main__":
    main()
