"""Where a hook was declared, as every message and listing names it: its file and the JSON
pointer of its table there, `FILE:/hooks/N`, the form config problems take. `hooks list`,
`exec --explain`, a refusal naming the file that locked a hook and `validate` all say it so:
a place read in one can be found in the file, or searched for in another's output.

A file's name is shown as it is, unless it holds a character that is not printable (a line
break, ESC, a tab, a byte that is not UTF-8): then the whole name is written in bash's `$'…'`
quoting (`$'/tmp/a\\nb.toml':/hooks/0`), so a place stays on one line, cannot move the cursor,
and pastes back into a shell as the file's name."""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from pathlib import PurePath


def hook_place(file: object, index: object) -> str:
    """Hook `index` of file `file`'s `hooks`, as a problem's place names it."""
    return f"{shown_file(str(file))}:/hooks/{index}"


def shown_file(name: str | PurePath) -> str:
    """A file's name for a person (the module docstring): as it is when every character of
    it is printable, else in bash's `$'…'` quoting."""
    name = str(name)
    if name.isprintable():
        return name
    from .shellwords import ansi_c

    return ansi_c(name)
