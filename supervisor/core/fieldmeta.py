"""What a record's field may say of its wire form (read by `convert.py`), in a module that
imports nothing, so that any record module can declare it.

`{WIRE: "name"}` names a field on the wire; `KEEP` keeps it there even at its default;
`{SHOWN_WITH: "other"}` keeps it there whenever the field `other` is true; `OMIT` keeps it off
the wire (it stays in the process). `{FROM_WIRE: f}` makes the field's value from its JSON
value, `f(value)` (a field the JSON leaves out keeps its default); `{TO_WIRE: g}` its JSON
value, `g(value)`. `KEEP_KEY` and `OMIT_KEY` are the keys `KEEP` and `OMIT` set, which the
converter asks a field's metadata for.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

WIRE: Final = "wire"
KEEP_KEY: Final = "mcpx.keep"
KEEP: Final = MappingProxyType({KEEP_KEY: True})
SHOWN_WITH: Final = "mcpx.shown_with"
OMIT_KEY: Final = "mcpx.omit"
OMIT: Final = MappingProxyType({OMIT_KEY: True})
FROM_WIRE: Final = "mcpx.from_wire"
TO_WIRE: Final = "mcpx.to_wire"
