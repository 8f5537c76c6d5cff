"""Private scratch directories for hooks and runs: created per process, removed afterwards.

They live on a RAM-backed tmpfs (`/dev/shm`) when there is one we can write to: creating and
removing a directory there costs microseconds, against about a millisecond on this machine's
disk. Elsewhere, the supervisor's temporary directory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import Final

#: Where scratch directories go when it is usable; override with MCPX_HOOKS_SCRATCH_ROOT.
RAM_ROOT: Final = "/dev/shm"
ROOT_ENV: Final = "MCPX_HOOKS_SCRATCH_ROOT"


@functools.cache
def scratch_root() -> str:
    """`mcpx-hooks-<uid>` under the RAM root: made 0700 once and kept (it stays empty between
    runs). One that exists but is not ours and private is not used: a fresh one is made."""
    base = os.environ.get(ROOT_ENV) or RAM_ROOT
    if not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):
        base = tempfile.gettempdir()
    root = os.path.join(base, f"mcpx-hooks-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    info = os.lstat(root)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0:
        return root
    return tempfile.mkdtemp(prefix=f"mcpx-hooks-{os.getuid()}-", dir=base)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A new private (0700) directory, removed with everything in it on exit."""
    # What `tempfile.mkdtemp` does, in about half its time: the root is ours alone (0700), so
    # a name already there (64 random bits) is a fault, not a race to retry.
    path = os.path.join(scratch_root(), prefix + secrets.token_hex(8))
    os.mkdir(path, 0o700)
    try:
        yield path
    finally:
        # Most hooks leave it empty: one rmdir, against rmtree's open, scan and rmdir.
        try:
            os.rmdir(path)
        except OSError:  # not empty (or already gone): rmtree removes whatever is left
            shutil.rmtree(path, ignore_errors=True)
