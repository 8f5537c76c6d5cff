"""`init`: a commented starter `.mcpx-hooks.toml` in the working directory, never written
over an existing project file."""

from __future__ import annotations

import os

from .common import EXIT_OK, usage
from .newfile import write_new

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from typing import Final

#: The starter, beside the demo's example in the package.
STARTER: Final = "starter.toml"


def starter_text() -> str:
    """The starter config `init` writes (it validates as it is: a test holds it so)."""
    from importlib import resources

    return resources.files("mcpx_hooks.supervisor").joinpath("examples", STARTER).read_text()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="convert the local hooks of a .pre-commit-config.yaml or lefthook.yml instead"
        " of writing the starter; lists what it could not convert",
    )


def run(args: argparse.Namespace) -> int:
    """Writes the starter (or, `--from`, the hooks converted from another hook manager's
    file) as the first of the project file names; exit 2, writing nothing, when any project
    file is here already (two would both apply)."""
    from ..config.files import LOCAL_NAMES

    if getattr(args, "source", None) is not None:
        from . import initfrom

        return initfrom.run(args.source)
    for name in LOCAL_NAMES:
        if os.path.lexists(name):
            return usage("init", f"{name} exists here already; not overwritten")
    name = LOCAL_NAMES[0]
    if (failed := write_new(name, starter_text().encode())) is not None:
        return failed
    print(f"wrote {name}: a starter, with its hooks switched off or commented out")
    print(f"review it, check it with: mcpx-hooks validate {name}")
    print(f"then apply it here by trusting it: mcpx-hooks trust {name}")
    return EXIT_OK
