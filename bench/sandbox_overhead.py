"""Cost of the strict sandbox, as a ratio to a bare `posix_spawn` + `waitpid` of /bin/true.

    .venv/bin/python bench/sandbox_overhead.py [--rounds 20] [--per-round 25]

Three figures, interleaved in rounds (each round times all of them in a rotating order, so the
machine's noise falls on all alike), medians over every single spawn:
* `strict_spawn`: `open_child` + `communicate` of /bin/true with the plan a strict hook gets
  (PID, mount, IPC and UTS namespaces, the empty network namespace, tmpfs scratch and covers,
  per-child uid, no_new_privs, Landlock, seccomp, resource limits) — the spawn path alone;
* `strict_hook`: a whole `run` hook of /bin/true under strict through `run_hook` (scratch
  directory, environment, JSON stdin, the hook frame) — what a hook costs;
* the baseline. Goal: <= 2x. Needs root (strict needs it here). Takes well under 60 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import trio

from mcpx_hooks.supervisor import sandbox
from mcpx_hooks.supervisor.hookrun import HookContext, run_hook
from mcpx_hooks.supervisor.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.points import Phase
from mcpx_hooks.supervisor.scratch import scratch_dir
from mcpx_hooks.supervisor.spawn import ChildSpec, Spawner, open_spawner

TRUE = "/bin/true"
GOAL = 2.0


def bare_spawn() -> float:
    start = time.perf_counter()
    pid = os.posix_spawn(TRUE, [TRUE], {})
    os.waitpid(pid, 0)
    return time.perf_counter() - start


async def strict_spawn(spawner: Spawner, spec: ChildSpec) -> float:
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
            names = ["strict_spawn", "strict_hook", "bare"]
            samples: dict[str, list[float]] = {name: [] for name in names}
            for r in range(rounds + 1):  # round 0 warms up and is dropped
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    got: list[float] = []
                    for _ in range(per_round):
                        if name == "bare":
                            got.append(bare_spawn())
                        elif name == "strict_spawn":
                            got.append(await strict_spawn(spawner, spec))
                        else:
                            got.append(await strict_hook(spawner, hook))
                    if r:
                        samples[name].extend(got)
            return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=25)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("the strict profile needs root here: run as root")
    started = time.perf_counter()
    where = tempfile.mkdtemp(prefix="mcpx-bench-")
    os.chmod(where, 0o755)
    try:
        samples = trio.run(measure, args.rounds, args.per_round, where)
    finally:
        os.rmdir(where)
    bare = statistics.median(samples["bare"])
    print(f"{len(samples['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    print(f"  baseline      posix_spawn+waitpid {TRUE}: {bare * 1e3:7.3f} ms")
    print(
        "  mechanisms:   pidns, mountns (read-only tree, tmpfs scratch), empty netns, per-child"
        " uid, no_new_privs, landlock, seccomp, rlimits"
    )
    results = []
    for name in ("strict_spawn", "strict_hook"):
        figure = statistics.median(samples[name])
        verdict = "meets" if figure / bare <= GOAL else "misses"
        print(
            f"  {name:13} {figure * 1e3:7.3f} ms  ratio {figure / bare:5.2f}x"
            f"  ({verdict} the goal <= {GOAL}x)"
        )
        results.append(
            f"RESULT {name} {figure * 1e3:.3f} {bare * 1e3:.3f} {figure / bare:.3f} {GOAL}"
        )
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))


if __name__ == "__main__":
    main()
