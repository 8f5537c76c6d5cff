"""`make bench`: runs every benchmark under bench/ and prints one table.

Each benchmark prints, besides its own report, lines of the form
`RESULT <figure> <value> <baseline> <ratio> <goal> [le|ge]` (value and baseline in the same
unit, measured in the same run; ratio = value / baseline; `le` (the default): pass when
ratio <= goal, as for times; `ge`: pass when ratio >= goal, as for throughput). This script
collects them. A benchmark that fails or prints no RESULT line is reported as such.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Per-benchmark wall-clock bound, seconds.
BOUND = 600


def main() -> int:
    rows: list[tuple[str, str, str, str, str, str]] = []
    failed = False
    for script in sorted(HERE.glob("*.py")):
        if script.name == Path(__file__).name or script.name.startswith("_"):
            continue
        print(f"== {script.name}", flush=True)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, str(script)],
                check=False,
                capture_output=True,
                text=True,
                timeout=BOUND,
            )
        except subprocess.TimeoutExpired:
            rows.append((script.stem, "-", "-", "-", "-", f"TIMEOUT after {BOUND} s"))
            failed = True
            continue
        print(proc.stdout, end="")
        results = [line.split() for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not results:
            print(proc.stderr[-2000:], file=sys.stderr)
            rows.append((script.stem, "-", "-", "-", "-", f"FAILED (exit {proc.returncode})"))
            failed = True
            continue
        for _, figure, value, baseline, ratio, goal, *direction in results:
            at_least = direction == ["ge"]
            ok = float(ratio) >= float(goal) if at_least else float(ratio) <= float(goal)
            bound = f"{'>=' if at_least else '<='} {goal}x"
            rows.append(
                (figure, value, baseline, f"{float(ratio):.2f}x", bound, "pass" if ok else "FAIL")
            )
        print(f"   ({time.monotonic() - started:.0f} s)\n", flush=True)
    head = ("figure", "value", "baseline", "ratio", "goal", "")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
