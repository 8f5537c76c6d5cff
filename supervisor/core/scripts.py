"""What a run runs: its script, as a request names it. Pure data; running it is
`run/script.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from .records import Record

#: The most characters of a run's argv that a listing of runs carries (`GET /v1/runs`, `runs
#: list`, the console's list, the history's and the cluster's summaries): a command line
#: reads in far less, and a megabyte's argv would make every listing that large.
LISTED_ARGV_CHARS: Final = 2048


@attrs.frozen(repr=False, eq=False)
class Script(Record):
    """What to run: exactly one of `argv`, `python_file`, `python_code`."""

    argv: tuple[str, ...] | None = None
    python_file: str | None = None
    python_code: str | None = None

    @property
    def shown_argv(self) -> tuple[str, ...]:
        """The argv as the `start` frame shows it."""
        if self.argv is not None:
            return self.argv
        if self.python_file is not None:
            return ("python", self.python_file)
        return ("python", "-c", self.python_code or "")


def listed_argv(argv: Sequence[str]) -> dict[str, Any]:
    """`argv` as a listing of runs carries it (`LISTED_ARGV_CHARS`), as a summary's `argv`
    and `argvCut`: its arguments whole, in order, while they fit, then the one that does not,
    cut to what is left; and how many were not listed whole (0: none). The run's `start`
    frame keeps it whole."""
    listed: list[str] = []
    room = LISTED_ARGV_CHARS
    for i, arg in enumerate(argv):
        if len(arg) > room:
            listed.append(arg[:room])
            return {"argv": listed, "argvCut": len(argv) - i}
        listed.append(arg)
        room -= len(arg)
    return {"argv": listed, "argvCut": 0}
