"""Per-spawn cost of the spawn path, against the least a spawner of its mode can do.

    .venv/bin/python bench/spawn_overhead.py [--rounds 30] [--per-round 40] [--modes pidns,keeper]

One `run`-style child of /bin/true through the spawn path (`open_child` + `communicate` with
empty stdin, block left, tree reaped), in each spawn mode, against that mode's floor: a
request of one byte to `_floor_spawner.py`, a process that does nothing but what the mode
cannot do without (a PID namespace made ahead; a keeper forked ahead) and answer. Beside it,
both as ratios to `os.posix_spawn` + `os.waitpid` of /bin/true in this process (the bare
spawn), for context. The measurements are interleaved in rounds (each round times every
sampler, in a rotating order) so that the machine's noise falls on all of them alike; the
figures are medians over every single spawn. Goal: each mode <= 1.3x its floor. (It was
1.3x the bare spawn, which no spawner process can meet: a second process that only spawns
and answers is itself 1.3x (pidns) and 2x (keeper) the bare spawn here.) Takes under 60 s.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2`, every
mode.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import trio
from _quick import parse_args
from _timing import TRUE, Sampler, interleaved, medians, result

from mcpx_hooks.supervisor.process.spawner import (
    SPAWN_MODE_ENV,
    SPAWN_MODES,
    ChildSpec,
    Spawner,
    open_spawner,
)

GOAL = 1.3
SPEC = ChildSpec((TRUE,), "/", {})
FLOOR = Path(__file__).resolve().parent / "_floor_spawner.py"


async def path_spawn(spawner: Spawner) -> float:
    start = time.perf_counter()
    async with spawner.open_child(SPEC, kill_grace=0.5) as child:
        outcome = await child.communicate(b"", 1 << 16, 1 << 12)
    elapsed = time.perf_counter() - start
    assert outcome.exit_code == 0, outcome
    return elapsed


@contextlib.contextmanager
def floor_spawner(mode: str) -> Iterator[socket.socket]:
    """`_floor_spawner.py` in `mode`, started as the real spawner is; its request socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with theirs:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(FLOOR), str(theirs.fileno()), mode],
            pass_fds=[theirs.fileno()],
        )
    try:
        yield ours
    finally:
        ours.close()
        if proc.wait(timeout=10) != 0:
            raise SystemExit(f"the {mode} floor spawner failed (exit {proc.returncode})")


async def floor_spawn(sock: trio.socket.SocketType) -> float:
    """One request to a floor spawner: /bin/true started, waited for, answered."""
    start = time.perf_counter()
    await sock.send(b"g")
    status = await sock.recv(8)
    elapsed = time.perf_counter() - start
    assert status == bytes(4), status
    return elapsed


async def measure(
    floors: Mapping[str, socket.socket], rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Samples of each mode's spawn path and of its floor (`floors`: by mode), interleaved."""
    samplers: dict[str, Sampler] = {}
    async with contextlib.AsyncExitStack() as stack:
        for mode, floor in floors.items():
            os.environ[SPAWN_MODE_ENV] = mode
            spawner = await stack.enter_async_context(open_spawner())
            samplers[mode] = functools.partial(path_spawn, spawner)
            sock = trio.socket.from_stdlib_socket(floor)
            samplers[f"floor_{mode}"] = functools.partial(floor_spawn, sock)
        os.environ.pop(SPAWN_MODE_ENV)
        return await interleaved(samplers, rounds, per_round)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--modes", default=",".join(m for m in SPAWN_MODES if _possible(m)))
    args = parse_args(parser, rounds=1, per_round=2)
    modes = [m for m in args.modes.split(",") if m]
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        floors = {mode: stack.enter_context(floor_spawner(mode)) for mode in modes}
        samples = trio.run(measure, floors, args.rounds, args.per_round)
    figures = medians(samples)
    bare = figures["bare"]
    print(f"{len(samples['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    print(f"  bare spawn (posix_spawn+waitpid {TRUE}): {bare * 1e3:7.3f} ms")
    results = []
    for mode in modes:
        ours, floor = figures[mode], figures[f"floor_{mode}"]
        ratio = ours / floor
        print(
            f"  {mode:6}  floor {floor * 1e3:6.3f} ms ({floor / bare:4.2f}x bare);"
            f"  open_child+communicate {ours * 1e3:6.3f} ms ({ours / bare:4.2f}x bare):"
            f" {ratio:4.2f}x its floor ({'meets' if ratio <= GOAL else 'misses'} <= {GOAL}x)"
        )
        results.append(result(f"spawn_{mode}", ours * 1e3, floor * 1e3, ratio, GOAL))
    print(f"({time.perf_counter() - started:.1f} s)")
    print("\n".join(results))


def _possible(mode: str) -> bool:
    return mode != "pidns" or os.geteuid() == 0


if __name__ == "__main__":
    main()
