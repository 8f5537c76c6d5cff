"""The strict sandbox for an ordinary user, against bubblewrap run by that user, in one run.

    .venv/bin/python bench/rootless.py [--rounds 10] [--per-round 20] [--user nobody]

Run as root. Figures, each the median over every single spawn, interleaved in rounds (each
round times all of them in a rotating order, so the machine's noise falls on all alike):

- `root strict hook`: a whole `run` hook of /bin/true under `strict` through `run_hook`, the
  supervisor root (per-child uid, PID/mount/net namespaces, Landlock, seccomp, rlimits);
- as `--user` (an ordinary user; the supervisor's spawner in a user namespace of its own):
  `rootless strict hook`, the same hook; `bwrap`: `bwrap --unshare-all --die-with-parent`
  with a read-only /usr, fresh /proc, /dev and /tmp, running /bin/true, started with
  `trio.run_process` — what a user would pick instead to confine a command (it has no
  Landlock, seccomp, rlimits or output handling: it does less); `trio.run_process`: a bare
  /bin/true through trio, no sandbox; and the bare `posix_spawn` + `waitpid` baseline.

The user's part runs in a child process as that user with the distribution's
`/usr/bin/python3` and this tree's `.venv` site-packages (`site.addsitedir`): the tree and
its venv must be readable by that user (they are under /work here; a clone under /root is
not). Goal (issue 12): rootless strict at least 2x faster than bubblewrap (RESULT
`rootless_strict_vs_bwrap`, `ge`: bwrap's median over ours).

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
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from _quick import missing, parse_args

GOAL = 2.0
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
        return await interleaved(samplers, rounds, per_round)


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


def _as_user(args: argparse.Namespace) -> dict[str, list[float]]:
    """Runs this script's `--child` part as `args.user`; its samples."""
    try:
        who = pwd.getpwnam(args.user)
    except KeyError:
        missing(f"bench/rootless.py: no user {args.user} here (--user)")
    site = sysconfig.get_paths()["purelib"]
    home = tempfile.mkdtemp(prefix="mcpx-bench-home-")
    os.chown(home, who.pw_uid, who.pw_gid)
    try:
        boot = [
            "setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups",
            "env", "-i", f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}", f"HOME={home}",
            "/usr/bin/python3", "-c", _BOOT, site, str(HERE), __file__,
        ]  # fmt: skip
        probe = subprocess.run(
            [*boot, "--probe"], capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            missing(f"bench/rootless.py: the part as {args.user} cannot run here: {why}")
        sizes = ["--rounds", str(args.rounds), "--per-round", str(args.per_round)]
        command = [*boot, "--child", *sizes]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode != 0:
        sys.exit(f"the {args.user} part failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    samples: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--user", default="nobody")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(parser, rounds=1, per_round=2)
    import trio

    if args.probe:  # can this user's Python import the tree, and strict be enforced?
        trio.run(_probe)
        return

    where = tempfile.mkdtemp(prefix="mcpx-bench-")
    os.chmod(where, 0o755)
    try:
        if args.child:  # the ordinary user's part: samples as one JSON line
            print(json.dumps(trio.run(measure, args.rounds, args.per_round, where, True)))
            return
        if os.geteuid() != 0:
            missing("bench/rootless.py: run as root (root's strict hook, and the rest as --user)")
        if shutil.which("bwrap") is None:
            missing("bench/rootless.py: bubblewrap is not installed (apt-get install bubblewrap)")
        started = time.perf_counter()
        root = trio.run(measure, args.rounds, args.per_round, where, False)
        user = _as_user(args)
    finally:
        os.rmdir(where)
    _report(root, user, args, time.perf_counter() - started)


def _report(
    root: dict[str, list[float]],
    user: dict[str, list[float]],
    args: argparse.Namespace,
    took: float,
) -> None:
    from _timing import medians, result

    mine, theirs = medians(root), medians(user)
    bare = theirs["bare"]
    rows = [
        ("root strict hook", mine["strict_hook"], mine["bare"]),
        (f"rootless strict hook ({args.user})", theirs["strict_hook"], bare),
        (f"bwrap ({args.user})", theirs["bwrap"], bare),
        (f"trio.run_process ({args.user})", theirs["run_process"], bare),
        (f"bare posix_spawn ({args.user})", bare, bare),
    ]
    print(f"{len(user['bare'])} spawns each, {args.rounds} interleaved rounds, medians:")
    for label, value, base in rows:
        print(f"  {label:<36} {value * 1e3:7.3f} ms  {value / base:5.2f}x bare")
    speedup = theirs["bwrap"] / theirs["strict_hook"]
    print(
        f"  rootless strict is {speedup:.2f}x faster than bwrap (goal >= {GOAL}x); ({took:.0f} s)"
    )
    print(result("rootless_strict_vs_bwrap", theirs["strict_hook"] * 1e3, theirs["bwrap"] * 1e3,
                 speedup, GOAL, direction="ge", unit="ms"))  # fmt: skip
    print(result("rootless_strict_vs_root_strict", theirs["strict_hook"] * 1e3,
                 mine["strict_hook"] * 1e3, theirs["strict_hook"] / mine["strict_hook"], 3.0,
                 unit="ms"))  # fmt: skip


if __name__ == "__main__":
    main()
