"""Cost of the strict sandbox, as a ratio to a bare `posix_spawn` + `waitpid` of /bin/true.

    .venv/bin/python bench/sandbox_overhead.py [--rounds 20] [--per-round 25]

Four figures, interleaved in rounds (each round times all of them in a rotating order, so the
machine's noise falls on all alike), medians over every single spawn:
* `strict_spawn`: `open_child` + `communicate` of /bin/true with the plan a strict hook gets
  (PID, mount, IPC and UTS namespaces, the empty network namespace, tmpfs scratch and covers,
  per-child uid, no_new_privs, Landlock, seccomp, resource limits) — the spawn path alone;
* `strict_hook`: a whole `run` hook of /bin/true under strict through `run_hook` (scratch
  directory, environment, JSON stdin, the hook frame) — what a hook costs;
* `none_spawn`, for context: the same spawn with the limits of profile `none` and no sandbox,
  so that `strict_spawn - none_spawn` is what the sandbox itself adds to the spawn path;
* the baseline. Goals: the spawn path <= 2x; the whole hook <= 3x (issue 27, which names a
  strict hook's goal; it was 2x like the spawn's, which left a strict hook less room over
  its spawn than a hook under none has over a bare spawn). Needs root (strict needs it
  here). Takes well under 60 s.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2`. Not root,
it prints `SKIP` (bench/_quick.py).
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time

import trio
from _quick import missing, parse_args
from _timing import TRUE, interleaved, medians, report

from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.process.scratch import scratch_dir
from mcpx_hooks.supervisor.process.spawner import ChildSpec, Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook

#: Each figure's goal, as a ratio to the bare spawn.
GOALS = {"strict_spawn": 2.0, "strict_hook": 3.0}


async def timed_spawn(spawner: Spawner, spec: ChildSpec) -> float:
    start = time.perf_counter()
    async with spawner.open_child(spec, kill_grace=0.5) as child:
        outcome = await child.communicate(b"", 1 << 16, 1 << 12)
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0, outcome
    return elapsed


async def strict_hook(spawner: Spawner, hook: Hook) -> float:
    start = time.perf_counter()
    report = await run_hook(spawner, hook, HookContext(run=None))
    elapsed = time.perf_counter() - start
    assert report.frame.status == "ok", report.frame
    return elapsed


async def measure(rounds: int, per_round: int, where: str) -> dict[str, list[float]]:
    hook = Hook(
        "bench", "script", Phase.BEFORE, Action.RUN, (TRUE,), where,
        Provenance(SourceKind.COMMAND_LINE), sandbox=Profile.STRICT,
    )  # fmt: skip
    async with open_spawner() as spawner:
        sandbox.require(Profile.STRICT, spawner)
        with scratch_dir("bench-") as scratch:
            rlimits, plan = sandbox.plan(Profile.STRICT, spawner, scratch=scratch, dirs=(where,))
            spec = ChildSpec((TRUE,), where, {}, rlimits, plan)
            soft, _ = sandbox.plan(Profile.NONE, spawner, scratch=scratch, dirs=(where,))
            bare_spec = ChildSpec((TRUE,), where, {}, soft, None)
            samplers = {
                "strict_spawn": functools.partial(timed_spawn, spawner, spec),
                "strict_hook": functools.partial(strict_hook, spawner, hook),
                "none_spawn": functools.partial(timed_spawn, spawner, bare_spec),
            }
            return await interleaved(samplers, rounds, per_round)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=25)
    args = parse_args(parser, rounds=1, per_round=2)
    if os.geteuid() != 0:
        missing("bench/sandbox_overhead.py: the strict profile needs root here: run as root")
    started = time.perf_counter()
    where = tempfile.mkdtemp(prefix="mcpx-bench-")
    os.chmod(where, 0o755)
    try:
        samples = trio.run(measure, args.rounds, args.per_round, where)
    finally:
        os.rmdir(where)
    figures = medians(samples)
    bare = figures["bare"]
    print(f"{len(samples['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    print(f"  baseline      posix_spawn+waitpid {TRUE}: {bare * 1e3:7.3f} ms")
    print(
        "  mechanisms:   pidns, mountns (read-only tree, tmpfs scratch), empty netns, per-child"
        " uid, no_new_privs, landlock, seccomp, rlimits"
    )
    results = [
        report(name, f"{name:13}", figures[name], bare, goal) for name, goal in GOALS.items()
    ]
    none, strict = figures["none_spawn"], figures["strict_spawn"]
    print(
        f"  none_spawn   : {none * 1e3:7.3f} ms  ratio {none / bare:5.2f}x  (context: the same"
        f" spawn unsandboxed; the sandbox adds {(strict - none) * 1e3:.3f} ms)"
    )
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))


if __name__ == "__main__":
    main()
