"""The log a person reads on stderr (of every command; `serve`, `worker` and `mcp` name
themselves in its prefix): one line a record, `PREFIX:
message`, whichever library logged it. An exception logged with a record is its one-line
summary (`bug_summary`); its traceback is written only with `MCPX_HOOKS_DEBUG=1`, which also
lets every level through (else warnings and errors). The MCP SDK, for one, logs a failed
handler with its traceback: without this, that traceback would reach the operator's
terminal.

A Python warning (`warnings.warn`, a library's deprecation) is logged too, as its first line
(`FILE:LINE: CATEGORY: message`), never written to stderr as `warnings` would by itself.

`rendered` is the text a record becomes; the service's redaction (`service/logredact.py`)
renders a record so, redacts it, and leaves it a plain message. A line of the log holds what
others said (a collector's HTTP reason phrase, a server's message): written to the terminal,
each character that is not printable is its escape (`\\x1b`), and a line break in a message
starts an indented line, never one that reads as the log's own.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from .errors import DEBUG_ENV, bug_summary


def debugging(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(DEBUG_ENV, "") not in ("", "0")


def rendered(record: logging.LogRecord, debug: bool) -> str:
    """The record's message, then its exception's summary, or with `debug` its traceback (and
    the stack it was logged with)."""
    text = record.getMessage()
    if record.name == "py.warnings":  # "FILE:LINE: CATEGORY: message", then the source line
        text = text.strip().partition("\n")[0]
    error = record.exc_info[1] if record.exc_info else None
    if error is not None and not debug:
        text = f"{text}: {bug_summary(error)}"
    elif debug:
        if record.exc_info and error is not None:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        for more in (record.exc_text, record.stack_info):
            if more:
                text = f"{text}\n{more}"
    return text


class LogLines(logging.Formatter):
    """`PREFIX: ` and the record `rendered`."""

    def __init__(self, prefix: str, debug: bool) -> None:
        super().__init__()
        self.prefix = prefix
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        first, *rest = f"{self.prefix}: {rendered(record, self.debug)}".split("\n")
        return "\n".join([_printable(first), *("    " + _printable(line) for line in rest)])


def _printable(line: str) -> str:
    """`line` with each character that is not printable (ESC, CR, a C1 control, U+202E…)
    written as its Python escape."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in line)


def log_to_stderr(prefix: str) -> None:
    """The process's log: one `LogLines` handler on stderr, in place of any other. A Python
    warning is a record of it too (logger `py.warnings`), one line, not the two that
    `warnings` writes to stderr by itself."""
    debug = debugging()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogLines(prefix, debug))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.captureWarnings(True)
