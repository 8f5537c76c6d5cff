"""The pure rooms stay pure: importing `core` and `config` loads no trio and no room above them.

Checked in a fresh interpreter, since this one has imported everything already.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from types import ModuleType

import mcpx_hooks.supervisor.config
import mcpx_hooks.supervisor.core

#: Rooms `core` and `config` never import (nor trio).
ABOVE = ("process", "run", "service", "cli")


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
