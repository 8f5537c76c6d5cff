"""The methods attrs writes for each class, compiled once and kept beside the trust state.

attrs builds a class by writing the source of its methods and compiling it: `__init__` for
the project's classes (their repr, equality and hash are `core/records.Record`'s), those and
more for trio's. `exec -- /bin/true` builds some 160 classes, and compiling their methods
took ~45 ms of its ~0.3 s on the 2-core machine, a third of it inside `import trio`. Python
keeps the byte code of a module's own source in `__pycache__`; nothing keeps that of source
written at run time. This does, for the command line:

- `install` (called by `cli/main.entry` before anything builds a class) wraps the one place
  attrs compiles (`attr._make._compile_and_eval`) as attrs is imported: a method's code is
  looked up by its file name and source among those kept, and compiled only when it is not
  there, with the flags attrs compiles with;
- `save` (called by `entry` once the command is done) keeps, when anything was compiled,
  the code this process used and what was kept before, at most `MAX_ENTRIES` (past it, only
  this process's; a process holds at most as many of its own).

The file is `<state dir>/attrs-code.cache`, sealed (`statefiles.write_sealed`) under a key of
the interpreter's version and those flags; its payload is the marshalled tuple of (file name,
source, code) triples. Each code is found by its exact source, so a new version of attrs, of
trio or of this package finds its own and compiles the rest. The one part of a method's
source that differs between processes, the number a generated `__hash__` mixes in (the hash
of a name, salted per process), is written as a name (`SALT`) and given to the code with its
globals.

Where the file cannot be believed (`statefiles.read_sealed`), or there is no state
directory, or attrs no longer has `_compile_and_eval`, classes are built as attrs builds them.
The file is code this process runs, as `__pycache__` is: it is read only when it is this
user's and no one else may write it. Standard library only until attrs is imported.
"""

from __future__ import annotations
import __future__

import marshal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Final

from .statefiles import checkout_holding, read_sealed, state_path, write_sealed

MAGIC: Final = b"mcpx-hooks attrs code cache 1"
#: The most methods kept: `exec` uses some 160, `serve` some 170 (trio's and ours).
MAX_ENTRIES: Final = 1024
#: The largest cache file read (1,024 entries are ~2 MB).
MAX_CACHE_BYTES: Final = 16 * 1024 * 1024
#: The module whose `_compile_and_eval` is wrapped.
ATTRS_MODULE: Final = "attr._make"
#: The name a generated `__hash__`'s salted number is kept as.
SALT: Final = "_mcpx_hooks_attrs_salt"

_Key = tuple[str, str]  # (file name, source)


class _Cache:
    """The code kept (read at attrs's import) and what this process used or compiled."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept: dict[_Key, CodeType] = {}
        self.used: dict[_Key, CodeType] = {}
        self.compiled = 0
        self.key = ""

    def load(self, flags: int) -> None:
        self.key = f"{sys.version}\0{flags}\0{marshal.version}"
        payload = read_sealed(self.path, MAGIC, self.key, limit=MAX_CACHE_BYTES)
        if payload is not None:
            self.kept = _entries(payload)

    def code(self, filename: str, source: str, flags: int) -> CodeType:
        key = (filename, source)
        code = self.used.get(key) or self.kept.get(key)
        if code is None:
            code = compile(source, filename, "exec", flags, dont_inherit=True)
            self.compiled += 1
        if len(self.used) < MAX_ENTRIES:  # a process building classes without end keeps some
            self.used[key] = code
        return code

    def save(self) -> None:
        if not self.compiled or not self.key:
            return
        entries = {**self.kept, **self.used}
        if len(entries) > MAX_ENTRIES:
            entries = self.used
        payload = marshal.dumps(
            tuple((name, source, code) for (name, source), code in entries.items())
        )
        write_sealed(self.path, MAGIC, self.key, payload)
        self.compiled = 0


#: The cache `install` made, if any (one a process).
_installed: list[_Cache] = []


def install(environ: Mapping[str, str]) -> None:
    """From now on, attrs compiles through the cache (see the module docstring); nothing
    without a state directory, or when installed already."""
    state = state_path(environ)
    if _installed or state is None or checkout_holding(state.parent, "."):
        return  # (a state directory in the checkout worked in: its code may be the checkout's)
    cache = _Cache(state.parent / "attrs-code.cache")
    _installed.append(cache)
    loaded = sys.modules.get(ATTRS_MODULE)
    if loaded is not None:
        _wrap(loaded, cache)
    else:
        sys.meta_path.insert(0, _WhenAttrsLoads(cache))


def save() -> None:
    """Keeps what was compiled since `install` (or the last `save`); a state directory that
    cannot be written is left as it is."""
    for cache in _installed:
        cache.save()


def compiled() -> int:
    """How many methods this process has compiled through the cache (not found in it)."""
    return sum(cache.compiled for cache in _installed)


class _WhenAttrsLoads:
    """An import finder that finds nothing itself: when attrs's module is found by the
    others, its loader is made to wrap it once it has run; then it leaves `sys.meta_path`."""

    def __init__(self, cache: _Cache) -> None:
        self.cache = cache

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != ATTRS_MODULE:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run: Callable[[ModuleType], None] | None = getattr(loader, "exec_module", None)
        if run is None or isinstance(loader, type):  # a loader shared by modules: left as is
            return spec
        cache = self.cache

        def exec_module(module: ModuleType) -> None:
            run(module)
            _wrap(module, cache)

        loader.exec_module = exec_module
        return spec


def _wrap(module: ModuleType, cache: _Cache) -> None:
    """Replaces `module._compile_and_eval` (script, globs, locs, filename) with one that takes
    the code from `cache`; an attrs without it is left as it is."""
    original = getattr(module, "_compile_and_eval", None)
    if not callable(original):
        return
    flags = _future_flags(module)
    cache.load(flags)

    def compile_and_eval(
        script: str,
        globs: dict[str, Any] | None,
        locs: Mapping[str, object] | None = None,
        filename: str = "",
    ) -> None:
        if globs is None:  # attrs's own module's globals: compiled as attrs would
            original(script, globs, locs, filename)
            return
        source, salt = _unsalted(script, filename)
        if salt is not None:
            globs[SALT] = salt
        eval(cache.code(filename, source, flags), globs, locs)

    module._compile_and_eval = compile_and_eval  # type: ignore[attr-defined]


def _future_flags(module: ModuleType) -> int:
    """The compiler flags of the `from __future__` imports of `module`: what `compile`
    inherits when that module calls it."""
    flags = 0
    for name in __future__.all_feature_names:
        imported = module.__dict__.get(name)
        if imported is not None and imported is getattr(__future__, name):
            flags |= int(imported.compiler_flag)
    return flags


def _unsalted(script: str, filename: str) -> tuple[str, int | None]:
    """`script` with the salted number of its class's `__hash__` written as `SALT`, and that
    number (None when it has none). attrs mixes in the hash of `<attrs generated hash
    {module}.{qualname}>`, the class named in `filename` (`<attrs generated {what} ...>`)."""
    parts = filename.split(" ", 3)
    if len(parts) != 4 or parts[:2] != ["<attrs", "generated"]:
        return script, None
    salt = hash(f"<attrs generated hash {parts[3]}")
    written = f" {salt},"
    if written not in script:
        return script, None
    return script.replace(written, f" {SALT},"), salt


def _entries(payload: bytes) -> dict[_Key, CodeType]:
    """The (file name, source) → code kept in `payload`; empty when it is not what `save`
    writes."""
    try:
        triples = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(triples, tuple):
        return {}
    entries: dict[_Key, CodeType] = {}
    for triple in triples:
        if not (isinstance(triple, tuple) and len(triple) == 3):
            return {}
        name, source, code = triple
        if not (isinstance(name, str) and isinstance(source, str) and isinstance(code, CodeType)):
            return {}
        entries[name, source] = code
    return entries
