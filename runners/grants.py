"""What Landlock grants a sandboxed hook besides its scratch (`Grants`): its read and write
paths and devices, opened once on the armed thread or process (`jail.prepare`).

Standard library only. The same fds are the view's bind sources (`view.py`) and the
ruleset's rules, so a cover and a grant show exactly the inodes the rules allow.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from . import landlock
from .start import StartError


class Grants:
    """What Landlock will grant a hook besides its scratch: its read paths (read and
    execute), its write paths (everything) and devices, opened (`O_PATH`) and added to a
    ruleset of its own, not yet enforced.

    They are opened once, as this (root) thread sees them before the view changes anything:
    the same inodes the hook's user reaches through the view, whose covers bind and whose
    grants copy these very fds (`read`).
    """

    def __init__(
        self,
        read: Iterable[str],
        devices: Iterable[str],
        *,
        net: bool,
        write: Iterable[str] = (),
    ) -> None:
        #: The fds of the read and write paths that exist, by path (the view's sources).
        self.read: dict[str, int] = {}
        self._fds: list[int] = []
        self.ruleset: landlock.Ruleset | None = None
        try:
            rules = []
            for paths, rights in (
                (read, landlock.READ_BENEATH),
                (write, landlock.ALL_BENEATH),
                (devices, landlock.DEVICE),
            ):
                for path in paths:
                    fd = open_path(path)
                    if fd is None:
                        continue
                    self._fds.append(fd)
                    rules.append((fd, rights))
                    if rights != landlock.DEVICE:
                        self.read[path] = fd
            self.ruleset = landlock.Ruleset(no_tcp=not net)
            self.ruleset.add(rules)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.ruleset is not None:
            self.ruleset.close()
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)
        self.read = {}


def open_path(path: str) -> int | None:
    """`landlock.open_path`, its failure a `StartError` naming the path."""
    try:
        return landlock.open_path(path)
    except OSError as exc:
        raise StartError(f"sandbox: cannot open {path}: {exc.strerror}") from exc
