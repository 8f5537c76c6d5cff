"""The memory bound at the scale users meet it: bombs of 1.5x `memoryMb` = 1024, every way.

    .venv/bin/python bench/memory_bombs.py [--memory-mb 1024] [--user nobody]

Run as root. Each bomb is a strict `run` hook (through `run_hook`, on a real spawner) that
pins 1.5x its `memoryMb` of one kind of memory `RLIMIT_DATA` never counted: a shared anonymous
mapping, a memfd filled with `write()`, a file in its scratch tmpfs, SysV shared memory (the
programs of tests/test_memory_bound.py, read from that file, not imported: it imports the
test suite). Each runs three ways: root with a memory cgroup per tree (`cgroup`; skipped,
saying why, where none can be made), root with the fallback (`fallback`: `MCPX_HOOKS_HIDE=memcg`
before the spawner starts: RLIMIT_AS, a scratch no larger than the bound, shm limits, no
memfd), and an ordinary user's supervisor (`rootless`: a child process as `--user` with the
distribution's /usr/bin/python3 and this tree's .venv site-packages, as bench/rootless.py;
skipped, saying why, when not root or when that user's Python cannot read the tree).

For each, the hook's status and reason, which must be `failed` and "over memoryMb N" (else
the script exits 1: a bomb that got through is a failed bench, not a missed goal), and the
largest drop of the host's MemAvailable (/proc/meminfo, sampled every 2 ms by a thread) below
where it was before the hook, while it ran. RESULT `mem_drop_<way>_<bomb>`: the drop in MiB,
baseline `memoryMb`, goal `abs` <= memoryMb + 64 MiB. The drop is the whole host's: anything
else that takes memory meanwhile counts too. About 10 s.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--memory-mb 64`: every bomb of every
way, at 96 MiB each. Where no way can run (strict cannot be enforced), it prints `SKIP`
(bench/_quick.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from _quick import missing, parse_args

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "test_memory_bound.py"
#: How far above memoryMb the host's available memory may drop (as the tests allow).
SLACK_MB = 64
#: Seconds between two MemAvailable samples.
EVERY_S = 0.002
#: The bombs of the test, and their short names in figures.
SHORT = {
    "shared_anonymous": "shared",
    "memfd": "memfd",
    "scratch_tmpfs": "tmpfs",
    "sysv_shm": "shm",
}
WAYS = ("cgroup", "fallback", "rootless")


def bomb_programs() -> tuple[str, dict[str, str]]:
    """`_PRELUDE` and `BOMBS` of tests/test_memory_bound.py, read as literals from its source."""
    found: dict[str, Any] = {}
    for node in ast.parse(TESTS.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("_PRELUDE", "BOMBS"):
                found[target.id] = ast.literal_eval(node.value)
    if set(found) != {"_PRELUDE", "BOMBS"} or not set(SHORT) <= set(found["BOMBS"]):
        sys.exit(f"{TESTS}: no literal _PRELUDE and BOMBS of {sorted(SHORT)} any more")
    # (the test's other bombs, a private heap, are what RLIMIT_DATA always bounded)
    return found["_PRELUDE"], {name: found["BOMBS"][name] for name in SHORT}


def meminfo_mb() -> tuple[float, float]:
    """MemAvailable and Shmem of /proc/meminfo, MiB."""
    found: dict[bytes, float] = {}
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            name, _, rest = line.partition(b":")
            if name in (b"MemAvailable", b"Shmem"):
                found[name] = int(rest.split()[0]) / 1024
    return found[b"MemAvailable"], found[b"Shmem"]


class LowestAvailable:
    """While open, a thread samples /proc/meminfo every `EVERY_S`: `drop_mb` is how far
    MemAvailable fell below where it was on entry, `shmem_mb` how far Shmem rose above it
    (every bomb here pins shmem: for context, what the tree held at most)."""

    def __enter__(self) -> LowestAvailable:
        self.before, self.before_shmem = meminfo_mb()
        self.lowest, self.shmem = self.before, self.before_shmem
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _take(self) -> None:
        available, shmem = meminfo_mb()
        self.lowest = min(self.lowest, available)
        self.shmem = max(self.shmem, shmem)

    def _sample(self) -> None:
        while not self._stop.wait(EVERY_S):
            self._take()
            self.samples += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    @property
    def drop_mb(self) -> float:
        return self.before - self.lowest

    @property
    def shmem_mb(self) -> float:
        return self.shmem - self.before_shmem


async def bombs(way: str, memory_mb: int, where: str) -> dict[str, Any]:
    """Every bomb once on a spawner of its own; `{"by": ..., "rows": [...]}`, or
    `{"skipped": why}` where this way cannot be had here."""
    from mcpx_hooks.supervisor.core.errors import SandboxUnavailable
    from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
    from mcpx_hooks.supervisor.core.limits import Limits
    from mcpx_hooks.supervisor.core.points import Phase
    from mcpx_hooks.supervisor.process import sandbox
    from mcpx_hooks.supervisor.process.spawner import open_spawner
    from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
    from mcpx_hooks.supervisor.run.hookrun import run_hook

    prelude, programs = bomb_programs()
    bomb_mb = memory_mb * 3 // 2
    ctx = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({},))
    rows = []
    async with open_spawner() as spawner:
        by = spawner.memory.get("by")
        try:
            sandbox.require(Profile.STRICT, spawner)
        except SandboxUnavailable as exc:
            return {"skipped": f"strict cannot be enforced: {exc}"}
        if way == "cgroup" and by != "cgroup":
            return {"skipped": f"no memory cgroup here: {spawner.memory.get('why')}"}
        if way != "cgroup" and by != "rlimit":
            raise RuntimeError(f"the {way} spawner bounds memory by {by!r}: {spawner.memory}")
        for kind, body in programs.items():
            hook = Hook(
                "bomb", "script", Phase.BEFORE, Action.RUN,
                (sys.executable, "-I", "-S", "-c", prelude + textwrap.dedent(body), str(bomb_mb)),
                where, Provenance(SourceKind.COMMAND_LINE), sandbox=Profile.STRICT,
                timeout_ms=30_000, kill_grace_ms=200,
                limits=Limits(memory_mb=memory_mb, scratch_mb=2 * bomb_mb),
            )  # fmt: skip
            started = time.perf_counter()
            with LowestAvailable() as seen:
                report = await run_hook(spawner, hook, ctx)
            rows.append(
                {
                    "kind": kind,
                    "status": str(report.frame.status),
                    "reason": report.frame.reason,
                    "drop_mb": seen.drop_mb,
                    "shmem_mb": seen.shmem_mb,
                    "samples": seen.samples,
                    "took_s": time.perf_counter() - started,
                }
            )
    return {"by": by, "rows": rows}


def run_way(way: str, memory_mb: int) -> dict[str, Any]:
    """One way in this process (the fallback with cgroups hidden from its spawner)."""
    import trio

    from mcpx_hooks.supervisor.process.launch import HIDE_ENV

    where = tempfile.mkdtemp(prefix="mcpx-bench-")
    os.chmod(where, 0o755)
    hidden = os.environ.get(HIDE_ENV)
    if way == "fallback":
        os.environ[HIDE_ENV] = "memcg"
    try:
        return trio.run(bombs, way, memory_mb, where)
    finally:
        if way == "fallback":
            if hidden is None:
                del os.environ[HIDE_ENV]
            else:
                os.environ[HIDE_ENV] = hidden
        os.rmdir(where)


#: The user's interpreter: the venv's site-packages (its .pth files too), then this script.
_BOOT = (
    "import site, sys, runpy; site.addsitedir(sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
    " sys.argv = [sys.argv[3], *sys.argv[4:]]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def as_user(user: str, memory_mb: int) -> dict[str, Any]:
    """The `rootless` way: this script's `--child` as `user`, or why it was skipped."""
    if os.geteuid() != 0:
        return {"skipped": f"not root: cannot run as {user}"}
    try:
        who = pwd.getpwnam(user)
    except KeyError:
        return {"skipped": f"no user {user} here"}
    home = tempfile.mkdtemp(prefix="mcpx-bench-home-")
    os.chown(home, who.pw_uid, who.pw_gid)
    prefix = [
        "setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups",
        "env", "-i", f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}", f"HOME={home}",
        "/usr/bin/python3",
    ]  # fmt: skip
    site = sysconfig.get_paths()["purelib"]
    try:
        probe = subprocess.run(
            [*prefix, "-c", _BOOT, site, str(HERE), __file__, "--probe"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            return {"skipped": f"{user}'s /usr/bin/python3 cannot read this tree: {why}"}
        command = [*prefix, "-c", _BOOT, site, str(HERE), __file__]
        command += ["--child", "--memory-mb", str(memory_mb)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return {"error": f"the {user} part failed (exit {done.returncode}): stderr above"}
    part: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return part


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memory-mb", type=int, default=1024, help="the hooks' memoryMb")
    parser.add_argument("--user", default="nobody", help="the ordinary user of `rootless`")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(parser, memory_mb=64)
    if args.probe:  # can this user's Python import the tree and read the bombs?
        import mcpx_hooks.supervisor.process.spawner  # noqa: F401

        bomb_programs()
        return
    if args.child:  # the ordinary user's part: one JSON line
        print(json.dumps(run_way("rootless", args.memory_mb)))
        return
    started = time.perf_counter()
    parts: dict[str, dict[str, Any]] = {}
    if os.geteuid() == 0:
        parts["cgroup"] = run_way("cgroup", args.memory_mb)
        parts["fallback"] = run_way("fallback", args.memory_mb)
    else:  # an ordinary user's own supervisor is what `rootless` measures
        parts["cgroup"] = {"skipped": "not root"}
        parts["fallback"] = {"skipped": "not root (the rootless row is this user's)"}
        parts["rootless"] = run_way("rootless", args.memory_mb)
    if "rootless" not in parts:
        parts["rootless"] = as_user(args.user, args.memory_mb)
    sys.exit(report(parts, args, time.perf_counter() - started))


def report(parts: dict[str, dict[str, Any]], args: argparse.Namespace, took: float) -> int:
    """Prints the table and the RESULT lines; 1 if a bomb was not refused as it must be."""
    from _timing import result

    memory_mb = args.memory_mb
    goal = memory_mb + SLACK_MB
    want = f"over memoryMb {memory_mb}"
    print(
        f"memoryMb {memory_mb}, each bomb {memory_mb * 3 // 2} MiB; the largest MemAvailable"
        f" drop while it ran (goal <= {goal} MiB); {os.cpu_count()} cores,"
        f" load {os.getloadavg()[0]:.2f}, {meminfo_mb()[0]:.0f} MiB available"
    )
    head = ("way", "bomb", "bound", "status", "reason", "drop MiB", "Shmem+ MiB", "samples", "s")
    lines: list[tuple[str, ...]] = [head]
    results: list[str] = []
    wrong: list[str] = []
    for way in WAYS:
        part = parts[way]
        if "skipped" in part or "error" in part:
            why = part.get("skipped") or part["error"]
            lines.append((way, "-", "-", "skipped" if "skipped" in part else "ERROR", why))
            lines[-1] += ("-",) * (len(head) - len(lines[-1]))
            if "error" in part:
                wrong.append(f"{way}: {part['error']}")
            continue
        for row in part["rows"]:
            refused = row["status"] == "failed" and row["reason"] == want
            if not refused:
                wrong.append(f"{way} {row['kind']}: {row['status']} {row['reason']!r}")
            lines.append(
                (
                    way, row["kind"], part["by"], row["status"], str(row["reason"]),
                    f"{row['drop_mb']:.0f}", f"{row['shmem_mb']:.0f}", str(row["samples"]),
                    f"{row['took_s']:.2f}",
                )
            )  # fmt: skip
            drop = row["drop_mb"]
            results.append(
                result(f"mem_drop_{way}_{SHORT[row['kind']]}", drop, memory_mb,
                       drop / memory_mb, goal, direction="abs", unit="MiB")
            )  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    print(f"  ({took:.0f} s)")
    if not results and not wrong:
        missing("bench/memory_bombs.py: no way can run here (the table says why)")
    for line in results:
        print(line)
    if wrong:
        print(f"FAILED: not refused as {want!r}: " + "; ".join(wrong), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    main()
