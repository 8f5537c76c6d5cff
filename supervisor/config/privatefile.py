"""A private file written whole or not at all: what the trust state and the prompt cache keep.

The bytes go to a 0600 temporary file beside `path`, are flushed to disk, and then replace
`path` in one rename: a reader sees the old file or the new one, never a part, and a crash
leaves at most a temporary file (named `.NAME.*.tmp`) behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_private(path: Path, data: bytes) -> None:
    """Replaces `path` with `data`, mode 0600, atomically; raises `OSError` (the temporary
    file removed)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
