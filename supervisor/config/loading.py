"""Config files: found, read, validated, layered, and built into the `Config` in force.

Pure apart from reading files: no trio. Every layer is validated against
`schemas/config.schema.json` before anything is merged, and every problem in every layer is
collected before `ConfigError` is raised, so one run of `validate` shows them all.

Layers apply farthest first: `/etc/mcpx-hooks/config.toml`, the user's
`$XDG_CONFIG_HOME/mcpx-hooks/config.toml`, each `.mcpx-hooks.toml` / `.mcpx-hooks.json` from `/`
down to the working directory, the `--config` files in order, the `--hook` hooks, then per-call
hooks and script lines. Command-line and per-call hooks are appended to the hooks in force (a
layer `[null, hook]`).

`[sandbox] read` and `write` hold paths: `~` and `~/…` are the supervisor's home (`$HOME`, else
its passwd entry), `~user/…` that user's, and a relative path is resolved against the directory
of the file that declares it, when the file is read; the lists of all layers are then appended
(`layering.APPEND`), never replaced.

TOML has no `null`: in a TOML file, a list item that is exactly the table `{inherit = true}`
(or a `[[hooks]]` entry holding only `inherit = true`) stands for `null`.

Nothing wrong with a file raises anything but `ConfigError`: a file that is not a regular
file (a directory, a dangling symlink, a symlink loop, a FIFO), one that cannot be read or
decoded, one that does not parse, and one nested deeper than `jsontext.MAX_DEPTH` are each a
`Problem` naming the file. So is a discovered name that exists as anything but a readable
regular file: it is reported, never skipped.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from ..core import jsontext
from ..core.effects import DEFAULT_MAX, REFUSING, Effect
from ..core.errors import ConfigError, Problem
from ..core.hooks import (
    DEFAULT_RETAIN_BYTES,
    DEFAULT_RUN_BYTES,
    DEFAULT_RUN_SANDBOX,
    DEFAULT_RUNS_RETAIN,
    DEFAULT_SERVICE_SANDBOXES,
    Action,
    Config,
    Defaults,
    Failure,
    Hook,
    Profile,
    Provenance,
    SandboxPaths,
    SourceKind,
)
from ..core.limits import Limits
from ..core.points import POINTS, Phase
from . import layering
from .problems import describe, pointer_key
from .problems import problems as schema_problems
from .schemas import HOOK_ACTIONS, SCRIPT_PHASES, hook_validator, validator

ETC_DIR: Final = Path("/etc/mcpx-hooks")
USER_FILE: Final = Path("mcpx-hooks") / "config.toml"
LOCAL_NAMES: Final = (".mcpx-hooks.toml", ".mcpx-hooks.json")
#: Set to anything but "" or "0" to skip discovery (tests and the demo do).
NO_DISCOVERY_ENV: Final = "MCPX_HOOKS_NO_DISCOVERY"
#: TOML's stand-in for a `null` list item.
TOML_NULL: Final[Mapping[str, Any]] = {"inherit": True}
_PHASE_WORDS: Final = frozenset(p.value for p in Phase)


def discover_files(cwd: Path, environ: Mapping[str, str], *, etc_dir: Path = ETC_DIR) -> list[Path]:
    """The config names that exist, farthest first; none when `MCPX_HOOKS_NO_DISCOVERY` is set.

    The user file is `$XDG_CONFIG_HOME/mcpx-hooks/config.toml` when that variable is an
    absolute path, else `$HOME/.config/mcpx-hooks/config.toml` (nothing without `HOME`).
    A name counts when anything is there (`os.path.lexists`): a directory, a dangling
    symlink or a symlink loop is returned too, and loading it is a `Problem`, so a config
    that was meant to apply never vanishes without a word.
    """
    if environ.get(NO_DISCOVERY_ENV, "") not in ("", "0"):
        return []
    candidates = [etc_dir / "config.toml"]
    xdg, home = environ.get("XDG_CONFIG_HOME", ""), environ.get("HOME", "")
    if os.path.isabs(xdg):
        candidates.append(Path(xdg) / USER_FILE)
    elif home:
        candidates.append(Path(home) / ".config" / USER_FILE)
    here = Path(os.path.abspath(cwd))
    for directory in (*reversed(here.parents), here):
        candidates.extend(directory / name for name in LOCAL_NAMES)
    found: list[Path] = []
    for path in candidates:
        if os.path.lexists(path) and path not in found:
            found.append(path)
    return found


@attrs.frozen
class _Decl:
    """A hook object as declared, and where: the problem file, its pointer, its provenance."""

    obj: Mapping[str, Any]
    file: str
    pointer: str
    source: Provenance
    declaring_dir: str


@attrs.frozen
class _Layer:
    """A validated layer; its `hooks` items are `_Decl`s (or `None` to splice)."""

    file: str
    doc: Mapping[str, Any]
    path: str | None = None


@attrs.define
class _Loader:
    """Collects layers and problems, in layer order."""

    layers: list[_Layer] = attrs.field(factory=list)
    problems: list[Problem] = attrs.field(factory=list)
    order: dict[str, int] = attrs.field(factory=dict)
    #: Where `~` in `[sandbox]` paths is looked up (`HOME`).
    environ: Mapping[str, str] = attrs.field(factory=lambda: os.environ)

    def note(self, file: str, problems: list[Problem]) -> None:
        self.order.setdefault(file, len(self.order))
        self.problems.extend(problems)

    def add_file(self, path: Path, file: str, *, origin: str = "") -> None:
        doc, problems = _read(path, file, origin=origin)
        if doc is not None:
            problems += schema_problems(validator("config"), doc, file)
            hooks = doc.get("hooks") if isinstance(doc, dict) else None
            for index, obj in enumerate(hooks if isinstance(hooks, list) else []):
                if isinstance(obj, dict):
                    problems += _hook_rules(obj, file, f"/hooks/{index}", SourceKind.FILE)
        absolute = os.path.abspath(path)
        directory = os.path.dirname(absolute)
        if doc is not None and not problems and isinstance(doc.get("sandbox"), dict):
            doc, more = _sandbox_paths(doc, file, directory, self.environ)
            problems += more
        self.note(file, problems)
        if doc is None or problems:
            return
        decls = [
            None
            if obj is None
            else _Decl(
                obj, file, f"/hooks/{i}", Provenance(SourceKind.FILE, absolute, i), directory
            )
            for i, obj in enumerate(doc.get("hooks", []))
        ]
        self.layers.append(
            _Layer(file, {**doc, "hooks": decls} if "hooks" in doc else doc, absolute)
        )

    def add_hook(self, obj: Any, file: str, kind: SourceKind, index: int, cwd: Path) -> None:
        if not isinstance(obj, Mapping):
            self.note(
                file,
                [Problem(file, "", f"expected a hook object, found {describe(obj)}")],
            )
            return
        if jsontext.depth(obj) > jsontext.MAX_DEPTH:  # one built in Python, not read by jsontext
            self.note(file, [Problem(file, "", f"nested deeper than {jsontext.MAX_DEPTH} levels")])
            return
        obj = dict(obj)  # jsonschema's "object" is a dict
        problems = schema_problems(hook_validator(), obj, file)
        problems += _hook_rules(obj, file, "", kind)
        self.note(file, problems)
        if not problems:
            decl = _Decl(obj, file, "", Provenance(kind, None, index), os.path.abspath(cwd))
            self.layers.append(_Layer(file, {"hooks": [None, decl]}))

    def add_script(self, script: Mapping[str, Any], file: str) -> None:
        script = {k: list(v) if isinstance(v, tuple) else v for k, v in script.items()}
        problems = schema_problems(validator("config"), {"script": script}, file)
        self.note(file, problems)
        if not problems:
            self.layers.append(_Layer(file, {"script": script}))

    def config(self) -> Config:
        """The `Config` in force, or `ConfigError` with every problem found."""
        if self.problems:
            raise ConfigError(self._sorted(self.problems))
        config, problems = _resolve(self.layers)
        if problems:
            raise ConfigError(self._sorted(problems))
        return config

    def _sorted(self, problems: list[Problem]) -> list[Problem]:
        return sorted(
            problems,
            key=lambda p: (self.order.get(p.file, 0), pointer_key(p.pointer)),
        )


def load_config(
    config_files: Sequence[str | Path] = (),
    *,
    cwd: Path,
    environ: Mapping[str, str],
    command_line_hooks: Sequence[str] = (),
    per_call_hooks: Sequence[Mapping[str, Any]] = (),
    script: Mapping[str, Sequence[str | None]] | None = None,
    discover: bool = True,
    etc_dir: Path = ETC_DIR,
) -> Config:
    """Finds, validates and layers every config, then builds the `Config` in force.

    `config_files` are the `--config` files (relative to `cwd`; one already applied is
    skipped); `command_line_hooks` the `--hook` JSON texts; `per_call_hooks` hook objects from
    one request (on the `script` point only); `script` per-call inline source phases, layered
    last (null-splice: `[None, "x"]` appends). Discovery is skipped when `discover` is false or
    `MCPX_HOOKS_NO_DISCOVERY` is set. Raises `ConfigError` with every problem in every layer.
    """
    loader = _Loader(environ=environ)
    # `os.path.realpath`, not `Path.resolve()`: on a symlink loop it gives a path back where
    # resolve() raises RuntimeError; reading the file then reports the loop.
    applied: set[str] = set()
    if discover:
        for path in discover_files(cwd, environ, etc_dir=etc_dir):
            applied.add(os.path.realpath(path))
            loader.add_file(path, str(path))
    for given in config_files:
        path = Path(cwd) / given
        # A file applied twice would declare its hooks twice; it is in force once, where first.
        if (real := os.path.realpath(path)) not in applied:
            applied.add(real)
            loader.add_file(path, str(given), origin=" (given with --config)")
    for number, text in enumerate(command_line_hooks, start=1):
        file = f"--hook #{number}"
        try:
            obj = jsontext.loads(text)
        except jsontext.JsonError as exc:
            loader.note(file, [Problem(file, "", f"invalid JSON: {exc}")])
            continue
        loader.add_hook(obj, file, SourceKind.COMMAND_LINE, number - 1, cwd)
    for number, obj in enumerate(per_call_hooks, start=1):
        loader.add_hook(obj, f"per-call hook #{number}", SourceKind.PER_CALL, number - 1, cwd)
    if script is not None:
        loader.add_script(script, "per-call script")
    return loader.config()


def validate_files(paths: Sequence[str | Path]) -> list[Problem]:
    """Every problem in each file taken on its own (no layering), for `mcpx-hooks validate`."""
    problems: list[Problem] = []
    for given in paths:
        loader = _Loader()
        loader.add_file(Path(given), str(given))
        try:
            loader.config()
        except ConfigError as exc:
            problems.extend(exc.problems)
    return problems


def _read(path: Path, file: str, *, origin: str) -> tuple[Any, list[Problem]]:
    """The parsed document, or `None` and the problem that stopped it."""
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        found = f'"{suffix}"' if suffix else "no extension"
        return None, [Problem(file, "", f"expected a .toml or .json config file, found {found}")]
    if (why := _not_a_regular_file(path, origin)) is not None:
        return None, [Problem(file, "", why)]
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(file, "", f"cannot read the file: {exc}")]
    if suffix == ".json":
        try:
            return jsontext.loads(text), []
        except jsontext.JsonError as exc:
            return None, [Problem(file, "", f"invalid JSON: {exc}")]
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        return None, [Problem(file, "", _TOO_DEEP)]
    except ValueError as exc:  # TOMLDecodeError, or an integer past the digit limit
        return None, [Problem(file, "", f"invalid TOML: {str(exc).split(';')[0]}")]
    # Dotted keys and table headers nest without recursing: the depth is checked after, so
    # nothing downstream (the schema, layering, the views) ever walks a deeper document.
    if jsontext.depth(doc) > jsontext.MAX_DEPTH:
        return None, [Problem(file, "", _TOO_DEEP)]
    return _toml_nulls(doc), []


_TOO_DEEP: Final = f"invalid TOML: nested deeper than {jsontext.MAX_DEPTH} levels"


def _not_a_regular_file(path: Path, origin: str) -> str | None:
    """Why `path` is not a config file to read (it follows symlinks), or None when it is a
    regular file. A FIFO or a device is refused before it is opened: reading one could
    block or never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"expected a config file, found a dangling symlink (to {_link(path)}){origin}"
        return f"no such file: {os.path.abspath(path)}{origin}"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"expected a config file, found a symlink loop{origin}"
        return f"cannot read the file: {exc}"
    if stat.S_ISDIR(mode):
        return f"expected a config file, found a directory{origin}"
    if not stat.S_ISREG(mode):
        return f"expected a config file, found {_kind(mode)}{origin}"
    return None


def _link(path: Path) -> str:
    try:
        return repr(os.readlink(path))
    except OSError:  # gone or replaced since the stat
        return "a path that does not exist"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "something that is not a regular file"


def _toml_nulls(doc: dict[str, Any]) -> dict[str, Any]:
    """Turns TOML's `{inherit = true}` list items into `None`, where lists may splice."""

    def nulls(items: Any) -> Any:
        if not isinstance(items, list):
            return items
        return [None if item == TOML_NULL else item for item in items]

    if "hooks" in doc:
        doc["hooks"] = nulls(doc["hooks"])
    script = doc.get("script")
    if isinstance(script, dict):
        doc["script"] = {phase: nulls(lines) for phase, lines in script.items()}
    return doc


def _sandbox_paths(
    doc: dict[str, Any], file: str, directory: str, environ: Mapping[str, str]
) -> tuple[dict[str, Any], list[Problem]]:
    """`doc` with its `[sandbox]` paths made absolute (see the module docstring)."""
    table = dict(doc["sandbox"])
    problems: list[Problem] = []
    for key in ("read", "write"):
        resolved = []
        for index, given in enumerate(table.get(key, [])):
            path, why = sandbox_path(given, directory, environ)
            if why is not None:
                problems.append(Problem(file, f"/sandbox/{key}/{index}", why))
            resolved.append(path)
        if key in table:
            table[key] = resolved
    return {**doc, "sandbox": table}, problems


def sandbox_path(given: str, directory: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """A `[sandbox]` path made absolute and normal: `~` expanded, a relative path joined to
    `directory`. The second item says why it cannot be, or is None."""
    path = given
    if given == "~" or given.startswith("~/"):
        home = environ.get("HOME", "")
        if not os.path.isabs(home):
            try:
                home = pwd.getpwuid(os.getuid()).pw_dir
            except KeyError:
                return given, f'expected a path, found "{given}": no home directory for "~"'
        path = home + given[1:]
    elif given.startswith("~"):
        user, _, rest = given[1:].partition("/")
        try:
            path = os.path.join(pwd.getpwnam(user).pw_dir, rest)
        except KeyError:
            return given, f'expected a path, found "{given}": there is no user "{user}"'
    return os.path.normpath(os.path.join(directory, path)), None


def _hook_rules(obj: Mapping[str, Any], file: str, ptr: str, kind: SourceKind) -> list[Problem]:
    """The rules a schema cannot say well: a phase the point lacks, `prefix` hooks."""
    problems: list[Problem] = []
    on, phase = obj.get("on"), obj.get("phase")
    if phase == Phase.PREFIX.value and "source" not in obj:
        problems.append(
            Problem(
                file,
                f"{ptr}/phase",
                'expected an inline source phase: phase "prefix" takes source lines only;'
                " write them as [script].prefix = [...]",
            )
        )
    elif isinstance(on, str) and on in POINTS and phase != Phase.OBSERVE.value:
        phases = [p.value for p in POINTS[on].phases]
        if isinstance(phase, str) and phase in _PHASE_WORDS and phase not in phases:
            problems.append(
                Problem(
                    file,
                    f"{ptr}/phase",
                    f'expected a phase of the point "{on}" ({", ".join(phases)}), found "{phase}"',
                )
            )
    if kind is SourceKind.PER_CALL and on != "script":
        problems.append(
            Problem(
                file,
                f"{ptr}/on",
                f'expected "script": per-call hooks attach to the script run only, found'
                f" {describe(on)}",
            )
        )
    return problems


def _defaults(table: Mapping[str, Any]) -> Defaults:
    base = Defaults()
    return Defaults(
        timeout_ms=int(table.get("timeoutMs", base.timeout_ms)),
        kill_grace_ms=int(table.get("killGraceMs", base.kill_grace_ms)),
        max_output_bytes=int(table.get("maxOutputBytes", base.max_output_bytes)),
        effect=Effect.parse(table["effect"]) if "effect" in table else base.effect,
        sandbox=Profile(table.get("sandbox", base.sandbox.value)),
    )


def _resolve(layers: Sequence[_Layer]) -> tuple[Config, list[Problem]]:
    """Merges validated layers and builds the hooks in force, with the rules that need them
    all: names unique after defaulting, `failure = "closed"` only with a refusing effect."""
    merged = layering.merge_all(layer.doc for layer in layers)
    defaults = _defaults(merged.get("defaults", {}))
    limits = Limits.from_table(merged.get("limits", {}))
    table = merged.get("sandbox", {})
    paths = SandboxPaths(tuple(table.get("read", ())), tuple(table.get("write", ())))
    hooks: list[Hook] = []
    problems: list[Problem] = []
    seen: dict[str, tuple[int, _Decl]] = {}
    counts: dict[tuple[str, str], int] = {}
    for position, decl in enumerate(merged.get("hooks", [])):
        obj = decl.obj
        slot = (obj["on"], obj["phase"])
        index = counts[slot] = counts.get(slot, -1) + 1
        hook = _build_hook(decl, obj.get("name") or f"{slot[0]}.{slot[1]}.{index}", defaults)
        hook = attrs.evolve(hook, limits=limits, paths=paths)
        if hook.failure is Failure.CLOSED and hook.effect < REFUSING:
            origin = "" if "effect" in obj else " (the default)"
            problems.append(
                Problem(
                    decl.file,
                    f"{decl.pointer}/failure",
                    f'failure "closed" needs an effect that may refuse the run ("{REFUSING.word}"'
                    f' or above), found effect "{hook.effect.word}"{origin}',
                )
            )
        first_position, first = seen.setdefault(hook.name, (position, decl))
        if first_position != position:
            # `first is decl`: one declaration spliced in at two nulls.
            again = "spliced in twice" if first is decl else "again"
            problems.append(
                Problem(
                    decl.file,
                    f"{decl.pointer}/name" if "name" in obj else decl.pointer,
                    f'expected a unique hook name, found "{hook.name}" {again} (first declared'
                    f" at {first.file}:{first.pointer or '/'})",
                )
            )
        hooks.append(hook)
    autonomy = merged.get("autonomy", {})
    runs = merged.get("runs", {})
    config = Config(
        hooks=tuple(hooks),
        script={
            Phase(phase): tuple(merged["script"][phase])
            for phase in SCRIPT_PHASES
            if merged.get("script", {}).get(phase)
        },
        autonomy_max=Effect.parse(autonomy["max"]) if "max" in autonomy else DEFAULT_MAX,
        autonomy_hooks=Effect.parse(autonomy["hooks"]) if "hooks" in autonomy else Effect.RUN,
        defaults=defaults,
        runs_retain=int(runs.get("retain", DEFAULT_RUNS_RETAIN)),
        runs_run_bytes=int(runs.get("runBytes", DEFAULT_RUN_BYTES)),
        runs_retain_bytes=int(runs.get("retainBytes", DEFAULT_RETAIN_BYTES)),
        service_sandboxes=tuple(
            Profile(p)
            for p in merged.get("service", {}).get(
                "sandboxes", [p.value for p in DEFAULT_SERVICE_SANDBOXES]
            )
        ),
        limits=limits,
        sandbox_paths=paths,
        script_sandbox=Profile(merged.get("script", {}).get("sandbox", DEFAULT_RUN_SANDBOX.value)),
        files=tuple(layer.path for layer in layers if layer.path is not None),
    )
    return config, problems


def _build_hook(decl: _Decl, name: str, defaults: Defaults) -> Hook:
    obj = decl.obj
    action = next(Action(a) for a in HOOK_ACTIONS if a in obj)
    target = obj[action.value]
    cwd = obj.get("cwd")
    return Hook(
        name=name,
        on=obj["on"],
        phase=Phase(obj["phase"]),
        action=action,
        target=tuple(target) if isinstance(target, list) else target,
        declaring_dir=decl.declaring_dir,
        source=decl.source,
        effect=Effect.parse(obj["effect"]) if "effect" in obj else defaults.effect,
        failure=Failure(obj.get("failure", Failure.OPEN.value)),
        timeout_ms=int(obj.get("timeoutMs", defaults.timeout_ms)),
        kill_grace_ms=int(obj.get("killGraceMs", defaults.kill_grace_ms)),
        max_output_bytes=int(obj.get("maxOutputBytes", defaults.max_output_bytes)),
        env=dict(obj.get("env", {})),
        enabled=bool(obj.get("enabled", True)),
        when=dict(obj.get("when", {})),
        cwd=None if cwd is None else os.path.normpath(os.path.join(decl.declaring_dir, cwd)),
        sandbox=Profile(obj.get("sandbox", defaults.sandbox.value)),
        args=dict(obj["args"]) if "args" in obj else None,
    )
