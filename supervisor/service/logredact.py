"""The server's log lines without secrets: a filter on its logger that redacts each record
(its message and any traceback) with every secret the runtime knows of.

Those are the supervisor's own hooks' secrets, the secrets of the runs in progress (the
bus's) and of the runs still retained (their journals'), so a line about a run that has just
ended is redacted too.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from ..core.hooks import Config
from ..run.runtime import Runtime, open_runtime

LOGGER_NAME = "mcpx_hooks.server"


class _Redacting(logging.Filter):
    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self._runtime = runtime

    def _redact(self, text: str) -> str:
        text = self._runtime.bus.redact_text(text)
        for journal in self._runtime.journals:
            text = journal.redactor.text(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = self._redact(record.getMessage())
        if record.exc_info:
            record.exc_text = self._redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        record.msg, record.args = message, None
        return True


@contextlib.contextmanager
def redacting_log(runtime: Runtime) -> Iterator[None]:
    """While the block runs, the server's logger redacts every line it is given."""
    logger = logging.getLogger(LOGGER_NAME)
    log_filter = _Redacting(runtime)
    logger.addFilter(log_filter)
    try:
        yield
    finally:
        logger.removeFilter(log_filter)


@contextlib.asynccontextmanager
async def open_logged_runtime(config: Config) -> AsyncIterator[Runtime]:
    """`open_runtime`, with the server's log lines redacted while it is open."""
    async with open_runtime(config) as runtime:
        with redacting_log(runtime):
            yield runtime
