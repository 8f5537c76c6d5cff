"""A project file `init` writes: new, whole, or not there at all."""

from __future__ import annotations

import contextlib
import os

from .common import EXIT_FAILED, say, usage


def write_new(name: str, data: bytes) -> int | None:
    """Writes the new project file `name` (never over one: `O_EXCL`, so a file that appeared
    since the check is not written over either); None when written, else the exit code, the
    reason said. A directory that cannot be written, or a disk that fills, is no bad input
    (exit 1), and leaves no file cut short behind (one there would stop the next `init`)."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return usage("init", f"{name} exists here already; not overwritten")
    except OSError as exc:
        say(f"mcpx-hooks init: cannot write {name}: {exc.strerror or exc}")
        return EXIT_FAILED
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(name)
        say(f"mcpx-hooks init: cannot write {name}: {exc.strerror or exc}; nothing written")
        return EXIT_FAILED
    return None
