"""Where `mcpx-hooks exec -- /bin/true` spends its start: its stages timed from inside a fresh
interpreter per sample, for `docs/internals/bench.md`. Not a figure of `make bench` (its name
starts with `_`): a tool to read before cutting anything.

    .venv/bin/python bench/_startup_split.py [-n 20] [--python OTHER/.venv/bin/python]

Each sample runs `exec -- /bin/true` in process (`cli.main.main`, as the console script
does, in an empty temporary directory, `MCPX_HOOKS_NO_DISCOVERY=1`, with a bytecode cache in a
temporary PYTHONPYCACHEPREFIX written by an unmeasured first sample), with clock reads
between its stages:

* `cli`: importing the CLI's entry module;
* `parse`: building the parser and parsing (the `exec` command's module and the tables its
  flags name: attrs, the effects, the hook profiles), then starting the spawner (`prestart`);
* `config and run imports`: loading the (absent) config and admitting the run, which imports
  what a run needs: trio, the run's modules, the process modules;
* `run`: `trio.run` of the run, from its first step to its end: the first frames converted
  (which imports cattrs), the spawner's report read, the child spawned and waited for, the
  frames printed, the spawner closed. Two of its waits are shown apart: `report wait` (for
  the spawner's first line) and `spawner close` (its exit, once the run's children are
  reaped);
* `total in process`, from the probe's first line to `main`'s return (the interpreter's own
  start, `site` and the exit are not in it: `startup.py` times the whole command).

`--python` runs the probe with another checkout's interpreter (its editable install), to
compare the same stages before and after a change; alternate the two, the machine is shared.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

#: Runs `exec -- /bin/true` in process, stamping each stage; prints the stamps on stderr.
_PROBE = r"""
import json, sys, time
T = {"start": time.perf_counter()}
W = {}
from mcpx_hooks.supervisor.cli import exec as E, main as M
T["cli"] = time.perf_counter()
local_request, run_here = E.local_request, E._run_here

def stamped_request(args):
    T["parse"] = time.perf_counter()
    made = local_request(args)
    T["config and run imports"] = time.perf_counter()
    return made

def waited(name, fn):
    async def wrapper(*args):
        start = time.perf_counter()
        try:
            return await fn(*args)
        finally:
            W[name] = time.perf_counter() - start
    return wrapper

async def stamped_run(*args):
    from mcpx_hooks.supervisor.process import launch, spawner
    launch._read_report = waited("report wait", launch._read_report)
    spawner.close_spawner = waited("spawner close", spawner.close_spawner)
    T["trio.run entered"] = time.perf_counter()
    done = await run_here(*args)
    T["run"] = time.perf_counter()
    return done

E.local_request, E._run_here = stamped_request, stamped_run
try:
    M.main(["exec", "--", "/bin/true"])
except SystemExit:
    pass
T["closed"] = time.perf_counter()
sys.stderr.write("\nSTAMPS" + json.dumps([T, W]))
"""


def sample(python: str, env: dict[str, str], cwd: str) -> tuple[dict[str, float], dict[str, float]]:
    proc = subprocess.run(
        [python, "-c", _PROBE], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    if "STAMPS" not in proc.stderr:
        sys.exit(f"the probe failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    stamps, waits = json.loads(proc.stderr.rsplit("STAMPS", 1)[1])
    return stamps, waits


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="samples (after one unmeasured)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to probe")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcpx-split-") as tmp:
        env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        cwd = os.path.join(tmp, "cwd")
        os.mkdir(cwd)
        sample(args.python, env, cwd)  # writes the bytecode cache
        samples = [sample(args.python, env, cwd) for _ in range(args.n)]
    stages = list(samples[0][0])
    print(f"{args.python}: median ms of {args.n} (load {os.getloadavg()[0]:.1f})")
    for before, stage in itertools.pairwise(stages):
        ms = statistics.median((s[stage] - s[before]) * 1e3 for s, _ in samples)
        print(f"  {stage:<24} {ms:7.1f}")
    total = statistics.median((s["closed"] - s["start"]) * 1e3 for s, _ in samples)
    print(f"  {'total in process':<24} {total:7.1f}")
    for wait in ("report wait", "spawner close"):
        ms = statistics.median(w.get(wait, 0.0) * 1e3 for _, w in samples)
        print(f"  of the run: {wait:<12} {ms:7.1f}")


if __name__ == "__main__":
    main()
