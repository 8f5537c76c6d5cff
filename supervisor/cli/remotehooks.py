"""What `exec --remote` sends of the caller's own config: the hooks and source lines its layers
resolve to here (the discovered files, with trust, `--config`, `--hook`, the source flags), as
per-call hooks and script lines, so the server's run sees what a local run in this directory
would. A file the server applies itself is left out (its hooks would run twice)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.places import hook_place

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Collection, Mapping, Sequence
    from typing import Any

    from ..core.hooks import Config, Hook


def caller_config(
    args: argparse.Namespace,
    script: Mapping[str, Sequence[str | None]] | None,
    server_files: Collection[str] = (),
) -> Config:
    """The caller's config, as `exec` here would load it, without the files in
    `server_files`. What loading says is the caller's to print, once."""
    from ..config.loading import load_config

    config = load_config(
        args.config,
        cwd=Path.cwd(),
        environ=os.environ,
        command_line_hooks=args.hooks,
        script=script,
        trust_project=args.trust_project,
        exclude=server_files,
    )
    return config


def per_call_hooks(config: Config) -> list[dict[str, Any]]:
    """The config's `script` hooks as per-call hook objects, in order. A hook on another
    point cannot go with a run (the server's config decides those): each one left out is
    said on stderr."""
    from ..core.percall import per_call_hook

    sent: list[dict[str, Any]] = []
    for hook in config.hooks:
        if hook.on == "script":
            sent.append(per_call_hook(hook))
            continue
        print(
            f'mcpx-hooks exec: warning: hook "{hook.name}" ({hook.on}.{hook.phase.value},'
            f" {_where(hook)}) is not sent with --remote: a run carries hooks of the script"
            " point only; the server's own config decides the others",
            file=sys.stderr,
        )
    return sent


def script_lines(config: Config) -> dict[str, list[str | None]]:
    """The config's source phases, appended to the server's (`[null, …]`)."""
    return {phase.value: [None, *lines] for phase, lines in config.script.items() if lines}


def _where(hook: Hook) -> str:
    source = hook.source
    return hook_place(source.file, source.index) if source.file else source.kind.value
