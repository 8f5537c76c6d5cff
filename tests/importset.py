"""What a command of the CLI imports, run in a fresh interpreter (`test_import_weight.py`,
`test_cli.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: Runs the CLI in process, then writes the names of the modules it imported to argv[1].
_IMPORTS_OF = """
import json, sys
from mcpx_hooks.supervisor.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def imported_by(args: list[str], cwd: Path) -> set[str]:
    """The modules (and their packages) a command imported, run once to warm the cache."""
    out = cwd / "modules.json"
    env = {
        **os.environ,
        "MCPX_HOOKS_NO_DISCOVERY": "1",
        "XDG_STATE_HOME": str(cwd / "state"),
    }
    for _ in range(2):  # the first start compiles and keeps the schemas' checks
        done = subprocess.run(
            [sys.executable, "-c", _IMPORTS_OF, str(out), *args],
            check=True,
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=60,
        )
    got = json.loads(out.read_text())
    assert got["code"] == 0, done.stdout + done.stderr
    modules: list[str] = got["modules"]
    packages = {".".join(m.split(".")[:n]) for m in modules for n in range(1, m.count(".") + 1)}
    return {*modules, *packages}
