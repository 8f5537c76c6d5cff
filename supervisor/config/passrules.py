"""What `validate` says of `passEnv` globs that would match one of the supervisor's own
secrets (the service token, the models' keys, the OpenTelemetry exporter's headers): such a
glob never passes it (a child that needs it names it in `secrets`, and its value is then
redacted), and a pattern written to pass it is most likely a mistake the operator should
hear of before a run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core.hooks import Config, Hook
from ..core.passenv import PASS_ENV_KEY, SECRETS_KEY, withheld_matches
from ..core.places import hook_place
from ..core.servers import ServerSpec


def withheld_warnings(
    config: Config,
    hooks: Iterable[Hook],
    servers: Mapping[str, ServerSpec] | None = None,
) -> list[str]:
    """A warning for each `passEnv` pattern of `hooks`, `servers` and the `[script]` table
    in force that matches a variable the supervisor keeps to itself."""
    keys = config.models.key_names
    said: list[str] = []
    for hook in hooks:
        file, index = hook.source.file, hook.source.index
        at = f"{hook_place(file, index)}/{PASS_ENV_KEY}" if file and index is not None else None
        said += _said(f'hook "{hook.name}"', at, hook.pass_env, keys)
    for name, spec in (servers or {}).items():
        said += _said(f"[servers.{name}] {PASS_ENV_KEY}", None, spec.pass_env, keys)
    said += _said(f"[script] {PASS_ENV_KEY}", None, config.script_pass_env, keys)
    return said


def _said(where: str, at: str | None, globs: tuple[str, ...], keys: frozenset[str]) -> list[str]:
    said = []
    for glob, name in withheld_matches(globs, keys):
        place = f" ({at}/{globs.index(glob)})" if at else ""
        said.append(
            f'{where}{place}: "{glob}" matches {name}, the supervisor\'s own secret, which'
            f" {PASS_ENV_KEY} never passes; to give it to this child, name it in {SECRETS_KEY}"
            " (its value is then redacted)"
        )
    return said
