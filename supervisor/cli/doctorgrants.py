"""`doctor`'s lines on what a sandbox may never be granted: the service's roots (of the
config in force here) and the paths no profile but `none` reaches."""

from __future__ import annotations

import argparse
import os

from ..core.errors import ConfigError
from ..core.hooks import Config
from ..core.places import shown_file
from ..process.denied import READ_ONLY_NAMES, never_granted
from ..process.sandbox import real_path, under
from ..service.roots import roots_in_force


def grant_lines(args: argparse.Namespace) -> list[str]:
    """The roots a `serve` started here (with the same `--config` and `--trust-project`)
    would have, and the never-granted paths (each marked when absent here), as `doctor`
    prints them."""
    from .common import load

    try:
        config: Config | None = load(args, say=False)  # (`_servers` said its warnings)
    except ConfigError:  # the sandbox report says so already (tool servers)
        config = None
    lines = ["", "service roots (a request's cwd must lie in one; [service] roots):"]
    if config is None:
        lines.append("  unknown: the config does not load")
    else:
        roots = roots_in_force(config, os.getcwd())
        where = (
            "[service] roots"
            if config.service_roots is not None
            else "not set: the directory `serve` would start in, here"
        )
        lines += [f"  {shown_file(root)}" for root in roots]
        if not roots:
            lines.append(
                "  none: a request without cwd runs in an empty directory of its own, one"
                " naming a cwd is refused (/, the home and its ancestors are never a root"
                " by default)"
            )
        lines.append(f"  ({where})")
    extra = config.sandbox_paths.deny if config is not None else ()
    lines.append(
        "never granted (no profile but none reads or writes them, whatever the grants say;"
        " [sandbox] deny adds):"
    )
    denied = never_granted(extra)
    for path in denied:
        lines.append(f"  {shown_file(path)}{'' if os.path.lexists(path) else '  (not here)'}")
    lines.append(f"read-only in a writable grant: {', '.join(READ_ONLY_NAMES)}")
    return lines + _dropped(config, denied)


def _dropped(config: Config | None, denied: list[str]) -> list[str]:
    """The `[sandbox]` grants that lie in a never-granted path: given to no sandbox, which a
    run would not say (they are left out of every view)."""
    real = [(path, real_path(path)) for path in denied if os.path.lexists(path)]
    said = []
    for key in ("read", "write"):
        for grant in getattr(config.sandbox_paths, key) if config is not None else ():
            inside = real_path(grant)
            holding = next((path for path, holder in real if under(inside, (holder,))), None)
            if holding is not None:
                said.append(f"  [sandbox] {key} {shown_file(grant)}: inside {shown_file(holding)}")
    if said:
        said.insert(0, "grants never given (each lies in a path above, which no grant opens):")
    return said
