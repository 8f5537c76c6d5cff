"""The cluster against a single `serve`, in the same run, on loopback.

    .venv/bin/python bench/cluster.py [--runs 96] [--clients 16] [--sleep 0.2]
        [--true-runs 60] [--true-clients 8] [--lines 200000] [--bound 400] [--slots N]

Parts: a real `nats-server -js` (Debian's package), one plain `mcpx-hooks serve`, two
gateways (`serve --cluster`) and workers (`worker --cluster`), all subprocesses here.

- runs/s of latency-bound runs: `--runs` runs of `sh -c "sleep 0.2"`, `--clients` at a time,
  each on its own `/v1/exec` socket to the end frame (every run checked to end with
  `result` and `end`). A worker whose slots (`--concurrency`) are a quarter of the clients,
  then a second one like it: what the second worker adds (goal: >= 1.8x the runs/s of one,
  `ge`). And one worker with as many slots as there are clients, through gateway A, against
  the plain `serve` (goal: >= 0.8x). Workers with fewer slots than clients, together, are
  bound by their slots, not by the clients nor the machine: that is what lets a second one
  show what it adds on 2 cores. (With half the clients each, two workers had a slot for
  every client, and the clients' own path between runs was measured instead: `--slots 8`.)
- runs/s of `true`, `--true-clients` at a time (context, no goal): what the gateway path
  costs a run that does nothing, with one and with two workers, against the plain `serve`.
- follower frames/s: a run that sleeps 0.3 s, then prints `--lines` lines, started on
  gateway A while a follower on gateway B (`/v1/runs/{id}?from=0`, connected during the
  sleep) reads it to its end: frames over the time from the follower's first `stdout`
  frame to its `end`, against the same follower on the floor under the NATS path, in the
  same run (`floor_frames_per_s`, `_floor_follower.py`): the run's own messages published
  again by a bare nats-py publisher and carried by a bare ordered consumer to a bare
  WebSocket server, another consumer taking them in as gateway A must. Goal: >= 0.5x its
  floor. Printed beside them: the same follower, live, on the plain `serve`'s own run (the
  goal was >= 0.5x of that; docs/internals/bench.md says why it is now the floor's).

Each figure starts once every part is idle (`quiet`: at most 30 s): a part's run history
indexes a 200,000-line run for search in the second or two after it, and that work went on
into the next figure (the floor was measured while the worker and both gateways indexed the
run just followed).

RESULT lines for `make bench` (`ge`: bigger is better).

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--runs 4 --clients 2 --true-runs 4
--true-clients 2 --lines 200`: every part started, each figure taken once. Without
nats-server it prints `SKIP` (bench/_quick.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psutil
from _quick import missing, parse_args
from websockets.asyncio.client import connect

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ENV = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
FLOOR = Path(__file__).resolve().parent / "_floor_follower.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(args: list[str], cwd: Path, needle: str) -> tuple[subprocess.Popen[str], str]:
    """A part, its stderr in a log of its own; its run history in a state directory of its
    own, as on a machine of its own (one history shared by the parts made each index for
    search the runs the others wrote, while the figures were taken)."""
    n = len(list(cwd.glob("*.log")))
    log = (cwd / f"{n}.log").open("w")
    env = {**ENV, "XDG_STATE_HOME": str(state_dir(cwd, n))}
    proc = subprocess.Popen(
        [*CLI, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=log, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert needle in line, line
    return proc, line


def state_dir(cwd: Path, n: int) -> Path:
    """Part `n`'s state directory: beside `cwd`, not in it (a hook's sandbox keeps a run's
    history from it, and `cwd` is the runs' working directory); `started_parts` removes it."""
    return cwd.parent / f"{cwd.name}-state-{n}"


def start_nats(cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("nats-server")
    if binary is None:
        missing("bench/cluster.py: nats-server is not installed (apt-get install nats-server)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "-js", "-sd", str(cwd / "js"), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"nats://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.02)
    proc.kill()
    sys.exit("bench/cluster.py: nats-server did not start")


def key_file(cwd: Path) -> str:
    """The cluster key every part shares: 32 random bytes as hex, mode 600."""
    import secrets

    path = cwd / "cluster.key"
    path.write_text(secrets.token_hex(32))
    path.chmod(0o600)
    return str(path)


def serve(cwd: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc, line = start(["serve", "--port", "0", "--no-auth", *extra], cwd, "listening on")
    found = re.search(r"listening on (ws://\S+?);", line)
    assert found
    return proc, found.group(1)


async def one_run(url: str, argv: list[str]) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    async with connect(url + "/v1/exec", max_size=None, compression=None, proxy=None) as ws:
        await ws.send(json.dumps({"argv": argv}))
        async for message in ws:
            frames += [json.loads(line) for line in str(message).split("\n")]
    assert frames[-1]["type"] == "end" and frames[-2]["type"] == "result", frames[-2:]
    return frames


async def runs_per_s(url: str, argv: list[str], runs: int, clients: int) -> float:
    slots = asyncio.Semaphore(clients)

    async def bounded() -> None:
        async with slots:
            await one_run(url, argv)

    await asyncio.gather(*(one_run(url, argv) for _ in range(clients)))  # warm
    began = time.perf_counter()
    await asyncio.gather(*(bounded() for _ in range(runs)))
    return runs / (time.perf_counter() - began)


async def quiet(procs: list[subprocess.Popen[Any]], most_s: float = 30.0) -> None:
    """Waits until the parts together use less than 5% of a core over 0.3 s (at most
    `most_s`): what the figure before left them to do in the background (a run history
    indexing a 200,000-line run for search takes a core for a second or more) is not
    charged to the next figure."""
    parts = [psutil.Process(p.pid) for p in procs if p.poll() is None]

    def spent() -> float:
        total = 0.0
        for part in parts:
            with contextlib.suppress(psutil.Error):
                times = part.cpu_times()
                total += times.user + times.system
        return total

    deadline, last = time.monotonic() + most_s, spent()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        now = spent()
        if now - last < 0.05 * 0.3:
            return
        last = now


async def frames_per_s(follower: Any, lines: int) -> float:
    """Frames a follower's socket brings, over the time from its first `stdout` frame to
    its end (a run of `lines` lines: every one of them, and its `result` and `end`)."""
    got, began = 0, 0.0
    async for message in follower:
        text = str(message)
        if not began:
            batch = [json.loads(line) for line in text.split("\n")]
            output = [i for i, f in enumerate(batch) if f["type"] == "stdout"]
            if not output:
                continue
            began = time.perf_counter()
            got += len(batch) - output[0]
            continue
        got += text.count("\n") + 1
    elapsed = time.perf_counter() - began
    assert got >= lines + 2, got
    return got / elapsed


async def follower_frames_per_s(
    start_url: str, follow_url: str, lines: int, runs: list[str] | None = None
) -> float:
    """A live follower's frames/s, from its first `stdout` frame to its `end` (the run's id
    added to `runs`)."""
    argv = ["sh", "-c", f"sleep 0.3; seq 1 {lines}"]
    async with connect(start_url + "/v1/exec", max_size=None, proxy=None) as ws:
        await ws.send(json.dumps({"argv": argv}))
        first = json.loads(str(await ws.recv()).split("\n")[0])
        run_id = first["runId"]
        if runs is not None:
            runs.append(run_id)
        path = f"/v1/runs/{run_id}?from=0"
        async with connect(follow_url + path, max_size=None, proxy=None) as follower:
            rate = await frames_per_s(follower, lines)
        async for _ in ws:
            pass
    return rate


async def floor_frames_per_s(nats_url: str, run_id: str, cwd: Path, lines: int) -> float:
    """The same follower against the least the cluster must do for it (`_floor_follower.py`):
    the run's own messages (read back from the frames stream) published again by a bare
    publisher to a stream of their own, and carried by a bare ordered consumer to a bare
    WebSocket server and its follower (gateway B's part), while another takes them in
    (gateway A's: its exec socket is read only after the follower)."""
    import nats

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        subject = f"mcpx.frames.{run_id}"
        last = (await js.get_last_msg("MCPX_FRAMES", subject)).seq
        sub = await js.subscribe(subject, ordered_consumer=True)
        messages: list[tuple[bytes, dict[str, str]]] = []
        seq = 0
        while seq < last:
            msg = await sub.next_msg(timeout=30)
            seq = msg.metadata.sequence.stream
            messages.append((bytes(msg.data), dict(msg.headers or {})))
        await sub.unsubscribe()
        await js.add_stream(name="FLOOR", subjects=["floor.>"])  # file storage, as the frames
    finally:
        await nc.close()
    (cwd / "floor.pickle").write_bytes(pickle.dumps(messages))
    relay, keeper = (floor_part(role, nats_url, f"floor.{run_id}") for role in ("relay", "keep"))
    try:
        assert relay.stdout is not None and keeper.stdout is not None
        b_url = relay.stdout.readline().strip()
        assert keeper.stdout.readline().strip() == "ready"
        async with connect(b_url, max_size=None, proxy=None) as follower:
            publisher = floor_part(
                "publish", nats_url, f"floor.{run_id}", str(cwd / "floor.pickle")
            )
            rate = await frames_per_s(follower, lines)
        assert publisher.wait(timeout=60) == 0 and keeper.wait(timeout=60) == 0
    finally:
        for proc in (relay, keeper):
            if proc.poll() is None:
                stop(proc)
    return rate


def floor_part(role: str, *args: str) -> subprocess.Popen[str]:
    """A process of `_floor_follower.py` in `role`; its output read here."""
    return subprocess.Popen(
        [sys.executable, str(FLOOR), role, *args], stdout=subprocess.PIPE, text=True
    )


def result(figure: str, value: float, baseline: float, goal: float, unit: str) -> None:
    print(f"RESULT {figure} {value:.1f} {baseline:.1f} {value / baseline:.3f} {goal} ge {unit}")


def stop(proc: subprocess.Popen[Any]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()


class Parts(NamedTuple):
    """A nats-server, a plain `serve` and two gateways on it, started in `cwd`; `procs` holds
    each process `started_parts` ends, the workers `start` adds too."""

    cwd: Path
    procs: list[subprocess.Popen[Any]]
    flags: list[str]
    plain_url: str
    a_url: str
    b_url: str

    def start(self, args: list[str], needle: str) -> subprocess.Popen[str]:
        proc, _ = start(args, self.cwd, needle)
        self.procs.append(proc)
        return proc


@contextlib.contextmanager
def started_parts() -> Iterator[Parts]:
    """`Parts` in a temporary directory; each process stopped (SIGTERM) and waited for at the
    end, however the block ends."""
    procs: list[subprocess.Popen[Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        try:
            nats, url = start_nats(cwd)
            procs.append(nats)
            plain, plain_url = serve(cwd)
            procs.append(plain)
            # NATS on loopback without users (--nats-insecure), the requests signed as ever.
            flags = ["--cluster", url, "--nats-insecure", "--cluster-key-file", key_file(cwd)]
            gw_a, a_url = serve(cwd, *flags)
            procs.append(gw_a)
            gw_b, b_url = serve(cwd, *flags)
            procs.append(gw_b)
            yield Parts(cwd, procs, flags, plain_url, a_url, b_url)
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=60)
                if proc.stdout is not None and not proc.stdout.closed:
                    proc.stdout.close()
            for n in range(len(list(cwd.glob("*.log")))):
                shutil.rmtree(state_dir(cwd, n), ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=96)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--sleep", type=float, default=0.2)
    ap.add_argument("--true-runs", type=int, default=60)
    ap.add_argument("--true-clients", type=int, default=8)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--bound", type=float, default=400)
    ap.add_argument("--slots", type=int, help="each worker's in the two-workers figure")
    args = parse_args(ap, runs=4, clients=2, true_runs=4, true_clients=2, lines=200)
    args.slots = args.slots or max(1, args.clients // 4)
    sleeper = ["sh", "-c", f"sleep {args.sleep}"]
    with started_parts() as parts:
        plain_url, a_url, b_url = parts.plain_url, parts.a_url, parts.b_url

        def worker(slots: str) -> subprocess.Popen[str]:
            return parts.start(["worker", *parts.flags, "--concurrency", slots], "taking runs")

        async def idle(figure: Awaitable[float]) -> float:
            """`figure`, taken once every part is idle (`quiet`)."""
            await quiet(parts.procs)
            return await figure

        async def measure() -> dict[str, float]:
            got = {"plain": await idle(runs_per_s(plain_url, sleeper, args.runs, args.clients))}
            wide = worker(str(args.clients))
            got["wide"] = await idle(runs_per_s(a_url, sleeper, args.runs, args.clients))
            stop(wide)
            first = worker(str(args.slots))
            got["one"] = await idle(runs_per_s(a_url, sleeper, args.runs, args.clients))
            tiny = (args.true_runs, args.true_clients)
            got["true_plain"] = await idle(runs_per_s(plain_url, ["true"], *tiny))
            got["true_one"] = await idle(runs_per_s(a_url, ["true"], *tiny))
            worker(str(args.slots))
            got["two"] = await idle(runs_per_s(a_url, sleeper, args.runs, args.clients))
            got["true_two"] = await idle(runs_per_s(a_url, ["true"], *tiny))
            stop(first)
            got["plain_follow"] = await idle(
                follower_frames_per_s(plain_url, plain_url, args.lines)
            )
            runs: list[str] = []
            got["follow"] = await idle(follower_frames_per_s(a_url, b_url, args.lines, runs))
            got["floor_follow"] = await idle(
                floor_frames_per_s(parts.flags[1], runs[0], parts.cwd, args.lines)
            )
            return got

        got = asyncio.run(asyncio.wait_for(measure(), args.bound))
    report(args, got)
    return 0


def report(args: argparse.Namespace, got: dict[str, float]) -> None:
    print(f"runs/s of `sleep {args.sleep:g}`, {args.clients} clients at a time, {args.runs} runs:")
    print(f"  plain serve                      {got['plain']:8.1f}")
    wide = f"gateway, 1 worker of {args.clients} slots"
    print(f"  {wide:<32} {got['wide']:8.1f}  ({got['wide'] / got['plain']:.2f}x plain)")
    print(f"  gateway, 1 worker of {args.slots} slots    {got['one']:8.1f}")
    two = f"{got['two']:8.1f}  ({got['two'] / got['one']:.2f}x one)"
    print(f"  gateway, 2 workers of {args.slots} slots   {two}")
    print(f"runs/s of `true`, {args.true_clients} clients at a time, {args.true_runs} runs:")
    print(f"  plain serve                      {got['true_plain']:8.1f}")
    for key, name in (("true_one", "1 worker"), ("true_two", "2 workers")):
        ratio = got[key] / got["true_plain"]
        print(f"  gateway, {name:<24}{got[key]:8.1f}  ({ratio:.2f}x)")
    print(f"live follower frames/s, a run of {args.lines} lines:")
    plain, floor, follow = got["plain_follow"], got["floor_follow"], got["follow"]
    print(f"  on the plain serve          {plain:10.0f}")
    print(f"  its floor through NATS      {floor:10.0f}  ({floor / plain:.2f}x plain)")
    ratios = f"({follow / plain:.2f}x plain, {follow / floor:.2f}x its floor)"
    print(f"  on another gateway (NATS)   {follow:10.0f}  {ratios}")
    result("cluster_2_workers_vs_1_sleep_runs", got["two"], got["one"], 1.8, "runs/s")
    result("cluster_gateway_vs_serve_sleep_runs", got["wide"], got["plain"], 0.8, "runs/s")
    result("cluster_follower_frames_per_s", follow, floor, 0.5, "frames/s")


if __name__ == "__main__":
    sys.exit(main())
