"""The runners as the supervisor sees them: their files, found without importing them (each
runs in a process of its own), and the few runner modules imported here for what both sides
must say alike.

`runners/` is standard library only and never imports the supervisor; the supervisor imports
those of its modules that are pure apart from opening libc: `libc` (the flags both pass to
the kernel), `isolation` (the mechanisms' names, `MCPX_HOOKS_HIDE`) and `protocol` (the spawn
protocol's commands and message bound), so each is declared once. No trio here.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # mypy checks `runners/` as the top-level package it is in the source tree; installed,
    # it is `mcpx_hooks.runners`, beside `mcpx_hooks.supervisor`, which the import below names.
    from runners import isolation, libc, protocol
else:
    from ...runners import isolation, libc, protocol

__all__ = ["isolation", "libc", "protocol", "runner_path"]


@functools.cache
def runner_path(name: str) -> str:
    """The file of a runner module, found without importing it (it runs in another process):
    beside the runner modules imported here (a regular package, on disk; importlib.resources
    would say the same, and costs ~3 ms to import)."""
    return os.path.join(os.path.dirname(os.path.abspath(isolation.__file__)), name)
