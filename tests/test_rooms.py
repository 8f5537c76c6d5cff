"""The rooms' public names: what each `__init__.py` gives is what the rooms above use, it is
loaded only when used, and a room's name means one thing."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.core.exports import exports

SUPERVISOR = Path(__file__).resolve().parent.parent / "supervisor"
ROOMS = (
    "core",
    "config",
    "process",
    "models",
    "tools",
    "history",
    "run",
    "service",
    "cluster",
    "cli",
)
PACKAGE = "mcpx_hooks.supervisor"


def room(name: str) -> types.ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def cross_room_imports() -> list[tuple[str, str, str, str]]:
    """(file, room, module, name) for every `from ..room.module import name` in the
    supervisor that crosses from one room into another."""
    found = []
    for path in sorted(SUPERVISOR.rglob("*.py")):
        parts = path.relative_to(SUPERVISOR).parts
        if len(parts) < 2:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 2 and node.module):
                continue
            target, _, module = node.module.partition(".")
            if target in ROOMS and target != parts[0] and module and module != "exports":
                found += [(str(path), target, module, a.name) for a in node.names]
    return found


@pytest.mark.parametrize("name", ROOMS)
def test_every_name_a_room_gives_is_its_module_s(name: str) -> None:
    package = room(name)
    assert package.__all__ == sorted(package.__all__)
    for public in package.__all__:
        assert getattr(package, public) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = package.nothing_here


def test_what_one_room_takes_from_another_is_what_it_gives() -> None:
    imports = cross_room_imports()
    assert len(imports) > 100  # the scan does see the imports
    missing = [
        f"{file}: {target}.{module}.{name}"
        for file, target, module, name in imports
        if not name.startswith("_") and name not in room(target).__all__
    ]
    assert not missing, "not in the room's __init__.py:\n" + "\n".join(missing)
    for _file, target, module, name in imports:
        if not name.startswith("_"):
            given = getattr(importlib.import_module(f"{PACKAGE}.{target}.{module}"), name)
            assert getattr(room(target), name) is given, (target, module, name)


@pytest.mark.parametrize("name", ROOMS)
def test_importing_a_room_loads_none_of_its_modules(name: str) -> None:
    code = (
        f"import sys, {PACKAGE}.{name}\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(done.stdout))
    assert loaded <= {f"{PACKAGE}.{name}", f"{PACKAGE}.core", f"{PACKAGE}.core.exports"}


def test_a_name_means_one_thing_in_a_room() -> None:
    with pytest.raises(ValueError, match="given by both a and b"):
        exports("mcpx_hooks.supervisor.core", {"a": ("X",), "b": ("X",)})


@pytest.mark.parametrize("name", ROOMS)
def test_no_name_a_room_gives_is_one_of_its_modules(name: str) -> None:
    # Importing that module would make the room's attribute the module, not the name.
    modules = {p.stem for p in (SUPERVISOR / name).glob("*.py")}
    assert not set(room(name).__all__) & modules


def test_the_remote_client_loads_the_wire_not_the_server() -> None:
    code = (
        f"import sys, {PACKAGE}.service.remote\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(done.stdout))
    assert f"{PACKAGE}.service.wire" in loaded
    heavy = {f"{PACKAGE}.{m}" for m in ("service.server", "run", "process.spawner", "cli")}
    assert not loaded & heavy


#: The most lines a module of the supervisor or the runners may have: past it, a module holds
#: more than one idea and is split (the style guide's 100-400 lines a module).
MODULE_LINES = 400


def test_no_module_is_longer_than_its_ceiling() -> None:
    long = {
        str(path.relative_to(SUPERVISOR.parent)): n
        for top in (SUPERVISOR, SUPERVISOR.parent / "runners")
        for path in sorted(top.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}
