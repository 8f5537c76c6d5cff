"""Every benchmark under bench/ runs once in quick mode (`bench/run_all.py --quick NAME`: a few
samples, no verdict), so a benchmark that cannot run fails here rather than in `make bench`.
A script whose part is missing and cannot be installed (Chromium, nats-server, bubblewrap,
root) prints `SKIP <why>` and passes; bench/_quick.py says how a script honours quick mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(
    p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py"
)


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_runs_in_quick_mode(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "run_all.py"), "--quick", name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    rows = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert rows or f"{name}  " in done.stdout and "skipped: " in done.stdout, done.stdout
