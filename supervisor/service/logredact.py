"""The server's log lines without secrets: a filter on the log's handlers that redacts each
record, whichever logger it comes from (ours, the MCP SDK's, nats-py's), with every secret the
runtime knows of: its message and its exception's summary, or its traceback where tracebacks
are written (`core/loglines.py`).

Those are the supervisor's own hooks' secrets, the secrets of the runs in progress (the
bus's) and of the runs still retained (their journals'), so a line about a run that has just
ended is redacted too.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from ..core.hooks import Config
from ..core.loglines import debugging, rendered
from ..run.runtime import Runtime, open_runtime

LOGGER_NAME = "mcpx_hooks.server"
#: Marks a record already redacted (and rendered): the next handler passes it as it is.
_REDACTED = "mcpx_redacted"


class _Redacting(logging.Filter):
    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self._runtime = runtime
        self._debug = debugging()

    def _redact(self, text: str) -> str:
        text = self._runtime.bus.redact_text(text)
        for journal in self._runtime.journals:
            text = journal.redactor.text(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _REDACTED, False):  # (a record goes through each handler)
            return True
        record.msg = self._redact(rendered(record, self._debug))
        record.args, record.exc_info, record.exc_text, record.stack_info = None, None, None, None
        setattr(record, _REDACTED, True)
        return True


@contextlib.contextmanager
def redacting_log(runtime: Runtime) -> Iterator[None]:
    """While the block runs, every handler of the log then redacts every line it is given."""
    handlers = list(logging.getLogger().handlers)
    log_filter = _Redacting(runtime)
    for handler in handlers:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(log_filter)


@contextlib.asynccontextmanager
async def open_logged_runtime(config: Config) -> AsyncIterator[Runtime]:
    """`open_runtime`, with the server's log lines redacted while it is open."""
    async with open_runtime(config) as runtime:
        with redacting_log(runtime):
            yield runtime
