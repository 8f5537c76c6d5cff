"""What a run runs: its script, as a request names it. Pure data; running it is
`run/script.py`'s.
"""

from __future__ import annotations

import attrs

from .records import Record


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
