"""Tool: the supervisor's instructions per hook (or per run with 4 hooks), counted by callgrind.

    .venv/bin/python bench/_hook_instr.py [--what run|module|four] [--n 30 130] [--keep DIR]

The bench's process (the supervisor's side: `run_hook`, or a run of `run_overhead.py`'s
config through the in-process runtime) runs under `valgrind --tool=callgrind` with
`--trace-children=no`, so the spawner and the hooks run natively. It runs N1 hooks in one
process and N2 in another; what the two counts differ by, over N2 - N1, is the count per hook
with the start and the end taken out: a figure the load of a shared machine does not move,
for comparing two checkouts of the supervisor's hook path (each process records its runs to
a run history of its own, fresh, in a temporary state directory). `--keep DIR` keeps the N2 run's
callgrind file for `callgrind_annotate`. Each process takes about 20-60 s. Not a row of
`make bench`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)
HERE = Path(__file__).resolve().parent


def done() -> None:
    """Ends this process at once: closing the spawner takes `pidfd_open`, which valgrind
    lacks (the spawner ends with its parent all the same)."""
    sys.stdout.flush()
    os._exit(0)


def target(what: str, count: int) -> None:
    """Runs `count` hooks (or runs) after 10 unmeasured ones, in this process."""
    sys.path.insert(0, str(HERE))
    import trio

    if what == "four":
        import run_overhead

        async def runs() -> None:
            with tempfile.TemporaryDirectory() as tmp:
                config = run_overhead.bench_config(Path(tmp))
                async with run_overhead.open_runtime(config) as runtime:
                    for _ in range(10 + count):
                        await run_overhead.one_run(runtime, tmp)
                    done()

        trio.run(runs)
        return
    import hook_overhead
    import module_hook

    from mcpx_hooks.supervisor.process.spawner import open_spawner

    tmp = tempfile.mkdtemp()
    Path(tmp, module_hook.HOOK_FILE).write_text(module_hook.HOOK_SOURCE)

    async def hooks() -> None:
        if what == "module":
            hook = module_hook.module_hook(tmp, module_hook.Profile.NONE)
            sample = module_hook.hook_sample
        else:
            hook = hook_overhead.HOOK
            sample = None
        async with open_spawner() as spawner:
            for _ in range(10 + count):
                if sample is not None:
                    await sample(spawner, hook)
                else:
                    await hook_overhead.hook(spawner)
            shutil.rmtree(tmp)
            done()

    trio.run(hooks)


def count(what: str, n: int, out: Path) -> int:
    # A fresh state directory: the run history a run records to starts empty each time,
    # not the user's (which other processes may write to as this counts).
    state = tempfile.mkdtemp(prefix="mcpx-instr-state-")
    try:
        return _count(what, n, out, {**os.environ, "XDG_STATE_HOME": state})
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _count(what: str, n: int, out: Path, env: dict[str, str]) -> int:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--trace-children=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--target",
            what,
            str(n),
        ],
        check=False,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if done.returncode != 0:
        lines = [x for x in done.stderr.decode(errors="replace").splitlines() if "==" not in x]
        raise SystemExit(f"{what} {n} failed:\n" + "\n".join(lines[-15:]))
    found = TOTALS.search(out.read_text())
    if found is None:
        raise SystemExit(f"no counts from callgrind in {out}")
    return int(found.group(1))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--target":
        target(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--what", choices=("run", "module", "four"), default="run")
    parser.add_argument("--n", type=int, nargs=2, default=[30, 130], metavar=("N1", "N2"))
    parser.add_argument("--keep", help="a directory for the N2 run's callgrind file")
    args = parser.parse_args()
    first, second = args.n
    # Once without valgrind first: a checkout's first process compiles and caches the modules'
    # bytecode, which would count in N1 alone (seen: 490 k per hook where it is 657 k).
    state = tempfile.mkdtemp(prefix="mcpx-instr-state-")
    try:
        warm = [sys.executable, __file__, "--target", args.what, "1"]
        subprocess.run(warm, check=True, env={**os.environ, "XDG_STATE_HOME": state})
    finally:
        shutil.rmtree(state, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        low = count(args.what, first, Path(tmp, "low.out"))
        high_out = Path(args.keep or tmp, f"callgrind.{args.what}.{os.getpid()}.out")
        high = count(args.what, second, high_out)
    per = (high - low) / (second - first)
    unit = "run" if args.what == "four" else "hook"
    print(f"{args.what}: supervisor instructions per {unit}: {per / 1e3:.0f} k")
    print(f"  ({low} for {first}, {high} for {second})")
    if args.keep:
        print(f"  callgrind file: {high_out}")


if __name__ == "__main__":
    main()
