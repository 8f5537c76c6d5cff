"""What the command line prints of data (a run's argv, hook names, advice, reasons, messages,
search snippets, a server's fields) is free of control characters: nothing a run, a hook, a
config file or a server holds can move the cursor, clear the screen, write the clipboard
(OSC 52), or start a line of its own that reads as the view's (a fake `end: exit code 0`).

A character that is not printable (ESC, a line break, a tab, DEL, a C1 control, a Unicode
format or separator character such as U+202E, a lone surrogate) is written as its Python
escape: `\\x1b`, `\\n`, `\\u202e`. Text of several lines (advice, a reason, a message) goes on
as continuation lines, indented under the line it starts. A script's own output lines are
not data of this kind: the views that show them print them as they are (colours included).
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable

#: How much deeper than its first line a continuation line is indented.
CONTINUATION_INDENT = 4


def printable(text: str) -> str:
    """`text` on one line, each character that is not printable written as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def continued(line: str) -> str:
    """A line of a view whose text may hold line breaks: each break starts a line indented
    `CONTINUATION_INDENT` deeper than this one; every other character as `printable`."""
    if line.isprintable():
        return line
    first, *rest = line.splitlines() or [""]
    indent = " " * (len(first) - len(first.lstrip(" ")) + CONTINUATION_INDENT)
    return "\n".join([printable(first), *(indent + printable(part) for part in rest)])


def continued_lines(lines: Iterable[str]) -> list[str]:
    """`continued` of each line."""
    return [continued(line) for line in lines]


def command(argv: Iterable[object]) -> str:
    """A command line on one line, as a shell would take it back (`core/shellwords.py`)."""
    from ..core.shellwords import shell_line

    return shell_line(argv)
