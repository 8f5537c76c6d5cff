"""Config files found, read, validated and layered into the `Config` in force.

No trio. Every layer is validated against `schemas/config.schema.json` before anything is
merged, and every problem in every layer is collected before `ConfigError` is raised, so one
run of `validate` shows them all. Nothing wrong with a file raises anything but `ConfigError`
(`files.py` says what is found and how a file is read; `build.py` builds the `Config`).

Layers apply farthest first: the discovered files (`files.discover_files`), the `--config`
files in order, the `--hook` hooks, then per-call hooks and script lines. Command-line and
per-call hooks are appended to the hooks in force (a layer `[null, hook]`). The `[sandbox]`
lists of all layers are appended (`layering.APPEND`), never replaced.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..core import jsontext
from ..core.errors import ConfigError, Problem
from ..core.hooks import Config, Provenance, SkippedFile, SourceKind
from ..core.places import shown_file
from ..core.records import Record
from . import files
from .build import Decl, Layer, resolve
from .doccache import checked_document
from .hookrules import hook_rules
from .modelschema import key_name_rules
from .problems import describe, outranked, pointer_key
from .salvage import salvaged, without
from .scriptrules import script_problems
from .statefiles import checkout_holding, checkout_said, state_path
from .trust import TrustState, Verdict, decide, digest, skip_message, trust_all, trust_command
from .truststore import load_state, trust_key


@attrs.frozen(repr=False, eq=False)
class Alone(Record):
    """One file checked on its own and sound (`check_files`): its layer, which a load that
    layers it takes as it is, and the `Config` it makes, which a load that layers nothing else
    is (`load_config(alone=...)`). `key`: its absolute path, the SHA-256 of its bytes and the
    `HOME` its `~` paths were resolved with."""

    key: tuple[str, str, str | None]
    layer: Layer
    config: Config


@attrs.define(repr=False)
class _Loader(Record):
    """Collects layers and problems, in layer order."""

    layers: list[Layer] = attrs.field(factory=list)
    problems: list[Problem] = attrs.field(factory=list)
    order: dict[str, int] = attrs.field(factory=dict)
    #: Where `~` in `[sandbox]` paths is looked up (`HOME`).
    environ: Mapping[str, str] = attrs.field(factory=lambda: os.environ)
    warnings: list[str] = attrs.field(factory=list)
    skipped: list[SkippedFile] = attrs.field(factory=list)
    pinned: dict[str, str] = attrs.field(factory=dict)
    #: `validate`: a layer with problems still adds what is sound in it (`doccache.salvaged`), so
    #: the rules that need the layers merged are checked in the same pass.
    salvage: bool = False
    #: Files already checked and built on their own, by key: not parsed nor built again.
    alone: Mapping[tuple[str, str, str | None], Alone] = attrs.field(factory=dict)

    def note(self, file: str, problems: list[Problem]) -> None:
        self.order.setdefault(file, len(self.order))
        self.problems.extend(problems)

    def add_file(
        self, path: Path, file: str, *, origin: str = "", data: bytes | None = None
    ) -> None:
        """Reads (or, given `data`, the bytes already read and trusted), validates and adds
        one file's layer."""
        doc: Any = None
        problems: list[Problem] = []
        if data is None:
            data, problems = files.read_bytes(path, file, origin=origin)
        absolute = os.path.abspath(path)
        if data is not None and (known := self._known(absolute, data)) is not None:
            self.note(file, [])
            self.layers.append(known.layer)
            return
        if data is not None:  # (the same bytes under the same name: checked once)
            doc, problems = checked_document(data, path, file, _file_problems)
        directory = os.path.dirname(absolute)
        kept = None
        if doc is not None and problems:
            kept = salvaged(doc, problems) if self.salvage else None
            doc = None if kept is None else kept.doc
        unknown = set() if kept is None else set(kept.unknown)
        for name in files.PATH_KEYS:
            if doc is not None and isinstance(doc.get(name), dict):
                resolved, more = files.resolve_sandbox_paths(
                    doc, file, directory, self.environ, name
                )
                problems += more
                doc = resolved if not more else None if not self.salvage else without(doc, name)
                unknown |= {(name,)} if more else set()
        self.note(file, problems)
        if doc is None:
            return
        bad = {} if kept is None else kept.hooks
        decls = [
            None
            if obj is None
            else Decl(
                obj,
                file,
                f"/hooks/{i}",
                Provenance(SourceKind.FILE, absolute, i),
                directory,
                unsound=bad.get(i),
            )
            for i, obj in enumerate(doc.get("hooks", []))
            if kept is None or i not in kept.dropped
        ]
        hooks = {**doc, "hooks": decls} if "hooks" in doc else doc
        self.layers.append(Layer(file, hooks, absolute, frozenset(unknown)))

    def key(self, absolute: str, data: bytes) -> tuple[str, str, str | None]:
        return absolute, digest(data), self.environ.get("HOME")

    def _known(self, absolute: str, data: bytes) -> Alone | None:
        return self.alone.get(self.key(absolute, data)) if self.alone else None

    def add_hook(self, obj: Any, file: str, kind: SourceKind, index: int, cwd: Path) -> None:
        if not isinstance(obj, Mapping):
            self.note(file, [Problem(file, "", f"expected a hook object, found {describe(obj)}")])
            return
        if jsontext.depth(obj) > jsontext.MAX_DEPTH:  # one built in Python, not read by jsontext
            self.note(file, [Problem(file, "", f"nested deeper than {jsontext.MAX_DEPTH} levels")])
            return
        obj = dict(obj)  # jsonschema's "object" is a dict
        problems = outranked(_problems(obj, file, hook=True), hook_rules(obj, file, "", kind))
        self.note(file, problems)
        if not problems:
            decl = Decl(obj, file, "", Provenance(kind, None, index), os.path.abspath(cwd))
            self.layers.append(Layer(file, {"hooks": [None, decl]}))

    def add_script(self, script: Mapping[str, Any], file: str) -> None:
        script = {k: list(v) if isinstance(v, tuple) else v for k, v in script.items()}
        problems = _problems({"script": script}, file)
        self.note(file, problems)
        if not problems:
            self.layers.append(Layer(file, {"script": script}))

    def config(self) -> Config:
        """The `Config` in force, or `ConfigError` with every problem found."""
        if self.problems and not self.salvage:
            raise self._error(self.problems)
        problems: list[Problem] = []
        known = [a for a in self.alone.values() if self.layers == [a.layer]]
        if known and not self.problems:
            config = known[0].config  # (built once: nothing else is layered)
        else:
            config, problems = resolve(self.layers)
        if problems := [*self.problems, *problems]:
            raise self._error(list(dict.fromkeys(problems)))
        return attrs.evolve(
            config,
            pinned=dict(self.pinned),
            skipped=tuple(self.skipped),
            warnings=(*self.warnings, *config.warnings),
        )

    def _error(self, problems: list[Problem]) -> ConfigError:
        return ConfigError(self._sorted(problems), warnings=self.warnings, skipped=self.skipped)

    def _sorted(self, problems: list[Problem]) -> list[Problem]:
        return sorted(
            problems,
            key=lambda p: (self.order.get(p.file, 0), pointer_key(p.pointer)),
        )


def _file_problems(doc: Any, file: str) -> list[Problem]:
    """A file's document's problems: the schema's, its `[script]` lines', its hooks' rules,
    and its models' key names' (a key pasted as one: said instead of the schema's words)."""
    rules: list[Problem] = []
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    for index, obj in enumerate(hooks if isinstance(hooks, list) else []):
        if isinstance(obj, dict):
            rules += hook_rules(obj, file, f"/hooks/{index}", SourceKind.FILE)
    keys = key_name_rules(doc, file) if isinstance(doc, dict) else []
    pasted = {p.pointer for p in keys}
    schema = [p for p in _problems(doc, file) if p.pointer not in pasted]
    return outranked(schema, rules + keys)


def _problems(doc: Any, file: str, *, hook: bool = False) -> list[Problem]:
    """The schema's problems of `doc`, and its `[script]` lines'."""
    from .schemas import document_problems  # built at the first document checked

    return document_problems(doc, file, hook=hook) + script_problems(doc, file)


def load_config(
    config_files: Sequence[str | Path] = (),
    *,
    cwd: Path,
    environ: Mapping[str, str],
    command_line_hooks: Sequence[str] = (),
    per_call_hooks: Sequence[Mapping[str, Any]] = (),
    script: Mapping[str, Sequence[str | None]] | None = None,
    discover: bool = True,
    etc_dir: Path = files.ETC_DIR,
    trust_project: bool = False,
    pinned: Mapping[str, str] | None = None,
    salvage: bool = False,
    exclude: Collection[str] = (),
    alone: Sequence[Alone] = (),
    check_untrusted: bool = False,
) -> Config:
    """Finds, validates and layers every config, then builds the `Config` in force.

    `config_files` are the `--config` files (relative to `cwd`; one already applied is
    skipped); `command_line_hooks` the `--hook` JSON texts; `per_call_hooks` hook objects from
    one request (on the `script` point only); `script` per-call inline source phases, layered
    last (null-splice: `[None, "x"]` appends). Discovery is skipped when `discover` is false or
    `MCPX_HOOKS_NO_DISCOVERY` is set.

    A discovered project file is applied only when trusted (`_TrustGate`; `trust_project` or
    `MCPX_HOOKS_TRUST=all` trusts them all, and a project file also given in `config_files`
    is trusted, at its discovered place); one skipped is in the `Config`'s `skipped` and
    `warnings`. A file of `config_files` that `pinned` holds (a `Config`'s own, layered
    again) is applied only while its SHA-256 is the one pinned. Raises `ConfigError` with
    every problem in every layer; with `salvage` (`validate`), the rules that need the layers
    merged are checked over what is sound in them, in the same pass. A file whose real path
    is in `exclude` is left out (`exec --remote`: a file the server applies itself). A file
    that is one of `alone` (the same path, bytes and `HOME`) is not checked again, and when it
    is the only layer its `Config` is not built again (`validate FILE…`: each file checked on
    its own, then layered). With `check_untrusted` (`validate`), a project file not trusted is
    layered as if it were, and still said to be not trusted (`skipped`, `warnings`); one that
    cannot be read is a problem. `ConfigError` carries the warnings and the files skipped.
    """
    loader = _Loader(environ=environ, salvage=salvage, alone={a.key: a for a in alone})
    pinned = pinned or {}
    # `os.path.realpath`, not `Path.resolve()` (which raises on a symlink loop): reading reports it.
    given = [(str(name), Path(cwd) / name) for name in config_files]
    applied: set[str] = {os.path.realpath(path) for path in exclude}
    if discover:
        named = {os.path.realpath(path) for _, path in given}
        gate = _TrustGate(environ, trust_project, check_untrusted=check_untrusted)
        for found in files.discover(cwd, environ, etc_dir=etc_dir):
            real = found.real or os.path.realpath(found.path)
            if real in applied:
                continue
            if found.project and real not in named:
                data, problems = gate.admit(found.path, found.real_dir)
                if problems:
                    loader.note(str(found.path), problems)
                elif data is not None:
                    applied.add(real)
                    loader.pinned[os.path.abspath(found.path)] = digest(data)
                    loader.add_file(found.path, str(found.path), data=data)
                continue
            applied.add(real)
            loader.add_file(found.path, str(found.path))
        loader.warnings.extend(gate.warnings)
        loader.skipped.extend(gate.skipped)
    for name, path in given:
        # A file applied twice would declare its hooks twice; it is in force once, where first.
        if (real := os.path.realpath(path)) in applied:
            continue
        applied.add(real)
        if (pin := pinned.get(os.path.abspath(path))) is None:
            loader.add_file(path, name, origin=" (given with --config)")
            continue
        data, problems = files.read_bytes(path, name)
        if data is not None and digest(data) != pin:
            said = (
                f"skipped {shown_file(name)}: it changed since it was trusted and applied;"
                f" review it, then run: {trust_command(name)}, and start again to apply what it"
                " says now"
            )
            loader.warnings.append(said)
            command = trust_command(name)
            loader.skipped.append(SkippedFile(name, Verdict.CHANGED.value, command, said))
        elif data is not None:
            loader.pinned[os.path.abspath(path)] = pin
            loader.add_file(path, name, data=data)
        else:
            loader.note(name, problems)
    for number, text in enumerate(command_line_hooks, start=1):
        file = f"--hook #{number}"
        obj, problems = files.parse_json(text, file)
        if problems:
            loader.note(file, problems)
            continue
        loader.add_hook(obj, file, SourceKind.COMMAND_LINE, number - 1, cwd)
    for number, obj in enumerate(per_call_hooks, start=1):
        loader.add_hook(obj, f"per-call hook #{number}", SourceKind.PER_CALL, number - 1, cwd)
    if script is not None:
        loader.add_script(script, "per-call script")
    return loader.config()


class _TrustGate:
    """Decides, for each discovered project file, whether it is applied: its bytes, read once,
    hashed and then parsed (so what is trusted is what is applied), or None and a warning."""

    def __init__(
        self, environ: Mapping[str, str], trust_project: bool, *, check_untrusted: bool = False
    ) -> None:
        self.environ = environ
        #: Admits a file not trusted, said to be (`load_config`'s `check_untrusted`).
        self.check_untrusted = check_untrusted
        self.everything, note = trust_all(environ, trust_project)
        self.warnings: list[str] = [note] if note else []
        self.skipped: list[SkippedFile] = []
        self._state: TrustState | None = None

    def admit(self, path: Path, real_dir: str = "") -> tuple[bytes | None, list[Problem]]:
        """The bytes to apply, or None; and the problems of a file trusted that cannot be
        read (one not trusted that cannot be read is skipped: it cannot be pinned)."""
        file = str(path)
        data, problems = files.read_bytes(path, file)
        if data is None:
            if self.everything:
                return None, problems
            said = problems[0].message
            unknown = said.startswith(files.CANNOT_TELL)  # (nothing there, maybe)
            self._skip(file, said if unknown else f"{said}, so it cannot be trusted", "")
            return None, problems if self.check_untrusted else []
        if self.everything:
            return data, []
        if (state := state_path(self.environ)) is not None and (
            tree := checkout_holding(state.parent, path.parent)
        ):
            said = checkout_said(state.parent, tree)
            self._skip(file, said, trust_command(file), f"skipped {shown_file(file)}: {said}")
            return (data if self.check_untrusted else None), []
        verdict = decide(self.state(), trust_key(path, real_dir), digest(data))
        if verdict is Verdict.TRUSTED:
            return data, []
        self._skip(file, verdict.value, trust_command(file), skip_message(file, verdict))
        return (data if self.check_untrusted else None), []

    def _skip(self, file: str, reason: str, command: str, said: str = "") -> None:
        """`file` not applied, and `said` (by default: why, and what to do) warned."""
        said = said or f"skipped {shown_file(file)}: {reason}; {files.unread_advice(reason)}"
        self.skipped.append(SkippedFile(file, reason, command, said))
        self.warnings.append(said)

    def state(self) -> TrustState:
        if self._state is None:
            self._state, why = load_state(state_path(self.environ))
            if why is not None:
                self.warnings.append(why)
        return self._state


def validate_files(paths: Sequence[str | Path], *, data: bytes | None = None) -> list[Problem]:
    """Every problem in each file taken on its own (no layering), for `mcpx-hooks validate`:
    the schema's and the rules' in one pass. `data`: the one file's bytes, already read."""
    return check_files(paths, data=data)[0]


def check_files(
    paths: Sequence[str | Path], *, data: bytes | None = None
) -> tuple[list[Problem], list[Alone]]:
    """`validate_files`, and what each file without problems makes on its own (`Alone`),
    which a `load_config(alone=...)` that layers it takes as it is."""
    problems: list[Problem] = []
    alone = []
    for given in paths:
        loader = _Loader(salvage=True)
        read, unread = (data, []) if data is not None else files.read_bytes(Path(given), str(given))
        if read is None:
            problems.extend(unread)
            continue
        loader.add_file(Path(given), str(given), data=read)
        try:
            config = loader.config()
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        if len(loader.layers) == 1:
            key = loader.key(os.path.abspath(given), read)
            alone.append(Alone(key, loader.layers[0], config))
    return problems, alone
