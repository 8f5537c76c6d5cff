"""The command line: the parser, one module per command group, the readable view, `doctor`
and `demo`.

The entry point is `main.main` (`mcpx-hooks`, `python -m mcpx_hooks.supervisor`); the
readable view is given below, loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {"view": ("frame_lines", "hook_frame_lines"), "hooktable": ("hook_table",)},
)
