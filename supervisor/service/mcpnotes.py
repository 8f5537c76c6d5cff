"""A tool server's notifications on a call's way (its progress, its log messages), sent to the
MCP client as the server wrote them: their params' keys in its order, its numbers as it wrote
them (`0`, not the SDK's `0.0`), the keys of a newer revision or of its own kept; only the
progress token is the client's. On the SDK's request context, a notification is sent by the
SDK's session as any other (on the call's own request: over HTTP, its response), but as a
model whose dump is what the server wrote (`as_written`), not the SDK's models' rewrite."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pydantic
from mcp import types

#: The key of a request's `_meta` (and of a progress notification's params) that names the
#: request a progress is about.
PROGRESS_TOKEN: Final = "progressToken"


class _AsWritten(pydantic.BaseModel):
    """A notification whose dump (what the SDK's session sends) is `method` and the params
    as they were written, nothing added or rewritten."""

    _params: dict[str, Any] = pydantic.PrivateAttr(default_factory=dict)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"method": getattr(self, "method"), "params": self._params}  # noqa: B009


class _Progress(_AsWritten, types.ProgressNotification):
    pass


class _Log(_AsWritten, types.LoggingMessageNotification):
    pass


def progress_as_written(
    written: Mapping[str, Any], token: types.ProgressToken
) -> types.ProgressNotification:
    """The server's progress notification (its params `written`), for the client whose
    progress token is `token`: the server's token replaced by it, where the server wrote it."""
    sent = _Progress.model_construct()
    sent._params = {**written, PROGRESS_TOKEN: token}
    return sent


def log_as_sent(written: Mapping[str, Any]) -> types.LoggingMessageNotification:
    """The server's log message (its params `written`), as the client is sent it."""
    sent = _Log.model_construct()
    sent._params = dict(written)
    return sent
