"""A `run` hook's critical path across the two processes: when the supervisor and the spawner
reach each step of one hook, on the clock both share, for `docs/internals/bench.md`. Not a
figure of `make bench` (its name starts with `_`): a tool to read before cutting anything.

    .venv/bin/python bench/_critical_path.py [-n 1000]

The spawner is started from a wrapper (written to a temporary directory) that stamps its
steps with `time.perf_counter` (CLOCK_MONOTONIC, the same clock in both processes) and writes
them out when it ends; the supervisor stamps its own. Hooks run one after another after 50
unmeasured ones (`hook_overhead.py`'s hook: /bin/true, profile none); each step prints its
median over the hooks. Steps one process takes while the other waits add up to the hook's
time; the spawner's steps after the spawn overlap the child's run.
"""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import hook_overhead
import trio

from mcpx_hooks.supervisor.process import launch, spawner
from mcpx_hooks.supervisor.process.child import SpawnerLink
from mcpx_hooks.supervisor.process.runnerside import runner_path
from mcpx_hooks.supervisor.run import hookframe

#: A stamping wrapper's start (`instrument`): the runner modules, a list of stamps, and `stamp`,
#: which wraps one of their functions to stamp its call (`before`) and its return (`after`).
WRAPPER_HEAD = """
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname({spawner!r})))
sys.argv[0] = {spawner!r}
from runners import module_runner, pidns, spawner, spawnreq, treeends, warm, warmpool
STAMPS = []
def stamp(obj, name, before, after):
    real = getattr(obj, name)
    def wrapper(*args, **kwargs):
        if before:
            STAMPS.append((before, time.perf_counter()))
        try:
            return real(*args, **kwargs)
        finally:
            if after:
                STAMPS.append((after, time.perf_counter()))
    setattr(obj, name, wrapper)
"""
#: Its end: the spawner served, its stamps written out.
WRAPPER_TAIL = """
try:
    spawner.main()
finally:
    with open({out!r}, "w") as f:
        json.dump(STAMPS, f)
"""
#: The spawner's side: wraps the steps of `runners/pidns.py` and writes the stamps at its end.
WRAPPER = (
    WRAPPER_HEAD
    + """
stamp(pidns.PidNsSpawner, "_accept", "spawner: woken by the request", None)
stamp(spawnreq.Request, "__init__", "spawner: request taken off the socket", "spawner: checked")
stamp(spawnreq.Request, "posix_spawn", "spawner: limits lent, spawn called", "spawner: exec done")
stamp(pidns.PidNsSpawner, "_accept", None, "spawner: child watched, back to epoll")
stamp(pidns.PidNsSpawner, "_read_output", "spawner: woken by the child's end", None)
stamp(pidns.PidNsSpawner, "_reap", "spawner: reaping", None)
stamp(treeends, "send_collected", "spawner: exit report built", "spawner: exit report sent")
"""
    + WRAPPER_TAIL
)

STEPS = (
    "supervisor: hook begins",
    "supervisor: spawn request sent",
    "spawner: woken by the request",
    "spawner: request taken off the socket",
    "spawner: checked",
    "spawner: limits lent, spawn called",
    "spawner: exec done",
    "spawner: child watched, back to epoll",
    "spawner: woken by the child's end",
    "spawner: reaping",
    "spawner: exit report built",
    "spawner: exit report sent",
    "supervisor: exit report read",
    "supervisor: frame built",
    "supervisor: hook ends",
)
STAMPS: list[tuple[str, float]] = []


def stamped(name: str, fn: Callable[..., Any], *, after: bool = False) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not after:
            STAMPS.append((name, time.perf_counter()))
        try:
            return fn(*args, **kwargs)
        finally:
            if after:
                STAMPS.append((name, time.perf_counter()))

    return wrapper


def astamped(name: str, fn: Callable[..., Awaitable[Any]], *, after: bool) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not after:
            STAMPS.append((name, time.perf_counter()))
        try:
            return await fn(*args, **kwargs)
        finally:
            if after:
                STAMPS.append((name, time.perf_counter()))

    return wrapper


def instrument(directory: str, source: str = WRAPPER) -> str:
    """Starts later spawners from the stamping wrapper `source`, and stamps the supervisor's
    steps; returns where the wrapper writes its stamps."""
    out = os.path.join(directory, "spawner-stamps.json")
    wrapper = os.path.join(directory, "spawner.py")
    with open(wrapper, "w") as f:
        f.write(source.format(spawner=runner_path("spawner.py"), out=out))
    launch.runner_path = lambda name: wrapper if name == "spawner.py" else runner_path(name)  # type: ignore[assignment]
    sp = spawner.Spawner
    send = astamped("supervisor: spawn request sent", sp._send_request, after=False)
    sp._send_request = send  # type: ignore[method-assign]
    SpawnerLink.recv = astamped("supervisor: exit report read", SpawnerLink.recv, after=True)  # type: ignore[method-assign]
    finished = stamped("supervisor: frame built", hookframe.FrameBuilder.finished, after=True)
    hookframe.FrameBuilder.finished = finished  # type: ignore[method-assign]
    return out


async def hooks(count: int) -> None:
    async with spawner.open_spawner() as sp:
        for _ in range(50):
            await hook_overhead.hook(sp)
        STAMPS.clear()
        for _ in range(count):
            STAMPS.append(("supervisor: hook begins", time.perf_counter()))
            await hook_overhead.hook(sp)
            STAMPS.append(("supervisor: hook ends", time.perf_counter()))


def per_hook(stamps: list[tuple[str, float]]) -> list[dict[str, float]]:
    """The stamps of each hook, by step (the first of each step in a hook)."""
    found: list[dict[str, float]] = []
    for name, at in sorted(stamps, key=lambda s: s[1]):
        if name == STEPS[0]:
            found.append({})
        if found and name not in found[-1]:
            found[-1][name] = at
    return [hook for hook in found if all(step in hook for step in STEPS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        out = instrument(directory)
        trio.run(hooks, args.n)
        with open(out) as f:
            theirs = [(str(name), float(at)) for name, at in json.load(f)]
    found = per_hook(STAMPS + theirs)
    if not found:
        sys.exit("no hook had every step stamped")
    spans: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
    for hook in found:
        for before, after in itertools.pairwise(STEPS):
            spans[after].append(hook[after] - hook[before])
        spans["whole hook"].append(hook[STEPS[-1]] - hook[STEPS[0]])
    print(f"a run hook of /bin/true, profile none: {len(found)} of {args.n} hooks stamped")
    print("  step (median ms since the step before)")
    for name, times in spans.items():
        print(f"  {name:42s} {statistics.median(times) * 1e3:7.3f}")


if __name__ == "__main__":
    main()
