"""`mcpx-hooks doctor`: which isolation mechanisms this machine has, what each sandbox profile
uses, and what is missing and how to get it.

It starts the real spawner (the one that would run hooks) and prints what it found, so the
answer is the one the supervisor acts on, `MCPX_HOOKS_HIDE` included. `main()` returns 0 when
every profile can be enforced here, 1 otherwise.
"""

from __future__ import annotations

import os
import platform
import sys

import trio

from . import sandbox
from .hooks import Profile
from .limits import DEFAULT_LIMITS, LIMIT_DOCS, LIMIT_KEYS
from .spawn import HIDE_ENV, Spawner, open_spawner

#: What `none` does, whatever the machine.
NONE_GIVES = "resource limits (soft), own session and process group, scrubbed environment"


def report(spawner: Spawner) -> tuple[str, bool]:
    """The report's text, and whether every profile is enforceable."""
    uid = os.geteuid()
    lines = [
        "mcpx-hooks doctor: the sandbox on this machine",
        f"  supervisor uid {uid}{' (root)' if uid == 0 else ''}, spawner mode {spawner.mode},"
        f" Linux {platform.release()} {platform.machine()}, Python {platform.python_version()}",
        "",
        "mechanisms:",
    ]
    hide = sandbox.hidden()
    for mech in sandbox.MECHANISMS:
        state = spawner.mechanisms.get(mech.name, "not reported by the spawner")
        if mech.name in hide:
            state = f"hidden by {HIDE_ENV}"
        if state is True:
            extra = f" (ABI {spawner.landlock_abi})" if mech.name == "landlock" else ""
            lines.append(f"  ok       {mech.name:9} {mech.enforces}{extra}")
        else:
            lines.append(f"  MISSING  {mech.name:9} {state}")
            lines.append(f"           {'':9} to get it: {mech.how_to_get}")
    lines.append("  ok       rlimits   per-process resource limits (always)")
    lines += ["", "profiles:"]
    every = True
    for profile in Profile:
        lacking = sandbox.missing(profile, spawner)
        uses = NONE_GIVES if profile is Profile.NONE else ", ".join(sandbox.enforced_by(profile))
        if lacking:
            every = False
            lines.append(f"  {profile.value:7} CANNOT be enforced: missing {', '.join(lacking)}")
            lines.append(f"  {'':7} (a hook asking for it fails; it never runs with less)")
        else:
            lines.append(f"  {profile.value:7} enforceable: {uses}")
    default = DEFAULT_LIMITS
    lines += ["", "limits (defaults; the config's [limits] table changes them):"]
    for key, attr, _, _ in LIMIT_KEYS:
        lines.append(f"  {key:12} {getattr(default, attr):>6}  {LIMIT_DOCS[key]}")
    return "\n".join(lines), every


async def _collect() -> tuple[str, bool]:
    async with open_spawner() as spawner:
        return report(spawner)


def main() -> int:
    """Prints the report; 0 when every profile is enforceable here, else 1."""
    text, every = trio.run(_collect)
    print(text)
    return 0 if every else 1


if __name__ == "__main__":
    sys.exit(main())
