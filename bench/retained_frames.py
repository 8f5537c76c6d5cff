"""Memory of retained runs: what a run's frames cost a server while it keeps them.

    .venv/bin/python bench/retained_frames.py [--lines 2000000] [--repeat 3]

A real `mcpx-hooks serve` (sandbox `none`, so the script's own cost is not in the figure)
runs scripts that print many short lines, each becoming a `stdout` frame, and keeps the runs.
Per case, the server's resident size (psutil, `rss`) is read before the run and after its
`end` (the run still retained), and the growth is divided by the frames the run kept. Cases:

- `newlines`: `--lines` empty lines (the case of issue 11: 2,000,000 newlines, 2 MB of
  output), under the default per-run budget (`[runs] runBytes`, 64 MiB): output past the
  budget is dropped and counted, so the growth stays near the budget;
- `newlines, no budget`: the same with `runBytes` raised past what the run needs, so every
  frame is kept: the true cost of a frame;
- `lines of 1 KiB`: 20,000 lines of 1,024 bytes (20 MiB of output), default budget.

Baseline, measured in the same run: the bytes of the frames' own JSON lines (what a frame is
on the wire). The ratio, growth per retained frame over its line's bytes, says what keeping a
frame costs beyond its text. Goal (issue 11): growth under 400 MB for 2,000,000 newlines
while retained (RESULT `retained_rss_newlines`, an absolute bound in MB). Each case runs
`--repeat` times on a fresh server; the median is reported.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--lines 20000 --repeat 1`: every case
once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil
from _quick import parse_args
from _timing import start_serve
from websockets.asyncio.client import connect

GOAL_MB = 400.0
CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
#: Runs and hooks unsandboxed (the figure is the server's memory, not the sandbox's cost),
#: and the server allows it.
CONFIG = (
    '[defaults]\nsandbox = "none"\n\n[script]\nsandbox = "none"\n\n'
    '[service]\nsandboxes = ["none"]\n'
)


def start(cwd: Path, config: str) -> tuple[subprocess.Popen[str], str]:
    (cwd / "c.toml").write_text(config)
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    return start_serve(cwd, env)


async def one_run(url: str, code: str) -> tuple[int, int, int]:
    """Runs `code`; returns (frames, bytes of their lines, frames dropped per the warning)."""
    frames = size = dropped = 0
    async with connect(url + "/v1/exec", max_size=None, compression=None) as ws:
        await ws.send(json.dumps({"argv": [sys.executable, "-c", code]}))
        async for message in ws:
            assert isinstance(message, str)
            for line in message.split("\n"):
                frames += 1
                size += len(line.encode())
                if '"type":"warning"' in line and "frames (" in line:
                    dropped = int(re.search(r"(\d+) frames \(", line).group(1))  # type: ignore[union-attr]
    return frames, size, dropped


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def case(config: str, code: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(Path(tmp), config)
        try:
            asyncio.run(one_run(url, "pass"))  # warm: imports, the spawner, first buffers
            before = rss(proc.pid)
            frames, size, dropped = asyncio.run(one_run(url, code))
            after = rss(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"growth": after - before, "frames": frames, "bytes": size, "dropped": dropped}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parse_args(parser, lines=20_000, repeat=1)
    newlines = f"import sys\nsys.stdout.write('\\n' * {args.lines})\n"
    kib = "import sys\nsys.stdout.write(('x' * 1023 + '\\n') * 20000)\n"
    unbounded = CONFIG + "\n[runs]\nrunBytes = 4294967296\n"
    cases = {
        "newlines": (CONFIG, newlines),
        "newlines, no budget": (unbounded, newlines),
        "lines of 1 KiB": (CONFIG, kib),
    }
    print(f"{'case':<22} {'frames kept':>12} {'dropped':>9} {'RSS growth':>11} "
          f"{'per frame':>10} {'line':>6} {'ratio':>6}")  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    for name, (config, code) in cases.items():
        runs = [case(config, code) for _ in range(args.repeat)]
        growth = statistics.median(r["growth"] for r in runs)
        frames = statistics.median(r["frames"] for r in runs)
        line = statistics.median(r["bytes"] / r["frames"] for r in runs)
        per_frame = growth / frames
        dropped = statistics.median(r["dropped"] for r in runs)
        results[name] = {"growth": growth, "per_frame": per_frame, "line": line}
        print(
            f"{name:<22} {frames:>12,.0f} {dropped:>9,.0f} {growth / 1e6:>9.1f}MB "
            f"{per_frame:>9.0f}B {line:>5.0f}B {per_frame / line:>5.2f}x"
        )
    for name, key in (("newlines", "newlines"), ("newlines_no_budget", "newlines, no budget")):
        got = results[key]
        print(
            f"RESULT retained_rss_{name} {got['growth'] / 1e6:.1f} {args.lines / 1e6:.1f} "
            f"{got['growth'] / args.lines:.1f} {GOAL_MB:g} abs MB"
        )
    got = results["newlines, no budget"]
    print(
        f"RESULT bytes_per_retained_frame {got['per_frame']:.0f} {got['line']:.0f} "
        f"{got['per_frame'] / got['line']:.2f} 3 le B"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
