"""A schema's quick check, compiled once and kept on disk beside the trust state.

fastjsonschema turns a schema into Python source; compiling that source costs ~40 ms for the
config's schema, more than the rest of `exec -- /bin/true` spends on the config. The compiled
code is kept in `<state dir>/schema-<name>.cache` (`statefiles.state_path`), sealed and
written privately (`statefiles.write_sealed`: 0600 in a 0700 directory) and read back the way
the trust state is (a regular file of this user's that no one else may write, of bounded size).

The file is a header and the marshalled code object:

    mcpx-hooks schema cache 2
    <key: sha256 of the package version, the interpreter's version and the schema's JSON>
    <sha256 of the payload>
    <payload>

The key changes with the package, the interpreter or the schema (built from the tables at its
first use, so a hook kind added to `core/kinds.py` changes it); the payload's digest catches a
file cut short or changed. A cache file that cannot be believed for any of those reasons is
ignored and rewritten, never a traceback; without a state directory, or one that cannot be
written, the check is compiled in memory for this process alone.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import marshal
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from ..core.errors import HooksError
from .statefiles import checkout_holding, read_sealed, state_path, write_sealed

#: (2: the generated code's `"…".format(**locals())` rewritten as f-strings; 3: its raises
#: build no message; a cache of an earlier form is ignored and rewritten.)
MAGIC: Final = b"mcpx-hooks schema cache 3"
#: The largest cache file read: the config's compiled check is ~300 KB.
MAX_CACHE_BYTES: Final = 16 * 1024 * 1024


class Invalid(HooksError):
    """What the compiled check raises for an invalid instance (fastjsonschema's own exception
    classes, without importing fastjsonschema), bare (`_BareRaises`): no `__init__` of its
    own, so making one runs no Python code (a valid hook raises six times)."""


def cache_path(name: str, environ: Mapping[str, str]) -> Path | None:
    """Where the check of schema `name` is kept; None without a state directory."""
    state = state_path(environ)
    if state is None or checkout_holding(state.parent, "."):
        return None  # (a state directory in the checkout worked in: its code may be the checkout's)
    return state.parent / f"schema-{name}.cache"


def cache_key(schema_json: str) -> str:
    """The key of a schema's compiled check (see the module docstring)."""
    # The package root's `__version__`, by name, as `cli/parser.version` reads it.
    version = importlib.import_module("mcpx_hooks").__version__
    text = f"{version}\0{sys.version}\0{schema_json}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def compiled_check(
    name: str, schema: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> Callable[[Any], bool]:
    """True when an instance is valid under `schema` (already draft 7, as fastjsonschema
    reads it): from the cache when it holds this key, else compiled and written there."""
    schema_json = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    key = cache_key(schema_json)
    path = cache_path(name, os.environ if environ is None else environ)
    code = _read(path, key) if path is not None else None
    if code is None:
        code = _compile(schema_json)
        if path is not None:
            _write(path, key, code)
    namespace: dict[str, Any] = {"__name__": f"mcpx_hooks.schema_check.{name}", "Invalid": Invalid}
    exec(code, namespace)
    validate = namespace["validate"]

    def valid(instance: Any) -> bool:
        try:
            validate(instance)
        except Invalid:
            return False
        return True

    return valid


def _compile(schema_json: str) -> Any:
    import fastjsonschema  # only when the cache does not hold this schema

    source = fastjsonschema.compile_to_code(
        json.loads(schema_json), use_default=False, use_formats=False
    )
    lines = [
        _NO_IMPORT if line.startswith("from fastjsonschema import") else _LOCALS.sub(r'f"\1"', line)
        for line in source.splitlines()
    ]
    # The first function is the schema's own (named after its `$id`); the rest are its `$ref`s.
    first = next(line for line in lines if line.startswith("def "))
    lines.append(f"validate = {first[4:].partition('(')[0]}")
    tree = _BareRaises().visit(ast.parse("\n".join(lines) + "\n"))
    return compile(ast.fix_missing_locations(tree), "<schema check>", "exec")


class _BareRaises(ast.NodeTransformer):
    """Each `raise JsonSchemaValueException(<message>, value=…, name=…, definition={…},
    rule=…)` of the generated code as `raise Invalid`: the check answers yes or no, and
    building the message and the schema's dict literal at every raise was most of its cost
    on valid hooks too (a hook's `oneOf` of five actions raises four times)."""

    def visit_Raise(self, node: ast.Raise) -> ast.Raise:
        call = node.exc
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in _RAISED
        ):
            return ast.Raise(exc=ast.Name(id="Invalid", ctx=ast.Load()), cause=None)
        return node


_RAISED: Final = frozenset({"JsonSchemaValueException", "JsonSchemaValuesException"})


#: The generated code names each item it descends into as `".hooks[{data__hooks_x}]"
#: .format(**locals())`, on the valid path too: `locals()` of the config's check copies its
#: hundreds of variables, once per hook (50,000 hooks: ~5 s of a `validate`). The same
#: string as an f-string reads the one variable it names.
_LOCALS: Final = re.compile(r'"((?:[^"\\{}]|\{\w+\})*)"\.format\(\*\*locals\(\)\)')

#: Stands for the generated code's import of fastjsonschema's exceptions (~6 ms to import).
_NO_IMPORT: Final = "JsonSchemaValueException = JsonSchemaValuesException = Invalid"


def _read(path: Path, key: str) -> Any:
    """The cached code object for `key`, or None when there is none to believe."""
    payload = read_sealed(path, MAGIC, key, limit=MAX_CACHE_BYTES)
    if payload is None:
        return None
    try:
        code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    return code if type(code) is type(_read.__code__) else None


def _write(path: Path, key: str, code: Any) -> None:
    write_sealed(path, MAGIC, key, marshal.dumps(code))
