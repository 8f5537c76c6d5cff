"""`python -m mcpx_hooks.supervisor` is `mcpx-hooks`."""

from .cli.main import entry

entry()
