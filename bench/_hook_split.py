"""Where a hook's wall time goes: the stages of one hook (or of a run with 4 hooks) timed from
inside the supervisor, for `docs/internals/bench.md`. Not a figure of `make bench` (its name
starts with `_`): a tool to read before cutting anything.

    .venv/bin/python bench/_hook_split.py [--kind run|module] [--profile none|strict] [-n 1000]
    .venv/bin/python bench/_hook_split.py --four [-n 300]

Each stage is wrapped in a `perf_counter` pair (a few microseconds each, counted in the
stage); the hooks run one after another after 50 unmeasured ones, and each stage prints its
mean per hook (or per run). The spawner is another process: what it does shows here as the
supervisor's wait for its first report and then for the exit report. A hook's child is
collected (`Spawner.open_child(collect=)`): its "started" is held back while it is short, so
its first report is the exit report, and the second wait is empty; a script's first report
is "started".
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import hook_overhead
import module_hook
import run_overhead
import trio

from mcpx_hooks.supervisor.core.hooks import Hook, Profile
from mcpx_hooks.supervisor.process import child, spawner
from mcpx_hooks.supervisor.run import hookframe

SPENT: collections.defaultdict[str, float] = collections.defaultdict(float)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - start

    return wrapper


def atimed(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - start

    return wrapper


def instrument() -> None:
    real_scratch = hookframe.scratch_dir

    @contextlib.contextmanager
    def scratch(prefix: str) -> Iterator[str]:
        start = time.perf_counter()
        with real_scratch(prefix) as path:
            SPENT["supervisor: scratch mkdir"] += time.perf_counter() - start
            yield path
            start = time.perf_counter()
        SPENT["supervisor: scratch rmdir"] += time.perf_counter() - start

    hookframe.scratch_dir = scratch  # type: ignore[assignment]
    hookframe.hook_passed = timed("supervisor: passEnv, secrets", hookframe.hook_passed)
    hookframe.sandbox.plan = timed("supervisor: sandbox plan", hookframe.sandbox.plan)
    hookframe.hook_environment = timed("supervisor: environment", hookframe.hook_environment)
    check = timed("supervisor: program visibility", hookframe.programs.check_program)
    hookframe.programs.check_program = check
    hookframe.hook_input = timed("supervisor: hook input", hookframe.hook_input)
    sp, ch = spawner.Spawner, child.Child
    sp._request = atimed("supervisor: request built, sent", sp._request)  # type: ignore[method-assign]
    first = atimed("spawner, child: until the first report", ch._wait_started)
    ch._wait_started = first  # type: ignore[method-assign]
    ch.wait = atimed("then until the exit report", ch.wait)  # type: ignore[method-assign]
    finished = timed("supervisor: output read, frame built", hookframe.FrameBuilder.finished)
    hookframe.FrameBuilder.finished = finished  # type: ignore[method-assign]


def one_hook(kind: str, profile: Profile, directory: str) -> Hook:
    if kind == "module":
        Path(directory, module_hook.HOOK_FILE).write_text(module_hook.HOOK_SOURCE)
        return module_hook.module_hook(directory, profile)
    return attrs.evolve(hook_overhead.HOOK, sandbox=profile)


async def hooks(kind: str, profile: Profile, count: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        hook = one_hook(kind, profile, directory)
        async with spawner.open_spawner() as sp:
            for _ in range(50):
                await hook_overhead.run_hook(sp, hook, hook_overhead.CTX)
            SPENT.clear()
            start = time.perf_counter()
            for _ in range(count):
                await hook_overhead.run_hook(sp, hook, hook_overhead.CTX)
            return time.perf_counter() - start


async def runs(count: int, script_sandbox: str | None) -> float:
    with tempfile.TemporaryDirectory() as directory:
        config = run_overhead.bench_config(Path(directory))
        if script_sandbox is not None:  # (else the config's `[script] sandbox`: workspace)
            config = attrs.evolve(config, script_sandbox=Profile(script_sandbox))
        async with run_overhead.open_runtime(config) as runtime:
            for _ in range(20):
                await run_overhead.one_run(runtime, directory)
            SPENT.clear()
            start = time.perf_counter()
            for _ in range(count):
                await run_overhead.one_run(runtime, directory)
            return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("run", "module"), default="run")
    parser.add_argument("--profile", default="none")
    parser.add_argument("--four", action="store_true", help="a run with 4 hooks")
    parser.add_argument("--script-sandbox", help="the script's profile, with --four")
    parser.add_argument("-n", type=int, default=0)
    args = parser.parse_args()
    instrument()
    count = args.n or (300 if args.four else 1000)
    if args.four:
        total = trio.run(runs, count, args.script_sandbox)
        print(f"a run with 4 run hooks of /bin/true: {total / count * 1e3:.3f} ms per run")
    else:
        total = trio.run(hooks, args.kind, Profile(args.profile), count)
        each = total / count * 1e3
        print(f"a {args.kind} hook, profile {args.profile}: {each:.3f} ms per hook")
    print(f"  (mean of {count}, one after another; pid {os.getpid()})")
    for name, spent in SPENT.items():
        print(f"  {name:40s} {spent / count * 1e3:7.3f} ms")


if __name__ == "__main__":
    main()
