"""A `module` hook round trip (input -> output), against a cold interpreter and a warm fork.

    .venv/bin/python bench/module_hook.py [--rounds 10] [--per-round 20] [--profiles none,strict]

The hook: `action = module`, `target = "bench_hook.py:hook"`, a function that answers
`{"advise": "<hook name> saw <point>"}` built from its input. Each sample is one `run_hook`
call, the whole per-hook path as a run takes it (clamp, scratch directory, environment, JSON
input, whatever starts the module's process, output read, parsed, bounded, the hook frame);
the answer is checked every time. Whatever `run_hook` does to start the module is what is
measured: nothing here knows or selects how.

Baselines, in the same rounds (each round times every figure, in a rotating order, so the
machine's noise falls on all alike; round 0 warms up and is dropped):
* `cold`: `sys.executable -I -S -c CODE`, CODE reading the same JSON input from stdin and
  printing the same answer; started with `os.posix_spawn` with pipes for stdin and stdout,
  input written, stdout read to its end, `waitpid` — plain blocking calls in this thread (no
  trio, no worker thread);
* `fork`: `os.fork()` of this warm process (trio and the supervisor loaded); the child reads
  the JSON from a pipe, writes the answer to another, `os._exit(0)`; the parent writes, reads,
  `waitpid`s. What a fork server's bare work costs, without isolation;
* `bare`: posix_spawn + waitpid of /bin/true (`_timing.bare_spawn`), for context.

Goal (issues 6 and 27): p50 <= 3 ms. For each profile run (`none`; `strict` where this machine
can enforce it — root here — else skipped with the reason), one RESULT row,
`module_hook_<profile>_p50` (abs: the hook's p50 against 3 ms; baseline column: the warm fork's
p50); how many times faster than cold it is, and its ratio to the warm fork, are printed for
context. (A second row once held the speed-up against cold to >= 9x: issue 6's 3 ms was 9x the
cold start measured then. The cold start is 12-13 ms on this machine now, where 9x is the bare
warm fork's own time, 1.4 ms: a goal of no cost at all beyond the fork, which the 3 ms goal
never was.) Exits 1 if a hook or a baseline gives a wrong answer or cannot run. Takes about 30
s while a module hook costs ~50 ms, less once it is faster.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import trio
from _quick import parse_args
from _timing import enforceable, interleaved, percentile, result

from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, hook_input
from mcpx_hooks.supervisor.run.hookrun import run_hook

GOAL_P50_MS = 3.0
HOOK_FILE = "bench_hook.py"
HOOK_SOURCE = """\
def hook(data):
    return {"advise": data["hook"]["name"] + " saw " + data["hook"]["on"]}
"""
#: The cold baseline's program: the same answer from the same input, stdin to stdout.
COLD_CODE = (
    "import json, sys\n"
    "data = json.load(sys.stdin)\n"
    'sys.stdout.write(json.dumps({"advise": data["hook"]["name"] + " saw " + data["hook"]["on"]}))'
)
NAME = "bench"
EXPECTED = {"advise": f"{NAME} saw script"}
CTX = HookContext(run=None)


class Broken(Exception):
    """A measurement could not be made (wrong answer, failed hook)."""


def module_hook(directory: str, profile: Profile) -> Hook:
    return Hook(
        name=NAME,
        on="script",
        phase=Phase.BEFORE,
        action=Action.MODULE,
        target=f"{HOOK_FILE}:hook",
        declaring_dir=directory,
        source=Provenance(SourceKind.COMMAND_LINE),
        effect=Effect.ADVISE,
        sandbox=profile,
    )


async def hook_sample(spawner: Spawner, hook: Hook) -> float:
    start = time.perf_counter()
    report = await run_hook(spawner, hook, CTX)
    elapsed = time.perf_counter() - start
    frame = report.frame
    if frame.status is not HookStatus.OK or report.answer.advice != (EXPECTED["advise"],):
        raise Broken(
            f"module hook ({hook.sandbox}): status {frame.status}, advice "
            f"{report.answer.advice!r}, reason {frame.reason!r}, stderr {frame.stderr_tail!r}"
        )
    return elapsed


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _check(name: str, out: bytes, status: int) -> None:
    if status != 0 or json.loads(out or b"null") != EXPECTED:
        raise Broken(f"{name} baseline: wait status {status}, answered {out[:200]!r}")


def cold_round_trip(payload: bytes) -> float:
    """`python -I -S` reading JSON on stdin and printing JSON: posix_spawn, write, read, wait."""
    start = time.perf_counter()
    in_r, in_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", COLD_CODE],
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, in_r, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
            ],
        )
    finally:
        os.close(in_r)
        os.close(out_w)
    return _answer(pid, in_w, out_r, payload, start=start, label="cold")


def fork_round_trip(payload: bytes) -> float:
    """A bare fork of this warm process: the child reads JSON from a pipe, writes JSON, exits."""
    start = time.perf_counter()
    in_r, in_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: nothing but the work, then out without any cleanup
        code = 1
        try:
            os.close(in_w)
            os.close(out_r)
            data = json.loads(_read_all(in_r))
            answer = {"advise": data["hook"]["name"] + " saw " + data["hook"]["on"]}
            os.write(out_w, json.dumps(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(in_r)
    os.close(out_w)
    return _answer(pid, in_w, out_r, payload, start=start, label="fork")


def _answer(pid: int, in_w: int, out_r: int, payload: bytes, *, start: float, label: str) -> float:
    """Writes the input, reads the answer, reaps `pid`; seconds since `start`."""
    try:
        os.write(in_w, payload)  # well under a pipe's buffer: never blocks
    finally:
        os.close(in_w)
    try:
        out = _read_all(out_r)
    finally:
        os.close(out_r)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    _check(label, out, status)
    return elapsed


async def _sync(fn: functools.partial[float]) -> float:
    return fn()


async def measure(
    directory: str, profiles: list[Profile], rounds: int, per_round: int
) -> tuple[dict[str, list[float]], dict[Profile, str], str]:
    async with open_spawner() as spawner:
        runnable, skipped = enforceable(profiles, spawner)
        hooks = {f"hook_{profile}": module_hook(directory, profile) for profile in runnable}
        if not hooks:
            raise Broken(f"no profile can run here: {skipped}")
        payload = json.dumps(hook_input(next(iter(hooks.values())), Effect.ADVISE, CTX)).encode()
        samplers = {name: functools.partial(hook_sample, spawner, h) for name, h in hooks.items()}
        samplers["cold"] = functools.partial(_sync, functools.partial(cold_round_trip, payload))
        samplers["fork"] = functools.partial(_sync, functools.partial(fork_round_trip, payload))
        samples = await interleaved(samplers, rounds, per_round)
        return samples, skipped, spawner.mode


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--profiles", default="none,strict")
    args = parse_args(parser, rounds=1, per_round=2)
    profiles = [Profile(p) for p in args.profiles.split(",") if p]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mcpx-bench-") as tmp:
        # Readable by a strict hook's per-child uid (the host's DAC applies to it).
        os.chmod(tmp, 0o755)
        (Path(tmp) / HOOK_FILE).write_text(HOOK_SOURCE)
        try:
            samples, skipped, mode = trio.run(measure, tmp, profiles, args.rounds, args.per_round)
        except Broken as exc:
            print(f"module_hook: cannot measure: {exc}", file=sys.stderr)
            return 1
    ms = {name: [v * 1e3 for v in values] for name, values in samples.items()}
    p50 = {name: percentile(v, 50) for name, v in ms.items()}
    p95 = {name: percentile(v, 95) for name, v in ms.items()}
    print(f"{len(ms['cold'])} samples each (spawner mode {mode}), p50 / p95:")
    _line("baseline  cold python -I -S, JSON in and out", "cold", p50, p95)
    _line("baseline  fork of this warm process, JSON in and out", "fork", p50, p95)
    _line("context   posix_spawn+waitpid /bin/true", "bare", p50, p95)
    results = []
    for profile in profiles:
        if profile in skipped:
            print(f"  module hook, profile {profile}: skipped: {skipped[profile]}")
            continue
        name = f"hook_{profile}"
        speedup = p50["cold"] / p50[name]
        _line(f"module hook round trip, profile {profile}", name, p50, p95)
        print(
            f"    {speedup:5.2f}x faster than cold, "
            f"{p50[name] / p50['fork']:5.2f}x the warm fork; p50 goal <= {GOAL_P50_MS:g} ms"
        )
        results.append(
            result(
                f"module_hook_{profile}_p50",
                p50[name],
                p50["fork"],
                p50[name] / p50["fork"],
                GOAL_P50_MS,
                direction="abs",
                unit="ms",
            )
        )
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))
    return 0


def _line(label: str, name: str, p50: Mapping[str, float], p95: Mapping[str, float]) -> None:
    print(f"  {label}: {p50[name]:8.3f} / {p95[name]:8.3f} ms")


if __name__ == "__main__":
    sys.exit(main())
