"""The exec request: one table of its fields, from which it is checked, parsed and documented.

Each row of `EXEC_FIELDS` says what its field must be (the words a refusal uses), the check,
its type and meaning as docs/service.md shows them (`field_table`; `tests/test_docs.py` holds
the page equal to the table), and its JSON Schema (`request_schema`, for a client or a tool
that declares what it takes). `parse_exec` checks a request field by field, listing
every problem (`WireError`, 4400), then makes it an `ExecRequest` with the one converter
(`core/convert.py`), which also writes one for a client to send (`wire_request`). Nothing
here fills a default that depends on the server: that is
`admission.admit`'s, once, for every way in. Pure: no trio, no sockets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..config.schemaparts import DIALECT, SCRIPT_PHASES
from ..core import egress, jsontext
from ..core.convert import from_json, to_json
from ..core.effects import Effect
from ..core.fieldmeta import FROM_WIRE, TO_WIRE, WIRE
from ..core.hooks import Profile
from ..core.models import NAME_PATTERN, is_name
from ..core.passenv import SECRET_NAME_PATTERN, reference_problem, secret_name_problem
from ..core.placeholders import run_value_problem
from ..core.records import Record
from ..core.scripts import Script
from ..core.spawntext import env_problems, text_found, text_problem
from .wire import Close, WireError, describe, parse_json_object


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ExecRequest(Record):
    """A checked exec request, one field a row of `EXEC_FIELDS` (the wire's names, camelCase).
    A field the request leaves out keeps the default here; `hooks` and `script_lines` are
    layered per call."""

    argv: tuple[str, ...] | None = attrs.field(default=None, metadata={TO_WIRE: list})
    python: str | None = None
    file: str | None = None
    #: Sent as UTF-8 text (`exec --remote` refuses other bytes first).
    stdin: bytes = attrs.field(default=b"", metadata={FROM_WIRE: str.encode, TO_WIRE: bytes.decode})
    #: `(value,)` when the request has an input (so `null` is a value).
    input: tuple[Any] | None = attrs.field(
        default=None, metadata={FROM_WIRE: lambda v: (v,), TO_WIRE: lambda v: v[0]}
    )
    env: Mapping[str, str] = attrs.field(factory=dict)
    pass_env: tuple[str, ...] = attrs.field(default=(), metadata={TO_WIRE: list})
    secrets: tuple[str, ...] = attrs.field(default=(), metadata={TO_WIRE: list})
    #: The caller's environment values for the names the run and its per-call hooks pass.
    caller_env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None
    #: The run's sandbox profile, when the request names one.
    sandbox: Profile | None = attrs.field(default=None, metadata={TO_WIRE: lambda p: p.value})
    #: The hosts the run's script reaches through the proxy, when the request names them.
    network: tuple[str, ...] | None = attrs.field(
        default=None, metadata={FROM_WIRE: tuple, TO_WIRE: list}
    )
    timeout_ms: int | None = None
    hooks: tuple[Mapping[str, Any], ...] = attrs.field(default=(), metadata={TO_WIRE: list})
    script_lines: Mapping[str, Sequence[str | None]] | None = attrs.field(
        # As sent: lists, as the config's per-call layer validates them.
        default=None,
        metadata={WIRE: "script", FROM_WIRE: dict},
    )
    autonomy: Effect | None = attrs.field(
        default=None, metadata={FROM_WIRE: Effect.parse, TO_WIRE: lambda e: e.word}
    )
    cancel_on_disconnect: bool = False
    #: The run's values for its prompt hooks' placeholders (names of their `vars`).
    placeholders: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def script(self) -> Script:
        """What the request runs."""
        return Script(argv=self.argv, python_file=self.file, python_code=self.python)

    @property
    def per_call(self) -> bool:
        """Whether the request layers anything on the server's config."""
        return bool(self.hooks) or self.script_lines is not None


@attrs.frozen(repr=False, eq=False)
class RequestField(Record):
    """One field of the exec request: what it must be, in a refusal's words, and its check;
    its type and what it maps to, as the docs show them; its JSON Schema."""

    want: str
    check: Callable[[Any], bool]
    type: str
    maps_to: str
    schema: Mapping[str, Any]


_STRING: Final = {"type": "string"}
_NAMES: Final = {"type": "array", "items": {"type": "string", "pattern": "^[^=]+$"}}
_ENV: Final = {
    "type": "object",
    "propertyNames": {"pattern": "^[^=]+$"},
    "additionalProperties": _STRING,
}


def _is_script(value: Any) -> bool:
    return isinstance(value, dict) and all(
        k in SCRIPT_PHASES
        and isinstance(v, list)
        and all(x is None or isinstance(x, str) for x in v)
        for k, v in value.items()
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and text_problem(value) is None


def _is_argv(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(_is_text(x) for x in value)
        and value[0] != ""
    )


def _is_env(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(isinstance(x, str) for x in value.values())
        and not env_problems(value, "env")
    )


def _is_names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(x, str) for x in value)
        and not env_problems(dict.fromkeys(value, ""), "names")
    )


def _env_problems(obj: Mapping[str, Any]) -> list[str]:
    """An `env` value that looks like `${NAME}`: said with what to send instead. Only
    names are quoted, never a value (a caller's value may be a secret)."""
    env = obj.get("env")
    if not isinstance(env, dict):
        return []
    found = []
    for name, value in env.items():
        if isinstance(value, str) and reference_problem(value) is not None:
            found.append(
                f"env.{name}: values are literal strings, never expanded; to pass a variable,"
                " name it in passEnv or secrets and send its value in callerEnv"
            )
    return found


#: Every field of an exec request, in the order refusals list them and the docs show them.
#: Text that reaches a process (argv, env, cwd, code, stdin) holds no NUL and no lone
#: surrogate.
EXEC_FIELDS: Final[dict[str, RequestField]] = {
    "argv": RequestField(
        "a non-empty array of strings (no NUL or lone surrogate; the first not empty)",
        _is_argv,
        "non-empty array of strings",
        "the script, as `exec -- ARGV…`",
        {
            "type": "array",
            "prefixItems": [{"type": "string", "minLength": 1}],
            "items": _STRING,
            "minItems": 1,
        },
    ),
    "python": RequestField(
        "a string of Python code",
        _is_text,
        "string",
        "Python code, as `exec -c CODE`",
        _STRING,
    ),
    "file": RequestField(
        "a string: a Python file, relative to cwd",
        lambda v: _is_text(v) and v != "",
        "string",
        "a Python file, relative to `cwd`, as `exec --python FILE`",
        {"type": "string", "minLength": 1},
    ),
    "stdin": RequestField(
        "a string (sent as UTF-8)",
        lambda v: isinstance(v, str) and jsontext.is_unicode(v),
        "string",
        "the script's stdin, sent as UTF-8",
        _STRING,
    ),
    "input": RequestField(
        "any JSON value",
        lambda v: True,
        "any JSON",
        "the run's `input` (`null` is an input; absent is none)",
        {},
    ),
    "env": RequestField(
        "an object of strings, names without '=', NUL or lone surrogates, values without "
        "NUL or lone surrogates",
        _is_env,
        "object of strings",
        "added to the script's scrubbed environment, literal (`${NAME}` is refused)",
        _ENV,
    ),
    "passEnv": RequestField(
        "an array of variable names or globs the run copies from callerEnv",
        _is_names,
        "array of names or globs",
        "copied from `callerEnv` to the script, as `exec --pass-env`",
        _NAMES,
    ),
    "secrets": RequestField(
        "an array of variable names (no glob) the run copies from callerEnv, as secrets",
        lambda v: _is_names(v) and not any(secret_name_problem(x) for x in v),
        "array of names",
        "copied from `callerEnv` as secrets (redacted as `[secret NAME]`), as `exec --secret`",
        {"type": "array", "items": {"type": "string", "pattern": SECRET_NAME_PATTERN}},
    ),
    "callerEnv": RequestField(
        "an object of strings: the caller's values for the names the run and its per-call"
        " hooks pass (passEnv, secrets)",
        _is_env,
        "object of strings",
        "the caller's values for the names the run and its per-call hooks pass; nothing else"
        " is read of it",
        _ENV,
    ),
    "cwd": RequestField(
        "an absolute path",
        lambda v: _is_text(v) and os.path.isabs(v),
        "absolute path",
        "the run's working directory, inside one of the server's roots (below); default: the"
        " first root, else an empty directory of its own",
        {"type": "string", "pattern": "^/"},
    ),
    "sandbox": RequestField(
        f"a sandbox profile ({', '.join(p.value for p in Profile)})",
        lambda v: isinstance(v, str) and v in {p.value for p in Profile},
        "profile name",
        "the run's sandbox profile, one the server allows (below)",
        {"enum": [p.value for p in Profile]},
    ),
    "network": RequestField(
        'an array of host globs, each with an optional port ("pypi.org", "*.example.com:8443")',
        lambda v: isinstance(v, list) and all(isinstance(x, str) and egress.valid(x) for x in v),
        "array of host globs",
        "the hosts the run's script reaches through the proxy (docs/egress.md), as `exec"
        " --network`; within the server's `[script] network` (below)",
        {"type": "array", "items": {"type": "string", "pattern": egress.PATTERN}},
    ),
    "timeoutMs": RequestField(
        "a positive integer",
        lambda v: _is_int(v) and v > 0,
        "positive integer",
        "the script's timeout (default 3600 s)",
        {"type": "integer", "minimum": 1},
    ),
    "hooks": RequestField(
        "an array of hook objects",
        lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
        "array of hook objects",
        'per-call hooks (`on = "script"` only)',
        {"type": "array", "items": {"type": "object"}},
    ),
    "script": RequestField(
        f"an object of source phases ({', '.join(SCRIPT_PHASES)}) to arrays of strings or null",
        _is_script,
        "object: phase → array of strings or `null`",
        'per-call source phases, null-splice layered (`[null, "x"]` appends)',
        {
            "type": "object",
            "propertyNames": {"enum": list(SCRIPT_PHASES)},
            "additionalProperties": {"type": "array", "items": {"type": ["string", "null"]}},
        },
    ),
    "autonomy": RequestField(
        f"an effect level ({', '.join(e.word for e in Effect)})",
        lambda v: isinstance(v, str) and v in {e.word for e in Effect},
        "effect word",
        "the caller's `hooks.autonomy` (can only lower the config's)",
        {"enum": [e.word for e in Effect]},
    ),
    "cancelOnDisconnect": RequestField(
        "true or false",
        lambda v: isinstance(v, bool),
        "boolean",
        "cancel the run if this socket ends before `end`",
        {"type": "boolean"},
    ),
    "placeholders": RequestField(
        "an object of any JSON values, for prompt hooks' placeholders, each name a letter or _"
        " then letters, digits, _ or -, and not a built-in's (error, result, input, …)",
        lambda v: (
            isinstance(v, dict) and all(is_name(k) and run_value_problem(k) is None for k in v)
        ),
        "object of JSON values",
        "the values of the prompt hooks' placeholders (names of their `vars`; a name none of"
        " the server's prompt hooks takes is refused), as `exec --placeholder`",
        {"type": "object", "propertyNames": {"pattern": NAME_PATTERN}},
    ),
}
#: The fields that say what runs: a request has exactly one.
WHAT: Final = ("argv", "python", "file")


def parse_exec(message: str | bytes | Mapping[str, Any]) -> ExecRequest:
    """An exec request (its text, or the JSON object already read from it), checked field by
    field; `WireError` (4400, 1003 for binary) lists every problem."""
    if isinstance(message, Mapping):
        obj = message
    else:
        obj = parse_json_object(message, "the exec request")
    problems = [
        f"unknown field {key!r} (fields: {', '.join(EXEC_FIELDS)})"
        for key in obj
        if key not in EXEC_FIELDS
    ]
    problems += [
        f"{key}: expected {field.want}, got {_found(key, obj[key])}"
        for key, field in EXEC_FIELDS.items()
        if key in obj and not field.check(obj[key])
    ]
    problems += _env_problems(obj)
    given = [key for key in WHAT if key in obj]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        problems.append(f"expected exactly one of argv, python, file; found {found}")
    if problems:
        raise WireError(Close.BAD_REQUEST, "; ".join(problems), problems)
    return from_json(obj, ExecRequest)


#: The fields that take one of a few words: a word refused is shown (`"stict"`).
_CHOICES: Final = frozenset({"sandbox", "autonomy"})


def _found(key: str, value: Any) -> str:
    """What a refused field holds, in words: the item, name or value a process cannot take
    (`an array whose item 1 holds a NUL character`), else its type."""
    if value == []:
        return "an empty array"
    if key in _CHOICES and isinstance(value, str) and (shown := json.dumps(value)).isprintable():
        return shown[:80]  # (a misspelt choice; no field of them holds a secret)
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e15:
        return f"the number {value}"
    if key == "argv" and isinstance(value, list) and value[0] == "":
        return "an array whose item 0, the program, is empty"
    if key == "secrets" and isinstance(value, list):
        globs = [x for x in value if isinstance(x, str) and any(c in x for c in "*?[")]
        if globs:
            return f"an array that names a glob ({globs[0]!r})"
    return text_found(value, names=key in ("passEnv", "secrets")) or describe(value)


def wire_request(request: ExecRequest) -> dict[str, Any]:
    """The request as a client sends it (`exec --remote`): each field it sets, by its wire
    name; a field at its default is left out."""
    return to_json(request)


def field_table() -> str:
    """The request's fields as docs/service.md shows them: a Markdown table."""
    rows = [f"| `{key}` | {field.type} | {field.maps_to} |" for key, field in EXEC_FIELDS.items()]
    return "\n".join(["| field | type | maps to |", "| --- | --- | --- |", *rows]) + "\n"


def request_schema() -> dict[str, Any]:
    """The request's JSON Schema (2020-12), from the same table: for a client to check a
    request before it sends one, or to declare what a tool takes. The checks above are
    stricter where a schema cannot say it (no NUL or lone surrogate in text a process
    gets, no `${NAME}` in `env`)."""
    return {
        "$schema": DIALECT,
        "title": "mcpx-hooks exec request",
        "type": "object",
        "properties": {
            key: {**field.schema, "description": field.maps_to}
            for key, field in EXEC_FIELDS.items()
        },
        "additionalProperties": False,
        "oneOf": [{"required": [key]} for key in WHAT],
    }
