"""A room's public names, loaded when first used.

Each room's `__init__.py` names what the rooms above it may use, module by module, and
`exports` makes them attributes of the room that import their module on first access (PEP
562). So `from mcpx_hooks.supervisor.run import Bus` works, and importing one module of a
room (the remote client's `service.wire`, a command's own module) loads that module and
what it imports, not the whole room.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def exports(
    package: str, table: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for the room `package`, whose public names are
    `table`'s: module name -> the names it gives. A name given by two modules, or one that
    is also a module of the room, is an error here: importing that module would make the
    room's attribute the module, so a room never says two things under one name."""
    modules = {m.name for m in pkgutil.iter_modules(sys.modules[package].__path__)}
    where: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name} is given by both {where[name]} and {module}")
            if name in modules:
                raise ValueError(f"{package}: {name} is also a module of the room")
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
