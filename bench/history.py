"""The run history's cost: one run's output through `exec --json` recording to the history on
disk (one database for every round, as a user has one), against the same run with
`[history] enabled = false`, and what the history grows by per line sent.

    .venv/bin/python bench/history.py [--lines 200000] [--repeat 5]

The script (`sys.executable -c ...`) writes `--lines` lines of 24 bytes at once; `exec --json`
(sandbox `none`, its `[runs] runBytes` raised so that every line is kept) prints every frame,
and this process reads them through a pipe. Each `exec` is timed from its start to its `end`
frame read (the run's frames per second), and to its exit (which, recording, includes the
writer taking what was still queued: printed for context), `--repeat` times each way in
alternating order; medians reported.

RESULT `history_frames_rate`: the recording run's time to its `end` over the one without a
history (`le`; frames per second without it over with it); goal 1.15. RESULT
`history_bytes_per_line`: what the database (and its WAL) grew by over the bytes of the lines
`exec --json` printed, newlines not counted (`le`); goal 1.2.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--lines 2000 --repeat 1`.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import parse_args
from _timing import result

GOAL_RATE = 1.15
GOAL_BYTES = 1.2
CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
CONFIG = (
    '[defaults]\nsandbox = "none"\n\n[script]\nsandbox = "none"\n\n'
    "[runs]\nrunBytes = 4294967296\n\n[history]\n"
)


def script(lines: int) -> list[str]:
    code = f"import sys\nsys.stdout.write(''.join(f'line {{i:>18}}\\n' for i in range({lines})))\n"
    return [sys.executable, "-c", code]


def one(work: Path, argv: list[str], history: Path | None) -> tuple[float, float, int, int]:
    """One `exec --json`: the seconds to its `end` frame read and to its exit, the bytes of
    the lines it printed (newlines not counted), and the lines."""
    config = work / "c.toml"
    tail = "enabled = false\n" if history is None else f'path = "{history}"\n'
    config.write_text(CONFIG + tail)
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(work / "state")}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*CLI, "exec", "--config", str(config), "--json", "--", *argv],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    size = lines = 0
    to_end = math.inf
    tail_bytes = b""
    while chunk := proc.stdout.read1(1 << 20):
        size += len(chunk)
        lines += chunk.count(b"\n")
        tail_bytes = (tail_bytes + chunk)[-400:]
        last = tail_bytes.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        if tail_bytes.endswith(b"\n") and b'"type":"end"' in last:
            to_end = time.perf_counter() - started
    if proc.wait() != 0 or to_end == math.inf:
        raise SystemExit(f"exec failed: exit {proc.returncode}")
    return to_end, time.perf_counter() - started, size - lines, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parse_args(parser, lines=2000, repeat=1)
    argv = script(args.lines)
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mcpx-bench-history-") as tmp:
        work = Path(tmp)
        db = work / "h" / "history.db"  # one history, as a user has
        for round_ in range(args.repeat):
            for recording in (round_ % 2 == 0, round_ % 2 != 0):
                if not recording:
                    off.append(one(work, argv, None)[:2])
                    continue
                before = _held(db)
                to_end, to_exit, line_bytes, lines = one(work, argv, db)
                on.append((to_end, to_exit))
                stored = _held(db) - before
                ratios.append(stored / line_bytes)
                print(f"recording: {lines} lines, {line_bytes} bytes sent, {stored} stored")
    end_off, end_on = (statistics.median(t[0] for t in runs) for runs in (off, on))
    exit_off, exit_on = (statistics.median(t[1] for t in runs) for runs in (off, on))
    print(
        f"to the end frame: {end_on:.3f} s recording, {end_off:.3f} s without"
        f" ({args.lines / end_on:,.0f} and {args.lines / end_off:,.0f} lines/s); to the exit"
        f" (the writer done): {exit_on:.3f} s and {exit_off:.3f} s ({exit_on / exit_off:.3f}x)"
    )
    print(result("history_frames_rate", end_on, end_off, end_on / end_off, GOAL_RATE, unit="s"))
    size = statistics.median(ratios)
    print(result("history_bytes_per_line", size, 1.0, size, GOAL_BYTES))
    return 0


def _held(db: Path) -> int:
    """The bytes of the database and its WAL (0 before the first run)."""
    return sum(p.stat().st_size for p in db.parent.glob("history.db*")) if db.parent.is_dir() else 0


if __name__ == "__main__":
    sys.exit(main())
