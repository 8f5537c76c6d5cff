"""A command line written on one line as a shell (bash) takes it back: each argument quoted
as `shlex.quote` does, and one that holds a character that is not printable in bash's `$'…'`
quoting, that character escaped (`$'arg\\x1b[31m'`). So a command line printed for a person
(a run's argv, the command that trusts a file) is one line, free of control characters, and
still runs when pasted. Pure, standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

#: A character `shlex.quote` quotes an argument for (written out here: `exec` shows a run's
#: command line, and its import set holds no `shlex`).
_UNSAFE: Final = re.compile(r"[^\w@%+=:,./-]", re.ASCII).search


def shell_line(argv: Iterable[object]) -> str:
    """`argv` on one line, each argument quoted as a shell takes it back."""
    return " ".join(quote(arg) if arg.isprintable() else ansi_c(arg) for arg in map(str, argv))


def quote(arg: str) -> str:
    """`arg` as `shlex.quote` writes it: as it is when nothing in it is special to a shell,
    else in single quotes (a single quote in it as `'"'"'`)."""
    if not arg:
        return "''"
    if _UNSAFE(arg) is None:
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


#: How `$'…'` writes the characters that have a short escape of their own.
_SHORT: Final = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def ansi_c(arg: str) -> str:
    """`arg` in bash's `$'…'` quoting, each character that is not printable escaped."""

    def escaped(c: str) -> str:
        if c in _SHORT:
            return _SHORT[c]
        if c.isprintable():
            return c
        code = ord(c)
        if 0xDC80 <= code <= 0xDCFF:  # a byte no UTF-8 holds, as a path's name kept it
            return f"\\x{code - 0xDC00:02x}"
        return (
            f"\\x{code:02x}"
            if code < 0x80
            else f"\\u{code:04x}"
            if code <= 0xFFFF
            else f"\\U{code:08x}"
        )

    return "$'" + "".join(map(escaped, arg)) + "'"
