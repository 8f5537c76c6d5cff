"""The pure rooms stay pure: importing `core` and `config` loads no trio and no room above them;
`runners/` imports the standard library and itself only; no supervisor module takes another's
private name.

The imports are checked in a fresh interpreter, since this one has imported everything already;
the runners' rule is read from their source (ast), every import at any depth.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import mcpx_hooks.runners
import mcpx_hooks.supervisor
import mcpx_hooks.supervisor.config
import mcpx_hooks.supervisor.core

#: Rooms `core` and `config` never import (nor trio).
ABOVE = ("process", "models", "tools", "run", "service", "cluster", "cli")


def _modules(package: ModuleType) -> list[str]:
    return [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]


PURE = _modules(mcpx_hooks.supervisor.core) + _modules(mcpx_hooks.supervisor.config)

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def test_core_and_config_import_no_trio_and_nothing_above_them() -> None:
    assert "mcpx_hooks.supervisor.config.loading" in PURE
    assert "mcpx_hooks.supervisor.core.frames" in PURE
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *PURE], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    assert [m for m in loaded if m == "trio" or m.startswith("trio.")] == []
    rooms = [m.split(".") for m in loaded if m.startswith("mcpx_hooks.supervisor.")]
    assert [".".join(parts) for parts in rooms if parts[2] in ABOVE] == []


#: What only the rooms above `core` may use: processes, limits, sockets, signals, the C library.
SYSCALL_MODULES = ("resource", "subprocess", "socket", "signal", "ctypes", "pwd")


def test_core_imports_nothing_that_makes_system_calls() -> None:
    core = _modules(mcpx_hooks.supervisor.core)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *core], capture_output=True, text=True, check=True
    ).stdout
    assert [m for m in json.loads(out) if m in SYSCALL_MODULES] == []


#: What a runner may import besides the standard library: its own package, under either name
#: (`mcpx_hooks.runners` installed, `runners` when the spawner runs from its directory).
RUNNERS_OWN = ("runners", "mcpx_hooks.runners")
RUNNERS = Path(mcpx_hooks.runners.__file__).parent


def imports_outside_stdlib(source: str, own: tuple[str, ...] = RUNNERS_OWN) -> list[str]:
    """Every import in `source`, at any depth, that is neither the standard library nor `own`.

    An allowlist: a name is let through only if it is in `sys.stdlib_module_names` or is one of
    `own` (or below it); a relative import is let through only within the package (one dot).
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                continue
            names = ["." * node.level + (node.module or "")]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names:
                continue
            if any(name == pkg or name.startswith(pkg + ".") for pkg in own):
                continue
            found.append(name)
    return found


def test_runners_import_only_the_standard_library_and_themselves() -> None:
    files = sorted(RUNNERS.glob("*.py"))
    assert RUNNERS / "spawner.py" in files
    outside = {f.name: imports_outside_stdlib(f.read_text()) for f in files}
    assert {name: found for name, found in outside.items() if found} == {}


def test_the_runners_rule_refuses_what_is_not_the_standard_library() -> None:
    planted = (
        "import os, json\nfrom . import libc\nfrom runners.libc import nr\n"
        "import mcpx_hooks.runners.protocol\n"
        "def f():\n    import httpx\n"
        "if True:\n    from trio import sleep\n"
        "from .. import supervisor\nfrom mcpx_hooks.supervisor.core import frames\n"
        "import mcpx_hooks\n"
    )
    assert sorted(imports_outside_stdlib(planted)) == [
        "..",
        "httpx",
        "mcpx_hooks",
        "mcpx_hooks.supervisor.core",
        "trio",
    ]


SUPERVISOR = Path(mcpx_hooks.supervisor.__file__).parent


def _module_of(path: Path) -> tuple[str, bool]:
    """The dotted name of a supervisor file, and whether it is a package's `__init__`."""
    parts = list(path.relative_to(SUPERVISOR).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join(["mcpx_hooks", "supervisor", *parts]), package


SUPERVISOR_MODULES = {_module_of(p)[0]: p for p in sorted(SUPERVISOR.rglob("*.py"))}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_crossings(
    source: str, module: str, package: bool, known: Iterable[str] = SUPERVISOR_MODULES
) -> list[str]:
    """Every private name of another project module that `source` (the module `module`)
    imports (`from x import _name`) or reaches (`x._name`, `x` a module it imported)."""
    modules = set(known)
    here = module.split(".") if package else module.split(".")[:-1]
    bound: dict[str, str] = {}  # a local name -> the project module it is
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            if not target.startswith("mcpx_hooks"):
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"from {target} import {alias.name}")
                if f"{target}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("mcpx_hooks") and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        dotted, value = [], node.value
        while isinstance(value, ast.Attribute):
            dotted.insert(0, value.attr)
            value = value.value
        if not isinstance(value, ast.Name):
            continue
        if value.id in bound:
            dotted.insert(0, bound[value.id])
        elif value.id == "mcpx_hooks":
            dotted.insert(0, value.id)
        else:
            continue
        target = ".".join(dotted)
        if target in modules and target != module:
            found.append(f"{target}.{node.attr}")
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    assert "mcpx_hooks.supervisor.run.hookframe" in SUPERVISOR_MODULES
    crossing = {
        name: found
        for name, path in SUPERVISOR_MODULES.items()
        if (found := private_crossings(path.read_text(), *_module_of(path)))
    }
    assert crossing == {}


def test_the_private_names_rule_finds_both_spellings() -> None:
    known = ["mcpx_hooks.supervisor.run.hookframe", "mcpx_hooks.supervisor.run.hookrun"]
    planted = (
        "from .hookframe import FrameBuilder, _text\n"
        "from ..run.hookframe import _text as text\n"
        "from . import hookframe\n"
        "import mcpx_hooks.supervisor.run.hookrun as hr\n"
        "from trio import _core\n"
        "def f(self):\n"
        "    hookframe._text(b'')\n"
        "    hr.KINDS, hr._x, self._y, hookframe.__name__\n"
        "    mcpx_hooks.supervisor.run.hookframe._text(b'')\n"
    )
    found = private_crossings(planted, "mcpx_hooks.supervisor.run.prompthook", False, known)
    assert found == [
        "from mcpx_hooks.supervisor.run.hookframe import _text",
        "from mcpx_hooks.supervisor.run.hookframe import _text",
        "mcpx_hooks.supervisor.run.hookframe._text",
        "mcpx_hooks.supervisor.run.hookrun._x",
        "mcpx_hooks.supervisor.run.hookframe._text",
    ]
