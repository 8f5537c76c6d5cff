"""A command line written on one line as a shell (bash) takes it back: each argument quoted
as `shlex.quote` does, and one that holds a character that is not printable in bash's `$'…'`
quoting, that character escaped (`$'arg\\x1b[31m'`). So a command line printed for a person
(a run's argv, the command that trusts a file) is one line, free of control characters, and
still runs when pasted. Pure, standard library only.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Final


def shell_line(argv: Iterable[object]) -> str:
    """`argv` on one line, each argument quoted as a shell takes it back."""
    return " ".join(
        shlex.quote(arg) if arg.isprintable() else _ansi_c(arg) for arg in map(str, argv)
    )


#: How `$'…'` writes the characters that have a short escape of their own.
_SHORT: Final = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _ansi_c(arg: str) -> str:
    def escaped(c: str) -> str:
        if c in _SHORT:
            return _SHORT[c]
        if c.isprintable():
            return c
        code = ord(c)
        return (
            f"\\x{code:02x}"
            if code < 0x80
            else f"\\u{code:04x}"
            if code <= 0xFFFF
            else f"\\U{code:08x}"
        )

    return "$'" + "".join(map(escaped, arg)) + "'"
