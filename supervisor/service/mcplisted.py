"""The gateway's listings (`tools/list`, `prompts/list`, `resources/list`,
`resources/templates/list`) as a client gets them: each item as its server wrote it
(`tools/listings.py`: its keys in its order, its numbers as written, a key of its own or of
a newer revision kept), with the gateway's own changes only: a tool's or a prompt's name
with its server's prefix, and the items `expose`, `hide` and a quarantine leave out. An item
of the gateway's own (`mcpx_exec`), or one its server's session read without keeping it, is
its model's fields."""

from __future__ import annotations

from typing import Final, TypeVar

import pydantic

from ..tools.listings import as_listed
from .mcpcalls import keep_written

_L = TypeVar("_L", bound=pydantic.BaseModel)
#: Each listing's items: the key they are written under, and the SDK's model's field.
_ITEMS: Final = (
    ("tools", "tools"),
    ("prompts", "prompts"),
    ("resources", "resources"),
    ("resourceTemplates", "resource_templates"),
)


def keep_listed(result: _L) -> _L:
    """`result`, the gateway's answer to a listing, kept for the client as it is sent
    (`mcpcalls.answer_as_written`): each item as its server wrote it."""
    for key, field in _ITEMS:
        items = getattr(result, field, None)
        if isinstance(items, list):
            rest = result.model_dump(
                by_alias=True, mode="json", exclude_unset=True, exclude_none=True, exclude={field}
            )
            keep_written({**rest, key: [as_listed(item) for item in items]})
            break
    return result
