"""`mcpx-hooks demo`: the main job in miniature, on a built-in example, ending by itself.

Today it runs each hook of the example config (`examples/demo.toml`) the way `hook test`
does, against the payload its phase would get, and shows its hook frame.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Final

from .cli import mock_context
from .config import load_config
from .frames import to_json
from .hookrun import run_hook
from .spawn import open_spawner
from .view import hook_frame_lines

#: What the demo's script run would hand each phase.
SAMPLE: Final[dict[str, Any]] = {
    "input": {"name": "world"},
    "result": {"value": "hello, world"},
}


def example_config() -> Path:
    return Path(str(resources.files("mcpx_hooks.supervisor").joinpath("examples/demo.toml")))


async def run_demo() -> int:
    path = example_config()
    config = load_config([path], cwd=path.parent, environ=os.environ, discover=False)
    print(f"mcpx-hooks demo: the hooks of {path}, each run as its phase would run it\n")
    async with open_spawner() as spawner:
        for hook in config.hooks:
            ctx = mock_context(config, hook.phase, SAMPLE)
            report = await run_hook(spawner, hook, ctx)
            print("\n".join(hook_frame_lines(to_json(report.frame))), end="\n\n")
    print("every hook above ran as a real process, its tree reaped; nothing is left running")
    return 0
