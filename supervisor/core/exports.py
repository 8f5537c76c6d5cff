"""A room's public names, loaded when first used.

Each room's `__init__.py` names what the rooms above it may use, module by module, and
`exports` makes them attributes of the room that import their module on first access (PEP
562). So `from mcpx_hooks.supervisor.run import Bus` works, and importing one module of a
room (the remote client's `service.wire`, a command's own module) loads that module and
what it imports, not the whole room.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def exports(
    package: str, table: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for the room `package`, whose public names are
    `table`'s: module name -> the names it gives. A name given by two modules is an error
    here. (A name that is also a module of the room would be shadowed by that module once
    imported; `tests/test_rooms.py` keeps the tables free of those, without a directory
    listing at every start.)"""
    where: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name} is given by both {where[name]} and {module}")
            where[name] = module
    public = sorted(where)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return public

    return public, __getattr__, __dir__
