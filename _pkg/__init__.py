"""mcpx-hooks: a Trio supervisor for sandboxed hooks around script runs."""

__version__ = "0.1.0"
