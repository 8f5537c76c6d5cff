"""Where the CPU of a follower through NATS goes: `cluster.py`'s follower figure, with the CPU
seconds each part spent on each run, for `docs/internals/bench.md`. Not a figure of `make
bench` (its name starts with `_`): a tool to read before cutting anything.

    .venv/bin/python bench/_cluster_split.py [-n 5] [--lines 200000]
    .venv/bin/python bench/_cluster_split.py --sleep-runs 192 [-n 3]

Parts as in `cluster.py`: nats-server, a plain `serve`, gateways A and B and one worker. Each
round follows a run of `--lines` lines live on the plain `serve`, then one started on
gateway A and followed on gateway B; around each, every part's CPU time (user + system,
psutil) and, in the gateways and the worker, each thread's: the Trio thread (`:trio`), the
NATS client's (`:nats`) and Trio's worker threads (`:threads`: the run history's writer,
storing and indexing what the run sends). Until 2026-12-05 `:nats` counted the last two
together. "client" is this process (both sockets' reading). `NAME:kfaults`: the part's minor
page faults, in thousands. Prints each round, then the medians.

With `--sleep-runs N`: the two-workers figure instead, its CPU a run. Each round, N runs of
`sh -c "sleep 0.2"` (and 16 to warm up), 16 clients at a time, through gateway A with two
workers of 8 slots; each part's CPU milliseconds over the round, divided by its runs (the
workers' added up: together they ran each run once). Gateway B and the plain `serve` take no
run but are counted: a gateway records every run of the cluster in its own history.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

import psutil
from cluster import follower_frames_per_s, quiet, runs_per_s, started_parts

#: The parts whose threads are told apart.
THREADED = ("gwA", "gwB", "worker")


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def _faults(proc: psutil.Process) -> int:
    """Its minor page faults so far (each a page copied or zero-filled on first touch)."""
    with open(f"/proc/{proc.pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def _threads(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def _named_as_process(pid: int, tid: int) -> bool:
    """Whether thread `tid` has its process's own name: the NATS client's thread does
    (Python names no thread for the system); Trio's worker threads (the run history's
    writer among them) name themselves."""
    try:
        with open(f"/proc/{pid}/comm") as main, open(f"/proc/{pid}/task/{tid}/comm") as it:
            return main.read() == it.read()
    except OSError:
        return False


def _measure(
    parts: dict[str, psutil.Process], follow: Any, threaded: tuple[str, ...] = THREADED
) -> tuple[float, dict[str, float]]:
    me = psutil.Process()
    before = {name: _cpu(proc) for name, proc in parts.items()}
    faulted = {name: _faults(proc) for name, proc in parts.items()}
    mine = _cpu(me)
    threads = {name: _threads(parts[name]) for name in threaded}
    rate = asyncio.run(follow)
    spent = {name: _cpu(proc) - before[name] for name, proc in parts.items()}
    spent["client"] = _cpu(me) - mine
    for name, proc in parts.items():
        spent[f"{name}:kfaults"] = (_faults(proc) - faulted[name]) / 1000
    for name in threaded:
        # The main thread (its id is the process's) runs Trio; the others, the NATS client.
        now = _threads(parts[name])
        main = parts[name].pid
        spent[f"{name}:trio"] = now[main] - threads[name].get(main, 0.0)
        others = {t: v - threads[name].get(t, 0.0) for t, v in now.items() if t != main}
        nats = [t for t in others if _named_as_process(main, t)]
        spent[f"{name}:nats"] = sum(others[t] for t in nats)
        spent[f"{name}:threads"] = sum(others.values()) - spent[f"{name}:nats"]
    return rate, spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--sleep-runs", type=int, default=0)
    args = ap.parse_args()
    if args.sleep_runs:
        sleep_runs(args.n, args.sleep_runs)
        return
    rows: dict[str, list[tuple[float, dict[str, float]]]] = {"plain": [], "nats": []}
    with started_parts() as started:
        worker = started.start(["worker", *started.flags], "taking runs")
        nats, plain, gw_a, gw_b = started.procs[:4]
        named = {"nats": nats, "plain": plain, "gwA": gw_a, "gwB": gw_b, "worker": worker}
        parts = {name: psutil.Process(proc.pid) for name, proc in named.items()}
        plain_url, a_url, b_url = started.plain_url, started.a_url, started.b_url
        for _ in range(args.n):
            for kind, urls in (("plain", (plain_url, plain_url)), ("nats", (a_url, b_url))):
                asyncio.run(quiet(started.procs))  # (as `cluster.py` takes each figure)
                got = _measure(parts, follower_frames_per_s(*urls, args.lines))
                rows[kind].append(got)
                print(kind, _line(*got), flush=True)
    print(f"medians of {args.n}, CPU seconds a run of {args.lines} lines:")
    for kind, got in rows.items():
        rate = statistics.median(r for r, _ in got)
        spent = {k: statistics.median(s[k] for _, s in got) for k in got[0][1]}
        print(f"  {kind:<6}", _line(rate, spent))


def sleep_runs(rounds: int, runs: int) -> None:
    """CPU milliseconds a 200 ms run, each part, two workers of 8 slots (module docstring)."""
    got: list[tuple[float, dict[str, float]]] = []
    sleeper = ["sh", "-c", "sleep 0.2"]
    with started_parts() as started:
        w1, w2 = (
            started.start(["worker", *started.flags, "--concurrency", "8"], "taking runs")
            for _ in range(2)
        )
        nats, plain, gw_a, gw_b = started.procs[:4]
        named = {"nats": nats, "plain": plain, "gwA": gw_a, "gwB": gw_b, "w1": w1, "w2": w2}
        parts = {name: psutil.Process(proc.pid) for name, proc in named.items()}
        for _ in range(rounds):
            asyncio.run(quiet(started.procs))
            run = runs_per_s(started.a_url, sleeper, runs, 16)
            rate, spent = _measure(parts, run, ("gwA", "gwB", "w1", "w2"))
            per_run = {k: v * 1000 / (runs + 16) for k, v in spent.items()}
            per_run["workers"] = per_run["w1"] + per_run["w2"]
            got.append((rate, per_run))
            print(_line(rate, per_run, "runs/s"), flush=True)
    rate = statistics.median(r for r, _ in got)
    spent = {k: statistics.median(s[k] for _, s in got) for k in got[0][1]}
    print(f"medians of {rounds}, CPU ms a run:\n  {_line(rate, spent, 'runs/s')}")


def _line(rate: float, spent: dict[str, float], unit: str = "frames/s") -> str:
    shown = " ".join(f"{k}={v:.3f}" for k, v in spent.items() if v >= 0.005 or ":" not in k)
    return f"{rate:10.0f} {unit}  {shown}"


if __name__ == "__main__":
    main()
