"""Leaving hooks out of one run: `exec --skip NAME`, `--only NAME` (each repeatable) and
`MCPX_HOOKS_SKIP=a,b` (pre-commit's `SKIP`). Pure.

- `--skip` and the variable leave out the hooks they name; `--only` leaves out every hook it
  does not name. A hook left out is not run, leaves no frame, and the run's one `warning`
  frame lists it (with what left it out).
- A locked hook is the operator's policy: leaving it out, by any of the three, is refused
  (exit 2, nothing runs), naming the file and the place that locked it; with `--only`, name
  it too.
- A name given by a flag that no hook in force has is refused as a typo (exit 2); a name in
  the variable that no hook has is passed over, as pre-commit does (the variable is often
  set for a whole CI job, across projects), and said in the run's warning, in the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from .errors import HooksError
from .hooks import Config, Hook, SourceKind
from .places import hook_place
from .records import Record

#: The variable that skips hooks by name, comma-separated (pre-commit's `SKIP`).
SKIP_ENV: Final = "MCPX_HOOKS_SKIP"


class SelectionError(HooksError):
    """A `--skip`/`--only`/`MCPX_HOOKS_SKIP` that cannot be honoured: nothing runs (exit 2)."""


@attrs.frozen(repr=False, eq=False)
class Selection(Record):
    """What one run leaves out, as the caller said it."""

    skip: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    #: `MCPX_HOOKS_SKIP`'s names.
    env_skip: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.skip or self.only or self.env_skip)


def env_names(environ: Mapping[str, str]) -> tuple[str, ...]:
    """`MCPX_HOOKS_SKIP`'s names: split on commas, blanks trimmed, empty ones dropped."""
    value = environ.get(SKIP_ENV, "")
    return tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))


def _named_in(name: str, env_skip: tuple[str, ...]) -> bool:
    """Whether `MCPX_HOOKS_SKIP`'s names (`env_names`) name `name`; a name that holds commas
    is named by its pieces, one after the other, as writing it in the variable splits it."""
    if name in env_skip:
        return True
    pieces = tuple(p.strip() for p in name.split(",") if p.strip())
    if len(pieces) < 2:
        return False
    return any(env_skip[i : i + len(pieces)] == pieces for i in range(len(env_skip)))


def locker(hook: Hook) -> str:
    """Who locked `hook`: its file and pointer, as a config problem names them."""
    source = hook.source
    if source.kind is SourceKind.FILE and source.file is not None:
        return hook_place(source.file, source.index)
    return f"its {source.kind.value} declaration"


def _why(hook: Hook, selection: Selection) -> list[str]:
    """What leaves `hook` out, if anything: each way, in words."""
    ways = []
    if hook.name in selection.skip:
        ways.append("--skip")
    if _named_in(hook.name, selection.env_skip):
        ways.append(SKIP_ENV)
    if selection.only and hook.name not in selection.only:
        ways.append("not named by --only")
    return ways


def _no_such(unknown: list[str], names: set[str], how: str) -> str:
    """That no hook in force has the names `unknown`, as a flag's refusal and the variable's
    warning both say it."""
    shown = ", ".join(f'"{n}"' for n in dict.fromkeys(unknown))
    have = ", ".join(sorted(names)) or "none"
    return f"no hook in force is named {shown} ({how}; those in force: {have})"


def env_unknown(config: Config, selection: Selection) -> str | None:
    """What to say of `MCPX_HOOKS_SKIP`'s names that no hook in force has (passed over), if
    any; a piece of a hook name that holds commas is a name it has."""
    names = {h.name for h in config.hooks}
    pieces = {p.strip() for n in names for p in n.split(",")}
    unknown = [n for n in selection.env_skip if n not in names and n not in pieces]
    if not unknown:
        return None
    how = f"{SKIP_ENV} takes hook names; passed over"
    return f"{SKIP_ENV}: {_no_such(unknown, names, how)}"


def left_out(config: Config, selection: Selection) -> dict[str, str]:
    """The hooks of `config` that `selection` leaves out, by name: what leaves each out, in
    words. Raises `SelectionError` for a locked hook left out or a flag's name no hook has."""
    names = {h.name for h in config.hooks}
    unknown = [n for n in (*selection.skip, *selection.only) if n not in names]
    if unknown:
        raise SelectionError(_no_such(unknown, names, "--skip/--only take hook names"))
    left: dict[str, str] = {}
    for hook in config.hooks:
        ways = _why(hook, selection)
        if not ways:
            continue
        if hook.locked:
            hint = "; name it with --only too" if ways == ["not named by --only"] else ""
            raise SelectionError(
                f'hook "{hook.name}" is locked by {locker(hook)}: it cannot be left out of a'
                f" run ({', '.join(ways)}){hint}"
            )
        left[hook.name] = ", ".join(ways)
    return left


def select(config: Config, selection: Selection) -> Config:
    """`config` without the hooks `selection` leaves out, and with one more warning that
    lists them (each a run's `warning` frame: one), and one more for names in the variable no
    hook has. Raises as `left_out` does."""
    if selection.empty:
        return config
    left = left_out(config, selection)
    said = [] if (unknown := env_unknown(config, selection)) is None else [unknown]
    if left:
        listed = ", ".join(f"{name} ({why})" for name, why in left.items())
        said.insert(0, f"hooks left out of this run: {listed}")
    if not said:
        return config
    kept = tuple(h for h in config.hooks if h.name not in left)
    return attrs.evolve(config, hooks=kept, warnings=(*config.warnings, *said))
