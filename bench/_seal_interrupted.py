"""Sealing a run whose supervisor was killed: the time and peak RSS of `seal_interrupted` in a
fresh process, on a history holding one run of `--lines` output lines whose owner is gone (as
a SIGKILLed `exec` leaves it).

    .venv/bin/python bench/_seal_interrupted.py [--lines 400000] [--tries 2]

The history is made once in a temporary directory and copied fresh for each try; each try
seals the copy in a new process and prints its seconds and its peak RSS before and after
(`getrusage`). A measuring aid, not a row of `make bench` (no goal): run it in two checkouts,
alternating, to compare them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Output lines written a transaction, as a recorder writes a long run in batches.
BATCH = 10_000

MAKE = """
import subprocess, sys
from pathlib import Path
from mcpx_hooks.supervisor.core.frames import OutputFrame, StartFrame, blank
from mcpx_hooks.supervisor.history.store import OWNER_MARK, History, Written
from mcpx_hooks.supervisor.run.journal import RunJournal

path, count, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
owner = {OWNER_MARK + "killed": int(gone.stdout)}  # (a pid whose process has ended)
journal = RunJournal("killed", run_bytes=1 << 40)
journal.append(blank(StartFrame, argv=("job",), cwd="/", sandbox="none"))
history, held = History.open(path), 0
for first in range(0, count, batch):
    for n in range(first, min(count, first + batch)):
        journal.append(blank(OutputFrame, text=f"line of output number {n}"))
    lines = journal.lines[held:]
    history.write([Written("killed", held, lines, journal.summary(), 1.0, False)], marks=owner)
    held = len(journal.lines)
history.close()
"""

SEAL = """
import resource, sys, time
from pathlib import Path
from mcpx_hooks.supervisor.history.store import History
from mcpx_hooks.supervisor.run.interrupted import seal_interrupted

history = History.open(Path(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
started = time.perf_counter()
sealed = seal_interrupted(history)
took = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(f"sealed {sealed}: {took:.2f} s, peak RSS {before} -> {after} MB")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--lines", type=int, default=400_000)
    parser.add_argument("--tries", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        made, copy = Path(tmp, "made.db"), Path(tmp, "copy.db")
        subprocess.run(
            [sys.executable, "-c", MAKE, str(made), str(args.lines), str(BATCH)], check=True
        )
        for _ in range(args.tries):
            for stale in Path(tmp).glob("copy.db*"):
                stale.unlink()
            shutil.copyfile(made, copy)
            subprocess.run([sys.executable, "-c", SEAL, str(copy)], check=True)


if __name__ == "__main__":
    main()
