"""A tool server's answer to a call, and its log messages, kept as the server wrote them
beside the SDK's models of them. The model is what hooks and checks read; it is not what a
client should get back: its dump adds the defaults the server never wrote (`isError:
false`), writes a number as its field's type (`"priority": 1` as `1.0`), and drops every
key the model does not know (a newer revision's, a server's own). An answer no hook replaced
goes to the client as `written` (`service/mcpcalls.py`); so does a log message
(`WrittenLog`), and a progress notification's params, which go to their hearer as written
too (`rawchannel.py`)."""

from __future__ import annotations

from typing import Any, Self

import pydantic
from mcp import types


class _Written(pydantic.BaseModel):
    """A model read from `written`, the object the server wrote, which it keeps as read."""

    _written: dict[str, Any] = pydantic.PrivateAttr(default_factory=dict)

    @classmethod
    def read(cls, written: dict[str, Any]) -> Self:
        """The model `written` holds; raises `pydantic.ValidationError` when it is none."""
        model = cls.model_validate(written, by_name=False)
        model._written = written
        return model

    def as_written(self) -> dict[str, Any]:
        return self._written


class WrittenResult(_Written, types.CallToolResult):
    """A `CallToolResult` read from `written`, the `result` object of the server's answer."""

    # (named as the SDK's model is, in what its validation errors say)
    model_config = pydantic.ConfigDict(title="CallToolResult")


def as_written(result: types.CallToolResult) -> dict[str, Any] | None:
    """The `result` object as the server wrote it, when `result` is a server's answer read
    from its line; else None (one made here, or read by the SDK's client)."""
    return result.as_written() if isinstance(result, WrittenResult) else None


class WrittenLog(_Written, types.LoggingMessageNotificationParams):
    """A log message's params read from `written`, the `params` object of the server's
    `notifications/message`: its level is what a client's level is checked against,
    `written` what the client is sent."""

    model_config = pydantic.ConfigDict(title="LoggingMessageNotificationParams")


def log_as_written(params: types.LoggingMessageNotificationParams) -> dict[str, Any] | None:
    """The log message's params as the server wrote them, when they were read from its line;
    else None (read by the SDK's client)."""
    return params.as_written() if isinstance(params, WrittenLog) else None
