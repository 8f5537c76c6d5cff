"""`make bench`: runs every benchmark under bench/ and prints one table.

    .venv/bin/python bench/run_all.py [--quick] [NAME ...]
        (default: every bench/*.py not starting with _)

Each benchmark prints, besides its own report, lines of the form

    RESULT <figure> <value> <baseline> <ratio> <goal> [le|ge|abs] [unit]

value and baseline in the same unit, measured in the same run. The direction says what passes:
* `le` (the default): ratio <= goal, ratio = value / baseline (a time against a bare one);
* `ge`: ratio >= goal, where a larger ratio is better (a throughput over the baseline's, or a
  speed-up, baseline / value: each script's docstring says which);
* `abs`: value <= goal, the goal being in the value's own unit (an absolute bound such as
  "<= 3 ms p50"); the baseline and ratio are printed for context only.
`unit`, when given, is printed after the value, the baseline and an `abs` goal. This script
collects the lines. A benchmark that exits non-zero, prints no RESULT line, or runs past `BOUND`
gets a FAILED row (its RESULT lines, if any, are kept), and this script exits 1.

Each script runs with `XDG_STATE_HOME` set to a temporary directory unless it is set already:
the runs a benchmark makes are recorded to a run history as a user's are, but not to the user's.

`--quick` (what `make test` runs, through tests/test_bench_quick.py): each script once with
`MCPX_BENCH_QUICK=1` in its environment, bounded to `QUICK_BOUND`, at the smallest size that
still takes every code path and prints every RESULT line (bench/_quick.py says how a script
honours it: `parse_args(parser, dest=value, ...)` for its quick sizes, `missing(why)` for a
part it needs that is not there). The table has no verdict: a quick run's figures mean
nothing. It exits 1 only when a script fails, prints neither a RESULT nor a `SKIP` line, or
runs past the bound; a script that printed `SKIP <why>` (a part missing: a program, root)
gets a skipped row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import QUICK_ENV

HERE = Path(__file__).resolve().parent
#: Per-benchmark wall-clock bound, seconds.
BOUND = 600
#: The same in quick mode.
QUICK_BOUND = 60
DIRECTIONS = ("le", "ge", "abs")

Row = tuple[str, str, str, str, str, str]
Completed = subprocess.CompletedProcess[str]


def result_row(fields: list[str]) -> Row:
    """One table row from the fields of a RESULT line (after `RESULT`)."""
    figure, value, baseline, ratio, goal, *rest = fields
    direction = rest[0] if rest and rest[0] in DIRECTIONS else "le"
    unit = rest[-1] if rest and rest[-1] not in DIRECTIONS else ""
    suffix = f" {unit}" if unit else ""
    if direction == "abs":
        ok = float(value) <= float(goal)
        bound = f"<= {goal}{suffix}"
    elif direction == "ge":
        ok = float(ratio) >= float(goal)
        bound = f">= {goal}x"
    else:
        ok = float(ratio) <= float(goal)
        bound = f"<= {goal}x"
    return (
        figure,
        value + suffix,
        baseline + suffix,
        f"{float(ratio):.2f}x",
        bound,
        "pass" if ok else "FAIL",
    )


def run(script: Path, bound: float, env: dict[str, str] | None) -> Completed | None:
    """Runs `script` in a session of its own; None if it ran past `bound` seconds (then it and
    whatever it started in its session are killed)."""
    with subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def main(args: list[str]) -> int:
    # The runs a benchmark makes are recorded as a user's are (the history is on by default),
    # into a state directory of this run's own, not the user's history.
    with tempfile.TemporaryDirectory(prefix="mcpx-bench-state-") as state:
        return run_all(args, {"XDG_STATE_HOME": state, **os.environ})


def run_all(args: list[str], environ: dict[str, str]) -> int:
    quick = "--quick" in args
    names = [name for name in args if name != "--quick"]
    bound = QUICK_BOUND if quick else BOUND
    env = {**environ, QUICK_ENV: "1"} if quick else environ
    rows: list[Row] = []
    failed = False
    for script in sorted(HERE.glob("*.py")):
        if script.name == Path(__file__).name or script.name.startswith("_"):
            continue
        if names and script.stem not in names and script.name not in names:
            continue
        print(f"== {script.name}", flush=True)
        started = time.monotonic()
        proc = run(script, bound, env)
        if proc is None:
            rows.append((script.stem, "-", "-", "-", "-", f"TIMEOUT after {bound} s"))
            failed = True
            continue
        print(proc.stdout, end="")
        results = [line.split() for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        for fields in results:
            try:
                row = result_row(fields[1:])
            except (ValueError, IndexError):
                row = (fields[1] if len(fields) > 1 else script.stem, "-", "-", "-", "-", "BAD")
                failed = True
            rows.append((*row[:5], "") if quick and row[5] != "BAD" else row)
        skips = [line[5:] for line in proc.stdout.splitlines() if line.startswith("SKIP ")]
        if quick and proc.returncode == 0 and skips and not results:
            rows.append((script.stem, "-", "-", "-", "-", f"skipped: {skips[0]}"))
        elif proc.returncode != 0 or not results:
            print(proc.stderr[-2000:], file=sys.stderr)
            why = f"FAILED (exit {proc.returncode})" + (f": SKIP {skips[0]}" if skips else "")
            rows.append((script.stem, "-", "-", "-", "-", why))
            failed = True
        print(f"   ({time.monotonic() - started:.0f} s)\n", flush=True)
    head = ("figure", "value", "baseline", "ratio", "goal", "")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if quick:
        print("(quick mode: a few samples each, no verdict)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
