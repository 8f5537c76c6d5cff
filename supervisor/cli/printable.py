"""What the command line prints of data (a run's argv, hook names, advice, reasons, messages,
search snippets, a server's fields) is free of control characters: nothing a run, a hook, a
config file or a server holds can move the cursor, clear the screen, write the clipboard
(OSC 52), or start a line of its own that reads as the view's (a fake `end: exit code 0`).

A character that is not printable (ESC, a line break, a tab, DEL, a C1 control, a Unicode
format or separator character such as U+202E, a lone surrogate) is written as its Python
escape: `\\x1b`, `\\n`, `\\u202e`. Text of several lines (advice, a reason, a message) goes on
as continuation lines, indented under the line it starts. A script's own output lines are
not data of this kind: the views that show them print them as they are (colours included).

A field of data is bounded as well (`bounded`): at most `FIELD_LINES` lines of it, each cut at
`LINE_CHARS` characters as shown, and a line saying how much was left out and where all of it
is, so that a hook that answers 200 KB cannot flood a terminal.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable

#: How much deeper than its first line a continuation line is indented.
CONTINUATION_INDENT = 4
#: How many lines of one field of data (advice, a reason, a question, a message) a view shows.
FIELD_LINES = 20
#: How many characters of one of its lines a view shows (an escape counts as it is shown).
LINE_CHARS = 400
#: The same for a `warning` and the `ERROR` line: the supervisor's own words, which end with
#: what to do and may name long paths before it (a hook's words they quote stay bounded).
MESSAGE_CHARS = 2000
#: Where all of a field is, said after what was left out of it.
ALL_OF_IT = "(all of it: --json)"


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


def bounded(
    text: str,
    lines: int = FIELD_LINES,
    *,
    after: str = "",
    what: str = "",
    chars: int = LINE_CHARS,
) -> str:
    """`text` as a view shows a field of data: its first `lines` lines (at its line breaks,
    as `continued` breaks it), each `printable` and cut at `chars` characters as shown
    (ending `...`), `after` (the view's own words) at the end of the last, then, if anything
    was left out, a line saying how much (`left_out`, of `what`). The lines are joined by
    line breaks, for `continued` to indent."""
    if len(text) <= chars and text.isprintable():
        return text + after
    parts = text.splitlines() or [""]
    shown, cut = [], 0
    for part in parts[:lines]:
        line, left = cut_line(part, chars)
        shown.append(line)
        cut += left
    shown[-1] += after
    mark = left_out(max(0, len(parts) - lines), cut, what)
    return "\n".join([*shown, mark] if mark else shown)


def cut_line(text: str, chars: int = LINE_CHARS) -> tuple[str, int]:
    """`text` `printable`, cut at `chars` characters as shown (then ending `...`), and how
    many of its characters were left out."""
    head = text[:chars]
    if head.isprintable():
        taken, line = len(head), head
    else:
        pieces, size = [], 0
        for c in head:
            piece = c if c.isprintable() else c.encode("unicode_escape").decode()
            if size + len(piece) > chars:
                break
            pieces.append(piece)
            size += len(piece)
        taken, line = len(pieces), "".join(pieces)
    left = len(text) - taken
    return (line + "..." if left else line), left


def left_out(lines: int, chars: int, what: str = "") -> str:
    """The line after a field cut short: `... and 4980 more lines and 1200 more characters
    (all of it: --json)` (characters: those cut from the lines shown); "" when nothing was."""
    units = ((lines, "line"), (chars, "character"))
    said = [f"{n} more {unit}{'' if n == 1 else 's'}" for n, unit in units if n]
    if not said:
        return ""
    of = f" of {what}" if what else ""
    return f"... and {' and '.join(said)}{of} {ALL_OF_IT}"
