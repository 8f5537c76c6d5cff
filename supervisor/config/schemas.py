"""The JSON Schemas (2020-12) of the config, the hook input and the hook output: the files,
their validators, and the command that writes them.

The files under `schemas/` are generated from the tables (`points.py`, `effects.py`,
`hooks.py`, `kinds.py`, `limits.py`) by `configschema.py` and `hookschemas.py`, so an enum or a
default is declared once; `tests/test_schemas.py` holds the committed files equal to what they
build. After changing a table, regenerate with
`python -m mcpx_hooks.supervisor.config.schemas --write`.

A validator is compiled once, from the schema the tables build when it is first used (the same
document as the file, which is there for editors and the docs): a hook kind added to the kinds'
table (`core/kinds.py`) before a config is loaded is validated as the others are. jsonschema is
the reference, and says what is wrong; `quick_check` (and `quick_hook_check`) answers only
"valid or not", about ten times faster, for the usual case: a valid config, a valid hook's
output. Its compiled code is kept on disk (`schemacache.py`), so a command that reads a valid
config imports neither jsonschema nor fastjsonschema.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..core.errors import Problem
from .configschema import build_config_schema
from .hookschemas import build_hook_input_schema, build_hook_output_schema
from .manyhooks import SPLIT_FROM, split_problems
from .problems import problems
from .schemacache import compiled_check
from .schemaparts import DIALECT, SCRIPT_PHASES

if TYPE_CHECKING:
    import jsonschema

__all__ = [
    "BUILDERS",
    "SCHEMA_NAMES",
    "SCRIPT_PHASES",
    "document_problems",
    "file_name",
    "hook_validator",
    "quick_check",
    "quick_hook_check",
    "render",
    "schema",
    "schema_text",
    "validator",
    "write_schemas",
]

SCHEMA_NAMES: Final = ("config", "hook-input", "hook-output")
_PACKAGE: Final = "mcpx_hooks.schemas"


def file_name(name: str) -> str:
    """`config` → `config.schema.json`; refuses names that are not schemas."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r}; the schemas are {', '.join(SCHEMA_NAMES)}")
    return f"{name}.schema.json"


def schema_text(name: str) -> str:
    """The schema file's text, as installed."""
    return importlib.resources.files(_PACKAGE).joinpath(file_name(name)).read_text("utf-8")


def schema(name: str) -> dict[str, Any]:
    """The schema as a fresh dict (callers may change it)."""
    loaded: dict[str, Any] = json.loads(schema_text(name))
    return loaded


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    """The compiled validator for `name`, built once per process from the tables."""
    import jsonschema  # only to say what is wrong (`quick_check` says whether anything is)

    return jsonschema.Draft202012Validator(BUILDERS[name]())


@functools.cache
def quick_check(name: str) -> Callable[[Any], bool]:
    """`name` compiled to Python by fastjsonschema, once (and kept on disk: `schemacache.py`):
    True when an instance is valid.

    Only a fast yes: when it says no, ask `validator(name)` what is wrong (and it decides).
    Defaults are not filled in and formats are not asserted, as with `validator`.
    """
    return compiled_check(name, _draft7(_plain(BUILDERS[name]())))


@functools.cache
def quick_hook_check() -> Callable[[Any], bool]:
    """`quick_check` of one `[[hooks]]` entry on its own (`hook_validator`'s schema)."""
    return compiled_check("hook", _draft7(_plain(_hook_schema())))


def _plain(schema: dict[str, Any]) -> Any:
    """`schema` as JSON has it: the tables' enum members (keys among them) as plain strings."""
    return json.loads(json.dumps(schema))


def _draft7(node: Any) -> Any:
    """`node` with 2020-12's `prefixItems` + `items` written as draft 7's `items` (an array)
        + `additionalItems`: fastjsonschema knows drafts up to 7 and would skip `prefixItems`,
        saying yes to an argv whose program is ""; and 2019-09's `dependentRequired` as draft 7's
    `dependencies` (the same rule under its old name), which fastjsonschema would skip as well."""
    if isinstance(node, list):
        return [_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _draft7(value) for key, value in node.items()}
    if "prefixItems" in out:
        out["additionalItems"] = out.pop("items", True)
        out["items"] = out.pop("prefixItems")
    if isinstance(out.get("dependentRequired"), dict) and "dependencies" not in out:
        out["dependencies"] = out.pop("dependentRequired")
    return out


@functools.cache
def hook_validator() -> jsonschema.Draft202012Validator:
    """One `[[hooks]]` entry on its own (command-line and per-call hooks), built once."""
    import jsonschema  # only to say what is wrong (`quick_hook_check` says whether anything is)

    return jsonschema.Draft202012Validator(_hook_schema())


@functools.cache
def hook_keys_validator() -> jsonschema.Draft202012Validator:
    """A hook's keys each on its own, and no other key (`manyhooks.py`), built once."""
    import jsonschema

    return jsonschema.Draft202012Validator(_hook_keys_schema(closed=True))


@functools.cache
def quick_hook_keys_check() -> Callable[[Any], bool]:
    """`quick_check` of an object of a hook's keys, each value under its key's schema and
    nothing else asked (`manyhooks.py` gives it one key at a time)."""
    return compiled_check("hook-keys", _draft7(_plain(_hook_keys_schema(closed=False))))


def _hook_keys_schema(*, closed: bool) -> dict[str, Any]:
    defs = BUILDERS["config"]()["$defs"]
    schema = {"$schema": DIALECT, "$defs": defs, "type": "object"}
    schema["properties"] = defs["hook"]["properties"]
    return {**schema, "additionalProperties": False} if closed else schema


def _hook_schema() -> dict[str, Any]:
    return {"$schema": DIALECT, "$defs": BUILDERS["config"]()["$defs"], "$ref": "#/$defs/hook"}


def document_problems(doc: Any, file: str, *, hook: bool = False) -> list[Problem]:
    """What the config's schema (or, with `hook`, one `[[hooks]]` entry's) finds wrong with
    `doc`: nothing when its quick check (compiled, kept on disk) says it is valid, else
    jsonschema's errors, translated (`problems`); a config of many hooks has its hooks
    checked one by one, what is wrong with each once (`manyhooks.py`)."""
    if hook:
        return [] if quick_hook_check()(doc) else problems(hook_validator(), doc, file)
    if quick_check("config")(doc):
        return []
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    if isinstance(hooks, list) and len(hooks) >= SPLIT_FROM:  # (each hook on its own)
        return split_problems(
            doc,
            hooks,
            file,
            whole=validator("config"),
            one=hook_validator(),
            keys=hook_keys_validator(),
            quick_hook=quick_hook_check(),
            quick_value=quick_hook_keys_check(),
        )
    return problems(validator("config"), doc, file)


BUILDERS: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "config": build_config_schema,
    "hook-input": build_hook_input_schema,
    "hook-output": build_hook_output_schema,
}


def render(name: str) -> str:
    """The text of the schema file `name` as the tables build it."""
    return json.dumps(BUILDERS[name](), indent=2, ensure_ascii=False) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Regenerates every schema file in `directory` (the source tree's `schemas/`)."""
    written = []
    for name in SCHEMA_NAMES:
        path = directory / file_name(name)
        path.write_text(render(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m mcpx_hooks.supervisor.config.schemas --write")
    # In the editable install this is the source tree's `schemas/`.
    for p in write_schemas(Path(str(importlib.resources.files(_PACKAGE)))):
        print(p)
