"""The strict sandbox for an ordinary user, against bubblewrap run by that user, in one run.

    .venv/bin/python bench/rootless.py [--rounds 10] [--per-round 20] [--user nobody]
        [--python /usr/bin/python3] [--turns 5]

Run as root. Figures, each the median over every single spawn, interleaved in rounds (each
round times all of them in a rotating order, so the machine's noise falls on all alike):

- `root strict hook`: a whole `run` hook of /bin/true under `strict` through `run_hook`, the
  supervisor root (per-child uid, PID/mount/net namespaces, Landlock, seccomp, rlimits, a
  memory cgroup), in a child process on the same interpreter as the user's part (below), so
  that the two strict hooks differ by their sandbox only; `root strict hook (this python)`,
  the same in this process, on the interpreter that runs the script (the venv's may be
  another build, and a slower one: a row to read, with no goal);
- as `--user` (an ordinary user; the supervisor's spawner in a user namespace of its own):
  `rootless strict hook`, the same hook; `bwrap`: `bwrap --unshare-all --die-with-parent`
  with a read-only /usr, fresh /proc, /dev and /tmp, running /bin/true, started with
  `trio.run_process` — what a user would pick instead to confine a command (it has no
  Landlock, seccomp, rlimits or output handling: it does less); `trio.run_process`: a bare
  /bin/true through trio, no sandbox; and the bare `posix_spawn` + `waitpid` baseline;
- the spawner's CPU time per strict hook, each part's (`/proc/PID/stat` around the rounds:
  only strict hooks use it), with no goal.

The user's part runs in a child process as that user with the distribution's
`/usr/bin/python3` (`--python`) and this tree's `.venv` site-packages (`site.addsitedir`): the
tree and its venv must be readable by that user (they are under /work here; a clone under
/root is not); root's part runs the same way, as root. Goals: rootless strict at least 2x
faster than bubblewrap (issue 12; RESULT `rootless_strict_vs_bwrap`, `ge`: bwrap's median
over ours); root's strict hook no slower than the user's (issue 27; RESULT
`root_strict_vs_rootless_strict`, root's median over the user's, `le` 1).

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2`, both
parts. Not root, without bubblewrap, or where the user's part cannot run (its Python cannot
read this tree, or strict cannot be enforced for it), it prints `SKIP` (bench/_quick.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from _quick import missing, parse_args

GOAL = 2.0
#: Root's strict hook over the user's, on the same interpreter (issue 27).
ROOT_GOAL = 1.0
HERE = Path(__file__).resolve().parent
TRUE = "/bin/true"
BWRAP = (
    "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
    TRUE,
)  # fmt: skip


async def measure(rounds: int, per_round: int, where: str, peers: bool) -> dict[str, list[float]]:
    """Samples of the strict hook (and, for the ordinary user, of the peers), interleaved."""
    import functools

    import trio
    from _timing import interleaved

    from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
    from mcpx_hooks.supervisor.core.points import Phase
    from mcpx_hooks.supervisor.process import sandbox
    from mcpx_hooks.supervisor.process.spawner import open_spawner
    from mcpx_hooks.supervisor.run.hookcontext import HookContext
    from mcpx_hooks.supervisor.run.hookrun import run_hook

    hook = Hook(
        "bench", "script", Phase.BEFORE, Action.RUN, (TRUE,), where,
        Provenance(SourceKind.COMMAND_LINE), sandbox=Profile.STRICT,
    )  # fmt: skip

    async def strict_hook() -> float:
        start = time.perf_counter()
        report = await run_hook(spawner, hook, HookContext(run=None))
        elapsed = time.perf_counter() - start
        assert report.frame.status == "ok", report.frame
        return elapsed

    async def process(argv: tuple[str, ...]) -> float:
        start = time.perf_counter()
        await trio.run_process(argv)
        return time.perf_counter() - start

    async with open_spawner() as spawner:
        sandbox.require(Profile.STRICT, spawner)
        samplers = {"strict_hook": strict_hook}
        if peers:
            samplers["bwrap"] = functools.partial(process, BWRAP)
            samplers["run_process"] = functools.partial(process, (TRUE,))
        before = _cpu_s(spawner.pid)
        samples = await interleaved(samplers, rounds, per_round)
        # (only strict hooks use the spawner; the warm-up round counts too)
        samples["spawner_cpu"] = [(_cpu_s(spawner.pid) - before) / ((rounds + 1) * per_round)]
        return samples


def _cpu_s(pid: int) -> float:
    """The CPU time (user and system) process `pid` has used, in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _probe() -> None:
    from mcpx_hooks.supervisor.core.hooks import Profile
    from mcpx_hooks.supervisor.process import sandbox
    from mcpx_hooks.supervisor.process.spawner import open_spawner

    async with open_spawner() as spawner:
        sandbox.require(Profile.STRICT, spawner)


#: The user's interpreter: the venv's site-packages (its .pth files too), then this script.
_BOOT = (
    "import site, sys, runpy; site.addsitedir(sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
    " sys.argv = [sys.argv[3], *sys.argv[4:]]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _parts(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Root's samples and the user's, each part a `--child` run of this script on
    `args.python`, alternating in `args.turns` turns of `rounds / turns` rounds each, so that
    the machine's noise falls on both alike."""
    try:
        who = pwd.getpwnam(args.user)
    except KeyError:
        missing(f"bench/rootless.py: no user {args.user} here (--user)")
    site = sysconfig.get_paths()["purelib"]
    home = tempfile.mkdtemp(prefix="mcpx-bench-home-")
    os.chown(home, who.pw_uid, who.pw_gid)
    env = ["env", "-i", f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}", f"HOME={home}"]
    run = [args.python, "-c", _BOOT, site, str(HERE), __file__]
    setpriv = ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups"]
    boots = {"root": [*env, *run], args.user: [*setpriv, *env, *run]}
    turns = max(1, min(args.turns, args.rounds))
    got: dict[str, dict[str, list[float]]] = {name: {} for name in boots}
    try:
        for name, boot in boots.items():
            probe = subprocess.run(
                [*boot, "--probe"], capture_output=True, text=True, timeout=60, check=False
            )
            if probe.returncode != 0:
                why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
                missing(f"bench/rootless.py: the part as {name} cannot run here: {why}")
        for turn in range(turns):
            rounds = args.rounds // turns + (turn < args.rounds % turns)
            for name, boot in boots.items():
                sizes = ["--rounds", str(rounds), "--per-round", str(args.per_round)]
                peers = [] if name != "root" else ["--no-peers"]
                for key, values in _child([*boot, "--child", *sizes, *peers], name).items():
                    got[name].setdefault(key, []).extend(values)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return got["root"], got[args.user]


def _child(command: list[str], name: str) -> dict[str, list[float]]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        sys.exit(f"the {name} part failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    samples: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--user", default="nobody")
    parser.add_argument("--python", default="/usr/bin/python3", help="both parts' interpreter")
    parser.add_argument("--turns", type=int, default=5, help="times the parts alternate")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-peers", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(parser, rounds=1, per_round=2)
    import trio

    if args.probe:  # can this user's Python import the tree, and strict be enforced?
        trio.run(_probe)
        return

    where = tempfile.mkdtemp(prefix="mcpx-bench-")
    os.chmod(where, 0o755)
    try:
        if args.child:  # a part (the user's, or root's): samples as one JSON line
            peers = not args.no_peers
            print(json.dumps(trio.run(measure, args.rounds, args.per_round, where, peers)))
            return
        if os.geteuid() != 0:
            missing("bench/rootless.py: run as root (root's strict hook, and the rest as --user)")
        if shutil.which("bwrap") is None:
            missing("bench/rootless.py: bubblewrap is not installed (apt-get install bubblewrap)")
        started = time.perf_counter()
        here = trio.run(measure, args.rounds, args.per_round, where, False)
        root, user = _parts(args)
    finally:
        os.rmdir(where)
    _report(here, root, user, args, time.perf_counter() - started)


def _report(
    here: dict[str, list[float]],
    root: dict[str, list[float]],
    user: dict[str, list[float]],
    args: argparse.Namespace,
    took: float,
) -> None:
    from _timing import medians, result

    this, mine, theirs = medians(here), medians(root), medians(user)
    bare = theirs["bare"]
    rows = [
        ("root strict hook", mine["strict_hook"], mine["bare"]),
        ("root strict hook (this python)", this["strict_hook"], this["bare"]),
        (f"rootless strict hook ({args.user})", theirs["strict_hook"], bare),
        (f"bwrap ({args.user})", theirs["bwrap"], bare),
        (f"trio.run_process ({args.user})", theirs["run_process"], bare),
        (f"bare posix_spawn ({args.user})", bare, bare),
    ]
    print(f"{len(user['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    for label, value, base in rows:
        print(f"  {label:<36} {value * 1e3:7.3f} ms  {value / base:5.2f}x bare")
    cpu = {name: statistics.mean(part["spawner_cpu"]) for name, part in (("root", root),
           (args.user, user), ("root, this python", here))}  # fmt: skip
    print(
        "  spawner CPU per strict hook: "
        + ", ".join(f"{n} {v * 1e6:.0f} us" for n, v in cpu.items())
    )
    speedup = theirs["bwrap"] / theirs["strict_hook"]
    print(
        f"  rootless strict is {speedup:.2f}x faster than bwrap (goal >= {GOAL}x); ({took:.0f} s)"
    )
    print(result("rootless_strict_vs_bwrap", theirs["strict_hook"] * 1e3, theirs["bwrap"] * 1e3,
                 speedup, GOAL, direction="ge", unit="ms"))  # fmt: skip
    print(result("rootless_strict_vs_root_strict", theirs["strict_hook"] * 1e3,
                 mine["strict_hook"] * 1e3, theirs["strict_hook"] / mine["strict_hook"], 3.0,
                 unit="ms"))  # fmt: skip
    print(result("root_strict_vs_rootless_strict", mine["strict_hook"] * 1e3,
                 theirs["strict_hook"] * 1e3, mine["strict_hook"] / theirs["strict_hook"],
                 ROOT_GOAL, unit="ms"))  # fmt: skip


if __name__ == "__main__":
    main()
