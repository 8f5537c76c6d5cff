"""A tool server's listings (its tools, prompts, resources and resource templates), each item
kept as the server wrote it beside the SDK's model of it, as a tool's answer is
(`wireresult.py`). The model is what the gateway reads (a tool's name, its `outputSchema`, a
resource's URI); the item as written is what an MCP client of the gateway is listed
(`service/mcpface.py`, `service/mcprelay.py`) and what a server's pin is taken from
(`pins.py`): the SDK's dump of the model sorts its keys, writes a number as its field's
type (`"priority": 1` as `1.0`) and drops every key the model does not know (a newer
revision's, a server's own).

The server's session is a `ListingSession`: the SDK's client, whose listings read each item
as a `Written*` model. Every transport has it (a child's pipes, streamable HTTP), and the
SDK's client does with the listing what it does with its own (its checks, its record of
each tool's `outputSchema`).
"""

from __future__ import annotations

from typing import Any, Final, Self, TypeVar

import pydantic
from mcp import types
from mcp.client.session import ClientSession


class _Kept(pydantic.BaseModel):
    """A listing's item, read from the object the server wrote, which it keeps as read."""

    _written: dict[str, Any] | None = pydantic.PrivateAttr(default=None)

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _keep(cls, data: Any, handler: pydantic.ModelWrapValidatorHandler[Self]) -> Self:
        model = handler(data)
        if isinstance(data, dict) and model is not data:
            model._written = data
        return model


# (each named as the SDK's model is, in what its validation errors say)
class WrittenTool(_Kept, types.Tool):
    model_config = pydantic.ConfigDict(title="Tool")


class WrittenPrompt(_Kept, types.Prompt):
    model_config = pydantic.ConfigDict(title="Prompt")


class WrittenResource(_Kept, types.Resource):
    model_config = pydantic.ConfigDict(title="Resource")


class WrittenTemplate(_Kept, types.ResourceTemplate):
    model_config = pydantic.ConfigDict(title="ResourceTemplate")


class _Tools(types.ListToolsResult):
    model_config = pydantic.ConfigDict(title="ListToolsResult")
    tools: list[WrittenTool]  # type: ignore[assignment]


class _Prompts(types.ListPromptsResult):
    model_config = pydantic.ConfigDict(title="ListPromptsResult")
    prompts: list[WrittenPrompt]  # type: ignore[assignment]


class _Resources(types.ListResourcesResult):
    model_config = pydantic.ConfigDict(title="ListResourcesResult")
    resources: list[WrittenResource]  # type: ignore[assignment]


class _Templates(types.ListResourceTemplatesResult):
    model_config = pydantic.ConfigDict(title="ListResourceTemplatesResult")
    resource_templates: list[WrittenTemplate]  # type: ignore[assignment]


#: The SDK's listing results, and what a `ListingSession` reads each as.
_KEPT: Final[dict[object, type[pydantic.BaseModel]]] = {
    types.ListToolsResult: _Tools,
    types.ListPromptsResult: _Prompts,
    types.ListResourcesResult: _Resources,
    types.ListResourceTemplatesResult: _Templates,
}


class ListingSession(ClientSession):
    """The SDK's client session, whose listings keep each item as the server wrote it."""

    async def send_request(self, request: Any, result_type: Any, *args: Any, **kw: Any) -> Any:
        kept = _KEPT.get(result_type, result_type)
        return await super().send_request(request, kept, *args, **kw)


def as_listed(item: pydantic.BaseModel) -> dict[str, Any]:
    """`item` as a client is listed it: as its server wrote it (with its `name` as the
    model now has it: the gateway's, where it renamed it), else its model's fields (an item
    of the gateway's own)."""
    written = item._written if isinstance(item, _Kept) else None
    if written is None:
        return item.model_dump(by_alias=True, mode="json", exclude_none=True)
    name = getattr(item, "name", None)
    if written.get("name") == name:
        return written
    return {**written, "name": name}  # (the key keeps its place)


_I = TypeVar("_I", bound=pydantic.BaseModel)


def renamed(item: _I, name: str) -> _I:
    """`item` (a tool, a prompt) under `name` (the gateway's), listed as its server wrote it
    but for its name, kept so (`as_listed` then writes nothing)."""
    copy = item.model_copy(update={"name": name})
    kept = copy if isinstance(copy, _Kept) else None
    if kept is not None and kept._written is not None and kept._written.get("name") != name:
        kept._written = {**kept._written, "name": name}  # (the key keeps its place)
    return copy


def redacted_tool(tool: types.Tool, redact: Any) -> types.Tool:
    """`tool` with `redact` (a `Redactor`'s `value`) applied to all but its name, as the
    server wrote it where it was kept."""
    written = as_listed(tool)
    return WrittenTool.model_validate({**redact(written), "name": tool.name}, by_name=False)
