"""The run history's cost: one run's output through `exec --json` recording to the history on
disk, against the same run with `[history] enabled = false`, and what the history holds per
line sent.

    .venv/bin/python bench/history.py [--lines 200000] [--repeat 5]

The script (`sys.executable -c ...`) writes `--lines` lines of 24 bytes at once; `exec --json`
(sandbox `none`, its `[runs] runBytes` raised so that every line is kept) prints every frame,
and this process reads them through a pipe. Each `exec` is timed from its start to its exit
(so the recording one includes writing what is still queued when its run ends), `--repeat`
times each way in alternating order, each recording one on a fresh database; medians reported.

RESULT `history_frames_rate`: the recording run's time over the one without a history (`le`;
frames per second without it over with it); goal 1.15. RESULT `history_bytes_per_line`: the
database's bytes (after the writer closed it) over the bytes of the lines `exec --json`
printed, newlines not counted (`le`); goal 1.2.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--lines 2000 --repeat 1`.
"""

from __future__ import annotations

import argparse
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


def one(work: Path, argv: list[str], history: Path | None) -> tuple[float, int, int]:
    """One `exec --json`: its seconds, the bytes of the lines it printed, the lines."""
    config = work / "c.toml"
    tail = "enabled = false\n" if history is None else f'path = "{history}"\n'
    config.write_text(CONFIG + tail)
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(work / "state")}
    started = time.perf_counter()
    done = subprocess.run(
        [*CLI, "exec", "--config", str(config), "--json", "--", *argv],
        cwd=work, env=env, capture_output=True, check=False,
    )  # fmt: skip
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"exec failed: {done.stderr.decode(errors='replace')}")
    lines = done.stdout.count(b"\n")
    return took, len(done.stdout) - lines, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parse_args(parser, lines=2000, repeat=1)
    argv = script(args.lines)
    off: list[float] = []
    on: list[float] = []
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mcpx-bench-history-") as tmp:
        work = Path(tmp)
        for round_ in range(args.repeat):
            for recording in (round_ % 2 == 0, round_ % 2 != 0):
                if not recording:
                    off.append(one(work, argv, None)[0])
                    continue
                db = work / f"h{round_}" / "history.db"
                took, line_bytes, lines = one(work, argv, db)
                on.append(took)
                stored = sum(p.stat().st_size for p in db.parent.iterdir() if p.is_file())
                ratios.append(stored / line_bytes)
                print(f"recording: {lines} lines, {line_bytes} bytes sent, {stored} stored")
    rate_off, rate_on = args.lines / statistics.median(off), args.lines / statistics.median(on)
    print(f"without a history: {rate_off:,.0f} lines/s; recording: {rate_on:,.0f} lines/s")
    print(
        result(
            "history_frames_rate",
            statistics.median(on),
            statistics.median(off),
            rate_off / rate_on,
            GOAL_RATE,
            unit="s",
        )
    )
    size = statistics.median(ratios)
    print(result("history_bytes_per_line", size, 1.0, size, GOAL_BYTES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
