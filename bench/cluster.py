"""The cluster against a single `serve`, in the same run, on loopback.

    .venv/bin/python bench/cluster.py [--runs 60] [--clients 8] [--lines 20000] [--bound 300]

Parts: a real `nats-server -js` (Debian's package), one plain `mcpx-hooks serve`, two
gateways (`serve --cluster`) and workers (`worker --cluster`), all subprocesses here.

- runs/s: `--runs` runs of `true`, `--clients` at a time, each on its own `/v1/exec` socket
  to the end frame: through the plain `serve` (the baseline), then through gateway A with 1
  worker and with 2 workers (every run checked to end with `result` and `end`);
- follower frames/s: a run printing `--lines` lines started on gateway A while a follower
  on gateway B (`/v1/runs/{id}?from=0`) reads it to its end: frames over the time from the
  follower's first frame to its last. The baseline is the same follower on the plain
  `serve`'s own run.

The goals are what a second process hop and NATS cost on a 2-core machine shared by every
part: >= 0.25x the plain runs/s with one worker and with two, >= 0.2x the plain follower's
frames/s. RESULT lines for `make bench` (`ge`: bigger is better).

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--runs 4 --clients 2 --lines 200`:
every part started, each figure taken once. Without nats-server it prints `SKIP`
(bench/_quick.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _quick import missing, parse_args
from websockets.asyncio.client import connect

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ENV = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(args: list[str], cwd: Path, needle: str) -> tuple[subprocess.Popen[str], str]:
    log = (cwd / f"{len(list(cwd.glob('*.log')))}.log").open("w")
    proc = subprocess.Popen(
        [*CLI, *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=log, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert needle in line, line
    return proc, line


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


async def runs_per_s(url: str, runs: int, clients: int) -> float:
    slots = asyncio.Semaphore(clients)

    async def bounded() -> None:
        async with slots:
            await one_run(url, ["true"])

    await one_run(url, ["true"])  # warm
    began = time.perf_counter()
    await asyncio.gather(*(bounded() for _ in range(runs)))
    return runs / (time.perf_counter() - began)


async def follower_frames_per_s(start_url: str, follow_url: str, lines: int) -> float:
    async with connect(start_url + "/v1/exec", max_size=None, proxy=None) as ws:
        await ws.send(json.dumps({"argv": ["seq", "1", str(lines)]}))
        first = json.loads(str(await ws.recv()).split("\n")[0])
        run_id = first["runId"]
        got, began = 0, 0.0
        path = f"/v1/runs/{run_id}?from=0"
        async with connect(follow_url + path, max_size=None, proxy=None) as follower:
            async for message in follower:
                if not began:
                    began = time.perf_counter()
                got += str(message).count("\n") + 1
        elapsed = time.perf_counter() - began
        async for _ in ws:
            pass
    assert got >= lines + 3, got
    return got / elapsed


def result(figure: str, value: float, baseline: float, goal: float, unit: str) -> None:
    print(f"RESULT {figure} {value:.1f} {baseline:.1f} {value / baseline:.3f} {goal} ge {unit}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--bound", type=float, default=300)
    args = parse_args(ap, runs=4, clients=2, lines=200)
    procs: list[subprocess.Popen[Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        try:
            nats, url = start_nats(cwd)
            procs.append(nats)
            plain, plain_url = serve(cwd)
            # NATS on loopback without users (--nats-insecure), the requests signed as ever.
            part = ["--cluster", url, "--nats-insecure", "--cluster-key-file", key_file(cwd)]
            gw_a, a_url = serve(cwd, *part)
            gw_b, b_url = serve(cwd, *part)
            procs += [plain, gw_a, gw_b]
            worker, _ = start(["worker", *part], cwd, "taking runs")
            procs.append(worker)

            async def measure() -> dict[str, float]:
                got = {"plain": await runs_per_s(plain_url, args.runs, args.clients)}
                got["one"] = await runs_per_s(a_url, args.runs, args.clients)
                second, _ = start(["worker", *part], cwd, "taking runs")
                procs.append(second)
                got["two"] = await runs_per_s(a_url, args.runs, args.clients)
                got["plain_follow"] = await follower_frames_per_s(plain_url, plain_url, args.lines)
                got["follow"] = await follower_frames_per_s(a_url, b_url, args.lines)
                return got

            got = asyncio.run(asyncio.wait_for(measure(), args.bound))
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=60)
                if proc.stdout is not None:
                    proc.stdout.close()
    print(f"runs/s of `true`, {args.clients} clients at a time, {args.runs} runs:")
    print(f"  plain serve        {got['plain']:8.1f}")
    print(f"  gateway, 1 worker  {got['one']:8.1f}  ({got['one'] / got['plain']:.2f}x)")
    print(f"  gateway, 2 workers {got['two']:8.1f}  ({got['two'] / got['plain']:.2f}x)")
    print(f"follower frames/s, a run of {args.lines} lines:")
    print(f"  on the plain serve          {got['plain_follow']:10.0f}")
    ratio = got["follow"] / got["plain_follow"]
    print(f"  on another gateway (NATS)   {got['follow']:10.0f}  ({ratio:.2f}x)")
    result("cluster_runs_per_s_1_worker", got["one"], got["plain"], 0.25, "runs/s")
    result("cluster_runs_per_s_2_workers", got["two"], got["plain"], 0.25, "runs/s")
    result("cluster_follower_frames_per_s", got["follow"], got["plain_follow"], 0.2, "frames/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
