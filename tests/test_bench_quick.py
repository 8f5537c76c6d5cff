"""Every benchmark under bench/ runs once in quick mode (`bench/run_all.py --quick NAME`: a few
samples, no verdict), so a benchmark that cannot run fails here rather than in `make bench`.
A script whose part is missing and cannot be installed (Chromium, nats-server, bubblewrap,
root) prints `SKIP <why>` and passes; bench/_quick.py says how a script honours quick mode."""

from __future__ import annotations

import os
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
    lines = done.stdout.splitlines()
    results = [line for line in lines if line.startswith("RESULT ")]
    skipped = [line for line in lines if line.startswith(f"{name} ") and "skipped: " in line]
    assert results or skipped, done.stdout


@pytest.mark.parametrize(("quick", "code"), [("1", 0), ("", 1)])
def test_a_missing_part_is_a_skip_in_quick_mode_and_a_failure_in_a_full_run(
    quick: str, code: int
) -> None:
    program = "import sys; sys.path.insert(0, sys.argv[1]); import _quick; _quick.missing('no x')"
    done = subprocess.run(
        [sys.executable, "-c", program, str(BENCH)],
        capture_output=True,
        text=True,
        env={**os.environ, "MCPX_BENCH_QUICK": quick},
        check=False,
    )
    assert (done.returncode, done.stdout) == (code, "SKIP no x\n")


def test_run_all_skips_a_missing_part_in_quick_mode_and_fails_it_in_a_full_run() -> None:
    """bench/cluster.py where nats-server is not on PATH: skipped in quick mode, failed else."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    for flags, code, row in (
        (["--quick"], 0, "skipped: bench/cluster.py: nats-server is not installed"),
        ([], 1, "FAILED (exit 1): SKIP bench/cluster.py: nats-server is not installed"),
    ):
        done = subprocess.run(
            [sys.executable, str(BENCH / "run_all.py"), *flags, "cluster"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == code, done.stdout + done.stderr
        assert row in done.stdout, done.stdout
