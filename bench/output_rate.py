"""Output at pipe speed: a script's short lines through `exec --json`, against a naive streamer.

    .venv/bin/python bench/output_rate.py [--lines 400000] [--repeat 3] [--no-serve]

The script (`sys.executable -c ...`) writes `--lines` lines of 24 bytes at once. Three
readers of it, each timed from its start to its last byte read by this process through a
pipe (the consumer), `--repeat` times in alternating order, medians reported:

- the peer, a naive streamer written here (`NAIVE`): `subprocess.Popen`, one `json.dumps`
  per line with a timestamp, written to stdout; what a user could write in fifteen lines;
- `mcpx-hooks exec --json -- <script>` (sandbox `none`, no config found but ours, its
  `[runs] runBytes` raised so that every line is kept and printed), whose resident size at
  its peak is read too (`os.wait4`, `ru_maxrss`);
- `mcpx-hooks exec -- <script>`, the readable view a person reads on a terminal (each line
  of output `| text`), the same way;
- with `--serve`, `mcpx-hooks exec --remote URL -- <script>` against the served supervisor
  below: the readable view of a run on a server, printed by our own WebSocket client;
- with `--serve` (the default), a WebSocket follower of the same script run by a `serve`d
  supervisor (`/v1/exec`), timed from its request to the `end` frame.

RESULT `output_exec_json`: lines/s of `exec --json` over the naive streamer's (`ge`, the
values are lines/s); goal 3. RESULT `output_exec_json_rss`: the peak RSS of `exec --json`
(`abs`, MB; the baseline is the naive streamer's); goal 120. RESULT `output_serve_follower`:
lines/s of the WebSocket follower over the naive streamer's (`ge`); goal 2. RESULT
`output_exec_readable`: lines/s of the readable `exec` over the naive streamer's (`ge`); goal
2, as for the follower: what a person reads live. RESULT `output_exec_remote`: the same for
`exec --remote` (`ge`); goal 2.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--lines 2000 --repeat 1`: every
reader once, on few lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import parse_args
from _timing import start_serve

GOAL_EXEC = 3.0
GOAL_RSS_MB = 120.0
GOAL_SERVE = 2.0
GOAL_READABLE = 2.0
GOAL_REMOTE = 2.0
CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
CONFIG = (
    '[defaults]\nsandbox = "none"\n\n[script]\nsandbox = "none"\n\n'
    '[service]\nsandboxes = ["none"]\n\n[runs]\nrunBytes = 4294967296\n'
)
#: The peer: fifteen lines of Python a user could write instead.
NAIVE = """\
import datetime, json, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
out = sys.stdout
seq = 0
for raw in proc.stdout:
    frame = {
        "type": "stdout",
        "seq": seq,
        "at": datetime.datetime.now(datetime.UTC).isoformat(),
        "text": raw.rstrip(b"\\n").decode(errors="replace"),
    }
    out.write(json.dumps(frame) + "\\n")
    seq += 1
proc.wait()
out.flush()
"""


def script(lines: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        f"import sys; sys.stdout.write('line of output number x\\n' * {lines})",
    ]


def consume(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, int]:
    """Runs `argv`, reading its stdout to the end; (seconds, lines read, peak RSS bytes)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    count = 0
    fd = proc.stdout.fileno()
    while chunk := os.read(fd, 1 << 20):
        count += chunk.count(b"\n")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited {proc.returncode}")
    return elapsed, count, usage.ru_maxrss * 1024


async def follow(url: str, argv: list[str]) -> tuple[float, int]:
    """Runs `argv` on the server, reading its frames to the end; (seconds, stdout frames)."""
    from websockets.asyncio.client import connect

    start = time.perf_counter()
    count = 0
    async with connect(url + "/v1/exec", max_size=None, compression=None) as ws:
        await ws.send(json.dumps({"argv": argv}))
        async for message in ws:
            assert isinstance(message, str)
            count += message.count('"type":"stdout"')
    return time.perf_counter() - start, count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-serve", dest="serve", action="store_false")
    args = parse_args(parser, lines=2000, repeat=1)
    child = script(args.lines)
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    naive: list[float] = []
    ours: list[float] = []
    peaks: list[int] = []
    naive_peaks: list[int] = []
    served: list[float] = []
    readable: list[float] = []
    remote: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "c.toml").write_text(CONFIG)
        (cwd / "naive.py").write_text(NAIVE)
        server = start_serve(cwd, env) if args.serve else None
        try:
            if server is not None:
                asyncio.run(follow(server[1], [sys.executable, "-c", "pass"]))  # warm
            for r in range(args.repeat):
                sides = ["naive", "exec", "readable", "serve", "remote"]
                sides = sides if server is not None else sides[:3]
                for side in sides if r % 2 == 0 else sides[::-1]:
                    if side == "naive":
                        took, count, peak = consume([sys.executable, "naive.py", *child], cwd, env)
                        assert count == args.lines, count
                        naive.append(took)
                        naive_peaks.append(peak)
                    elif side == "exec":
                        argv = [*CLI, "exec", "--json", "--config", "c.toml", "--", *child]
                        took, count, peak = consume(argv, cwd, env)
                        assert count >= args.lines, count
                        ours.append(took)
                        peaks.append(peak)
                    elif side == "readable":
                        argv = [*CLI, "exec", "--config", "c.toml", "--", *child]
                        took, count, _ = consume(argv, cwd, env)
                        assert count >= args.lines, count
                        readable.append(took)
                    elif side == "remote":
                        assert server is not None
                        url = ["--remote", server[1], "--sandbox", "none"]
                        took, count, _ = consume([*CLI, "exec", *url, "--", *child], cwd, env)
                        assert count >= args.lines, count
                        remote.append(took)
                    else:
                        assert server is not None
                        took, count = asyncio.run(follow(server[1], child))
                        assert count == args.lines, count
                        served.append(took)
        finally:
            if server is not None:
                server[0].terminate()
                server[0].wait(timeout=60)
    rate = args.lines / statistics.median(naive)
    exec_rate = args.lines / statistics.median(ours)
    peak_mb = statistics.median(peaks) / 1e6
    naive_mb = statistics.median(naive_peaks) / 1e6
    print(f"{args.lines:,} lines, medians of {args.repeat}:")
    print(f"  naive streamer    {statistics.median(naive):7.2f} s  {rate:>10,.0f} lines/s  "
          f"peak RSS {naive_mb:6.1f} MB")  # fmt: skip
    print(f"  exec --json       {statistics.median(ours):7.2f} s  {exec_rate:>10,.0f} lines/s  "
          f"peak RSS {peak_mb:6.1f} MB  {exec_rate / rate:.2f}x")  # fmt: skip
    readable_rate = args.lines / statistics.median(readable)
    print(f"  exec (readable)   {statistics.median(readable):7.2f} s  {readable_rate:>10,.0f} "
          f"lines/s  {readable_rate / rate:.2f}x")  # fmt: skip
    if remote:
        remote_rate = args.lines / statistics.median(remote)
        print(f"  exec --remote     {statistics.median(remote):7.2f} s  {remote_rate:>10,.0f} "
              f"lines/s  {remote_rate / rate:.2f}x")  # fmt: skip
    if served:
        serve_rate = args.lines / statistics.median(served)
        print(f"  serve follower    {statistics.median(served):7.2f} s  {serve_rate:>10,.0f} "
              f"lines/s  {serve_rate / rate:.2f}x")  # fmt: skip
    print(
        f"RESULT output_exec_json {exec_rate:.0f} {rate:.0f} {exec_rate / rate:.3f} "
        f"{GOAL_EXEC:g} ge lines/s"
    )
    print(f"RESULT output_exec_json_rss {peak_mb:.1f} {naive_mb:.1f} {peak_mb / naive_mb:.2f} "
          f"{GOAL_RSS_MB:g} abs MB")  # fmt: skip
    print(
        f"RESULT output_exec_readable {readable_rate:.0f} {rate:.0f} {readable_rate / rate:.3f} "
        f"{GOAL_READABLE:g} ge lines/s"
    )
    if remote:
        print(
            f"RESULT output_exec_remote {remote_rate:.0f} {rate:.0f} {remote_rate / rate:.3f} "
            f"{GOAL_REMOTE:g} ge lines/s"
        )
    if served:
        print(
            f"RESULT output_serve_follower {serve_rate:.0f} {rate:.0f} {serve_rate / rate:.3f} "
            f"{GOAL_SERVE:g} ge lines/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
