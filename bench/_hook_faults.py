"""Tool: the CPU time and the minor page faults each process spends on one hook, one after
another as `module_hook.py` and `hook_overhead.py` take them.

    .venv/bin/python bench/_hook_faults.py [--hooks 400] [--kind module|run] [PROFILE ...]

For each profile (default `none`): a spawner, 30 hooks to warm up, then `--hooks` `run_hook`
calls of `module_hook.py`'s module hook (or, `--kind run`, `hook_overhead.py`'s `run` hook of
/bin/true), one after another. Around those, from `/proc/PID/stat`: the spawner's own minor
faults and CPU, and those of the processes it reaped (the hooks: a module hook's fork of the
spawner, a run hook's child); the bench's own process by `getrusage`; and the spawner's
children that outlived the hooks (none but waiting forks). Per hook, with the p50.

On a virtual machine whose page tables are dear, a minor fault is where a fork's cost shows:
every page a fork or its parent writes after the fork is copied first, one fault each (about
3 us here, `docs/internals/bench.md`). Not a row of `make bench`.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import attrs
import psutil
import trio

sys.path.insert(0, str(Path(__file__).parent))
import hook_overhead
from module_hook import CTX, HOOK_FILE, HOOK_SOURCE, module_hook

from mcpx_hooks.supervisor.core.hooks import Hook, Profile
from mcpx_hooks.supervisor.process.spawner import open_spawner
from mcpx_hooks.supervisor.run.hookrun import run_hook

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, float, float]:
    """(minor faults, reaped children's minor faults, CPU s, reaped children's CPU s)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the name: state is 0, minflt 7, cminflt 8, utime 11, stime 12, cutime 13, cstime 14.
    return (
        int(fields[7]),
        int(fields[8]),
        (int(fields[11]) + int(fields[12])) / TICKS,
        (int(fields[13]) + int(fields[14])) / TICKS,
    )


async def measure(hook: Hook, hooks: int) -> None:
    async with open_spawner() as spawner:
        for _ in range(30):
            await run_hook(spawner, hook, CTX)
        (spawner_proc,) = psutil.Process().children()
        waiting = {p.pid: _stat(p.pid) for p in spawner_proc.children()}
        before, own = _stat(spawner_proc.pid), resource.getrusage(resource.RUSAGE_SELF)
        took = []
        for _ in range(hooks):
            start = time.perf_counter()
            await run_hook(spawner, hook, CTX)
            took.append(time.perf_counter() - start)
        after, own_after = _stat(spawner_proc.pid), resource.getrusage(resource.RUSAGE_SELF)
        kept = {pid: _stat(pid) for pid in waiting if psutil.pid_exists(pid)}
    took.sort()
    per = 1000 / hooks
    mine = (own_after.ru_utime + own_after.ru_stime - own.ru_utime - own.ru_stime) * per
    print(
        f"{hook.sandbox:>8}: p50 {took[hooks // 2] * 1000:.2f} ms;"
        f" spawner {(after[0] - before[0]) / hooks:.0f} faults {(after[2] - before[2]) * per:.2f}"
        f" ms; hooks {(after[1] - before[1]) / hooks:.0f} faults"
        f" {(after[3] - before[3]) * per:.2f} ms; this process"
        f" {(own_after.ru_minflt - own.ru_minflt) / hooks:.0f} faults {mine:.2f} ms"
        + (
            f"; outlived {len(kept)}:"
            f" {sum(kept[p][0] - waiting[p][0] for p in kept) / hooks:.0f} faults"
            if kept
            else ""
        )
        + " (per hook)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("profiles", nargs="*", default=["none"])
    parser.add_argument("--hooks", type=int, default=400)
    parser.add_argument("--kind", choices=["module", "run"], default="module")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, HOOK_FILE).write_text(HOOK_SOURCE)
        for name in args.profiles:
            profile = Profile(name)
            if args.kind == "module":
                hook = module_hook(tmp, profile)
            else:
                hook = attrs.evolve(hook_overhead.HOOK, sandbox=profile)
            trio.run(measure, hook, args.hooks)


if __name__ == "__main__":
    main()
