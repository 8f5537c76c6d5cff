"""A warm `module` hook's path across its three processes (the supervisor, the spawner, the
waiting fork that runs the hook), on the clock all three share; the spawner's CPU and page
faults per hook; and the floors under it: what a fork of a process the spawner's size costs,
and how long such a fork's exit takes to be seen. For `docs/internals/bench.md`; not a figure
of `make bench` (its name starts with `_`).

    .venv/bin/python bench/_module_path.py [-n 400] [--gap MS] [--profile none]

The spawner is started from a wrapper (as `_critical_path.py` does) that stamps its steps and
its waiting forks' with `time.perf_counter` (CLOCK_MONOTONIC, one clock for all); each fork
writes its own stamps as it exits (a sandboxed fork cannot: its view is read-only, so under
`--profile strict` only the supervisor's and the spawner's steps show). Hooks
(`module_hook.py`'s) run one after another after 50 unmeasured ones, with `--gap` ms between
two (0: back to back, as `module_hook.py` times them; a few ms: what a tool call or a
script's other work puts between two hooks). Each step prints its median time since the hook
began, over the hooks in which it came before the hook's end (`n`: in how many). A waiting
fork forked during one hook readies itself for the next, so its steps may fall after the
hook's end, or in the next hook. Around the measured hooks, the spawner's own CPU time and
minor page faults, and its reaped children's CPU time (`/proc/PID/stat`), per hook.

The floors, measured after the hooks in a `python -I -S` of the spawner's size (its
`RssAnon` read from the running spawner, the rest ballast): `os.fork()` in the parent, and
from a fork's `_exit` (its own clock read, sent up a pipe) until its pidfd reads (what the
spawner waits for before it reaps a hook), for a fork that writes nothing and for one that
writes half its ballast (as a hook's Python writes to the pages it shares with the spawner).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import module_hook
import trio
from _critical_path import STAMPS, WRAPPER_HEAD, WRAPPER_TAIL, instrument

from mcpx_hooks.supervisor.core.hooks import Profile
from mcpx_hooks.supervisor.process import spawner

#: The spawner's side: stamps its steps and its waiting forks', each fork writing its own (to
#: a file of its own: each is PID 1 of its namespace, so its pid names nothing).
WRAPPER = (
    WRAPPER_HEAD
    + """
FORK = []
def in_fork(*args, **kwargs):
    FORK.append(len(STAMPS))
    STAMPS.append(("fork: begins", time.perf_counter()))
    waiting_child(*args, **kwargs)
def exit_(code):
    STAMPS.append(("fork: _exit called", time.perf_counter()))
    if FORK:
        try:
            with open({out!r} + "." + str(time.perf_counter_ns()), "w") as f:
                json.dump(STAMPS[FORK[0]:], f)
        except OSError:  # a sandboxed fork's view is read-only: its steps go unstamped
            pass
    real_exit(code)
waiting_child, real_exit = warm._waiting_child, os._exit
warm._waiting_child, os._exit = in_fork, exit_
stamp(pidns.PidNsSpawner, "_accept", "spawner: woken by the request", None)
stamp(spawnreq.Request, "__init__", "spawner: request checks begin", "spawner: request checked")
stamp(warm.WaitingFork, "hand_over", "spawner: request handed over", "spawner: the fork said ok")
stamp(warmpool.WarmPool, "_fork", "spawner: forking the next fork", "spawner: next fork made")
stamp(pidns.PidNsSpawner, "_read_output", "spawner: woken by the hook's output", None)
stamp(pidns.PidNsSpawner, "_reap", "spawner: reaping", None)
stamp(treeends, "send_collected", None, "spawner: exit report sent")
stamp(warm, "_ready_interpreter", None, "fork: ready")
stamp(warm, "_take_request", None, "fork: request taken")
stamp(module_runner, "run", "fork: hook's Python begins", "fork: hook's Python ends")
"""
    + WRAPPER_TAIL
)

#: The floors: a fork of a process of the spawner's size (argv[1], its anonymous kB: the rest
#: made up with ballast), and its exit until its pidfd reads.
FLOORS = """
import os, select, statistics, struct, sys, time
with open("/proc/self/status") as f:
    own = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
ballast = [bytearray(4096) for _ in range(max(0, (int(sys.argv[1]) - own) // 4))]
def one(touch):
    r, w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        for page in ballast[: len(ballast) // 2] if touch else ():
            page[0] = 1
        os.write(w, struct.pack("d", time.perf_counter()))
        os._exit(0)
    forked = time.perf_counter() - start
    os.close(w)
    pidfd = os.pidfd_open(pid)
    select.select([pidfd], [], [])
    seen = time.perf_counter() - struct.unpack("d", os.read(r, 8))[0]
    os.waitpid(pid, 0)
    os.close(pidfd)
    os.close(r)
    return forked, seen
for touch in (False, True, False, True):
    got = [one(touch) for _ in range(200)]
    fork, exit_ = (statistics.median(g) * 1e3 for g in zip(*got))
    print(f"{int(touch)} {fork:.3f} {exit_:.3f}")
"""

HOOK_BEGINS, HOOK_ENDS = "supervisor: hook begins", "supervisor: hook ends"


def counters(pid: int) -> tuple[int, float, float]:
    """A process's minor page faults, CPU seconds, and its reaped children's CPU seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / tick
    return int(fields[7]), own, (int(fields[13]) + int(fields[14])) / tick


async def hooks(count: int, gap_s: float, profile: Profile, directory: str) -> int:
    """Runs the hooks; prints the spawner's counters per hook; returns its anonymous memory
    (kB) after them."""
    os.chmod(directory, 0o755)  # (as `module_hook.py`: readable by a strict hook's own uid)
    (Path(directory) / module_hook.HOOK_FILE).write_text(module_hook.HOOK_SOURCE)
    hook = module_hook.module_hook(directory, profile)
    async with spawner.open_spawner() as sp:
        for _ in range(50):
            await module_hook.hook_sample(sp, hook)
        STAMPS.clear()
        before = counters(sp.pid)
        for _ in range(count):
            STAMPS.append((HOOK_BEGINS, time.perf_counter()))
            await module_hook.hook_sample(sp, hook)
            STAMPS.append((HOOK_ENDS, time.perf_counter()))
            if gap_s:
                await trio.sleep(gap_s)
        faults, own, reaped = (b - a for a, b in zip(before, counters(sp.pid), strict=True))
        print(
            f"the spawner, per hook: {own / count * 1e3:.3f} ms of CPU, {faults / count:.0f}"
            f" page faults; the forks it reaped: {reaped / count * 1e3:.3f} ms of CPU"
        )
        return spawner_anon_kb(sp.pid)


def spawner_anon_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def floors(spawner_kb: int) -> None:
    python = [sys.executable, "-I", "-S", "-c", FLOORS, str(spawner_kb)]
    got = subprocess.run(python, capture_output=True, text=True, check=True)
    rows: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for line in got.stdout.split("\n"):
        if line:
            touch, fork, exit_ = line.split()
            rows["writes half its ballast" if touch == "1" else "writes nothing"].append(
                (float(fork), float(exit_))
            )
    print(f"floors: a python -I -S of the spawner's anonymous memory ({spawner_kb} kB), medians")
    for what, pairs in rows.items():
        forks = ", ".join(f"{f:.3f}" for f, _ in pairs)
        exits = ", ".join(f"{e:.3f}" for _, e in pairs)
        print(f"  a fork that {what}: os.fork() {forks} ms; _exit until its pidfd reads {exits} ms")


def per_hook(stamps: list[tuple[str, float]]) -> list[list[tuple[str, float]]]:
    """Each hook's stamps, from its beginning to its end, in time order."""
    found: list[list[tuple[str, float]]] = []
    current: list[tuple[str, float]] | None = None
    for name, at in sorted(stamps, key=lambda s: s[1]):
        if name == HOOK_BEGINS:
            current = [(name, at)]
        elif current is not None:
            current.append((name, at))
            if name == HOOK_ENDS:
                found.append(current)
                current = None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=400)
    parser.add_argument("--gap", type=float, default=0.0, help="ms between two hooks")
    parser.add_argument("--profile", default="none")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        instrument(directory, WRAPPER)
        anon_kb = trio.run(hooks, args.n, args.gap / 1e3, Profile(args.profile), directory)
        theirs: list[tuple[str, float]] = []
        for path in Path(directory).glob("spawner-stamps.json*"):
            theirs += [(str(name), float(at)) for name, at in json.loads(path.read_text())]
    found = per_hook(STAMPS + theirs)
    if not found:
        sys.exit("no hook was stamped")
    since: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
    for hook in found:
        start, seen = hook[0][1], set()
        for name, at in hook:
            if name not in seen:  # each step's first in the hook
                seen.add(name)
                since[name].append((at - start) * 1e3)
    print(f"a module hook, profile {args.profile}, {args.gap:g} ms between hooks: {len(found)}")
    print("  step (median ms since the hook began; n: hooks it came in)")
    for name, times in sorted(since.items(), key=lambda kv: statistics.median(kv[1])):
        print(f"  {name:40s} {statistics.median(times):7.3f}  n={len(times)}")
    floors(anon_kb)


if __name__ == "__main__":
    main()
