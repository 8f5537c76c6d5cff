"""`mcpx-hooks doctor`: which isolation mechanisms this machine has, what each sandbox profile
uses, and what is missing and how to get it.

It starts the real spawner (the one that would run hooks) and prints what it found, so the
answer is the one the supervisor acts on, `MCPX_HOOKS_HIDE` included. For an ordinary user it
also says whether the spawner got a user namespace of its own (what the rootless sandbox is
made of, `runners/userns.py`) and the value of each setting that can refuse one. `main()`
returns 0 when every profile can be enforced here, 1 otherwise. Where the system refuses new
threads, no spawner can start: doctor says so, and what needs no thread (the run history,
the paths no sandbox is granted).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from ..core.errors import ConfigError
from ..core.hooks import Profile
from ..core.limits import DEFAULT_LIMITS, LIMIT_DOCS, LIMIT_KEYS
from ..core.places import shown_file
from ..process import libc, sandbox
from ..process.egress import doctor_lines
from ..process.launch import HIDE_ENV
from ..process.spawner import Spawner, open_spawner
from .common import run_async, say
from .doctorgrants import grant_lines
from .printable import continued, printable

#: What `none` does, whatever the machine.
NONE_GIVES = "resource limits (soft), own session and process group, scrubbed environment"


def report(spawner: Spawner) -> tuple[str, bool]:
    """The report's text, and whether every profile is enforceable."""
    uid = os.geteuid()
    root = uid == 0
    lines = [*_header(uid), f"  spawner: {_spawner_line(spawner, uid)}"]
    if spawner.reaper is not None:
        lines.append(f"  reaper (each hook's namespace's first process): {spawner.reaper}")
    if unknown := sandbox.unknown_hidden():
        lines.append(
            f"  {HIDE_ENV} names {', '.join(unknown)}, which hides nothing: it can name "
            f"{', '.join(sandbox.HIDEABLE)}"
        )
    if not root:
        lines += ["", *_userns_lines(spawner)]
    lines += ["", "mechanisms:"]
    hide = sandbox.hidden()
    for mech in sandbox.MECHANISMS:
        state = spawner.mechanisms.get(mech.name, "not reported by the spawner")
        if mech.name in hide:
            state = f"hidden by {HIDE_ENV}"
        if mech.name not in sandbox.needs(Profile.STRICT):  # uid, for an ordinary user
            lines.append(f"  n/a      {mech.name:9} {mech.how_to_get}")
        elif state is True:
            extra = f" (ABI {spawner.landlock_abi})" if mech.name == "landlock" else ""
            lines.append(f"  ok       {mech.name:9} {mech.enforces}{extra}")
        else:
            lines.append(f"  MISSING  {mech.name:9} {state}")
            lines.append(f"           {'':9} to get it: {mech.how_to_get}")
    lines.append("  ok       rlimits   per-process resource limits (always)")
    lines += ["", f"memory (memoryMb, strict/workspace/net): {sandbox.memory_bound(spawner)}"]
    lines += ["", *doctor_lines(spawner.mechanisms.get("netns", "not reported"))]
    lines += ["", "profiles:"]
    every = True
    width = max(len(profile.value) for profile in Profile)  # (one column: "workspace")
    for profile in Profile:
        lacking = sandbox.missing(profile, spawner)
        uses = NONE_GIVES if profile is Profile.NONE else ", ".join(sandbox.enforced_by(profile))
        if lacking:
            every = False
            said = f"CANNOT be enforced: missing {', '.join(lacking)}"
            lines.append(f"  {profile.value:{width}} {said}")
            lines.append(f"  {'':{width}} (a hook asking for it fails; it never runs with less)")
        else:
            lines.append(f"  {profile.value:{width}} enforceable: {uses}")
    default = DEFAULT_LIMITS
    lines += ["", "limits (defaults; the config's [limits] table changes them):"]
    for key, attr, _, _ in LIMIT_KEYS:
        lines.append(f"  {key:12} {getattr(default, attr):>6}  {LIMIT_DOCS[key]}")
    return "\n".join(lines), every


def _header(uid: int) -> list[str]:
    return [
        "mcpx-hooks doctor: the sandbox on this machine",
        f"  supervisor uid {uid} ({'root' if uid == 0 else 'an ordinary user'}),"
        f" Linux {platform.release()} {platform.machine()}, Python {platform.python_version()}",
    ]


def _no_threads(why: str) -> list[str]:
    """The report where no thread can be started: what the system refuses and the way out,
    and that nothing that needs one (the spawner, the tool servers) can be checked."""
    what, _, way = why.partition("\n")
    return [
        *_header(os.geteuid()),
        f"  threads: REFUSED: {what.removeprefix(f'{libc.THREADS_REFUSED}: ')}",
        *([f"           to get them: {way}"] if way else []),
        "  spawner: not started (it needs threads): no hook, run or tool server can run here,",
        "           and nothing they need is checked",
    ]


def _spawner_line(spawner: Spawner, uid: int) -> str:
    if spawner.mode != "pidns":
        return "keeper mode (a subreaper per child): only the profile none can be had"
    if spawner.userns:
        return (
            "pidns mode, in a user namespace of its own (rootless): hooks run as uid "
            f"{uid}, each sandboxed one in a user namespace of its own"
        )
    return "pidns mode, each hook in a PID namespace of its own: hooks run as per-child uids"


def _userns_lines(spawner: Spawner) -> list[str]:
    """What the rootless sandbox needs: a user namespace, and the settings that can refuse
    one, with their values here."""
    lines = ["user namespaces (what the sandbox of an ordinary user is made in):"]
    if spawner.userns:
        lines.append("  allowed  the spawner runs in one of its own")
    else:
        why = spawner.mechanisms.get("pidns")
        lines.append(f"  REFUSED  {why if isinstance(why, str) else 'not reported'}")
    for name, value, refuses in spawner.userns_settings:
        if value is None:
            lines.append(f"           {name}: not on this kernel")
        else:
            lines.append(f"           {name} = {value}{'  (refuses them)' if refuses else ''}")
    return lines


async def _collect() -> tuple[str, bool]:
    async with open_spawner() as spawner:
        return report(spawner)


async def _servers(args: argparse.Namespace) -> list[str]:
    """The tool servers the config declares that fail to start here, with why."""
    from .common import load
    from .servers import server_states, state_line

    try:
        config = load(args)
    except ConfigError as exc:  # the sandbox report stands whatever the config says
        return ["", f"tool servers: the config does not load ({len(exc.problems)} problem(s);"
                " `mcpx-hooks validate` shows them)"]  # fmt: skip
    states = await server_states(config) if config.servers else []
    lines = [
        continued(f"  {printable(str(s['name']))}: {state_line(s)}")
        for s in states
        if s["state"] == "failing"
    ]
    return ["", "tool servers that fail to start:", *lines] if lines else []


def _history(args: argparse.Namespace) -> tuple[list[str], bool]:
    """Where runs are kept, and why they are not when they cannot be (the same probe the
    supervisor's writer would fail: opened, written, checked), or that its disk has less
    room than it needs (the room left, against what it needs)."""
    from ..history.faults import HistoryFault
    from ..history.probing import probe, room
    from ..history.store import default_path
    from .common import load

    try:
        config = load(args, say=False)  # (its warnings said with the tool servers)
    except ConfigError:  # said with the tool servers
        return [], True
    if not config.history_enabled:
        return ["", "run history: off ([history] enabled = false): runs are kept in memory"], True
    try:
        path = Path(config.history_path) if config.history_path else default_path(os.environ)
    except HistoryFault as exc:
        return [
            "",
            f"run history: NOT KEPT: {printable(str(exc))}; runs go on in memory only",
        ], False
    why = probe(path)
    little = room(path) if why is None else None
    if little is not None:
        said = f"run history: {shown_file(path)}: TOO LITTLE ROOM: {printable(little)}"
        return ["", f"{said}; once the disk is full, runs go on in memory only"], False
    if why is None:
        return ["", f"run history: {shown_file(path)}"], True
    return ["", f"run history: NOT KEPT: {printable(why)}; runs go on in memory only"], False


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .parser import add_config_file_arguments

    # The config a `serve --config F` reads: its tool servers and its run history checked.
    add_config_file_arguments(p)
    p.add_argument(
        "--cluster",
        metavar="URL",
        help="also check a cluster's NATS server: reachable, asking for credentials,"
        " JetStream on, the streams there, one cluster key held by the parts running",
    )
    from .clusterflags import add_access_arguments

    add_access_arguments(p, key=False)


def run(args: argparse.Namespace) -> int:
    """`doctor`: prints the report (and the tool servers that fail to start); 0 when every
    profile is enforceable here, every server starts (and, with `--cluster`, the cluster is
    well), else 1."""
    if (no_threads := libc.thread_refused()) is not None:  # (`_collect`'s spawner needs them)
        history, _ = _history(args)
        print("\n".join([*_no_threads(no_threads), *history, *grant_lines(args)]))
        return 1
    text, every = run_async(_collect)
    failing = run_async(_servers, args)
    history, kept = _history(args)
    text = "\n".join([text, *failing, *history, *grant_lines(args)])
    every = every and kept
    if getattr(args, "cluster", None):
        from ..cluster.access import AccessError
        from ..cluster.health import cluster_report
        from .clusterflags import nats_access_of

        try:
            access = nats_access_of(args)
        except AccessError as exc:
            say(f"mcpx-hooks doctor: {exc}")
            return 2
        more, well = run_async(cluster_report, args.cluster, access)
        # (its lines hold the server's words and the URL given: each line made printable)
        more = "\n".join(map(printable, more.split("\n")))
        text, every = f"{text}\n\n{more}", every and well
    print(text)
    return 0 if every and not failing else 1


if __name__ == "__main__":
    sys.exit(run(argparse.Namespace(config=[], trust_project=False)))
