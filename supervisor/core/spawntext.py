"""What a process can be given: the strings `execve` takes, checked where they enter.

Pure: no trio, no I/O. An argv item, an environment value or a path holds no NUL and is valid
Unicode (no lone surrogate, which has no UTF-8); an environment name is also non-empty and
holds no `=`. Every way in (a config file, a request, the command line, a hook's `run`
answer) checks with these, so the spawner never sees what it cannot start. The patterns are
the same rules for the JSON Schemas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

#: An argv item, an environment value, a path (JSON Schema `pattern`, Python `re` syntax).
TEXT_PATTERN: Final = "^[^\\u0000\\ud800-\\udfff]*$"
#: An environment variable's name.
ENV_NAME_PATTERN: Final = "^[^=\\u0000\\ud800-\\udfff]+$"

_TEXT: Final = re.compile(TEXT_PATTERN)
_ENV_NAME: Final = re.compile(ENV_NAME_PATTERN)


def text_problem(value: str) -> str | None:
    """Why `value` cannot be passed to a process, or None."""
    if _TEXT.match(value):
        return None
    if "\0" in value:
        return "holds a NUL character"
    return "holds a lone surrogate (not valid Unicode)"


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot be an environment variable's name, or None."""
    if _ENV_NAME.match(name):
        return None
    if not name:
        return "is empty"
    if "=" in name:
        return "holds '='"
    return text_problem(name)


def argv_problems(argv: Iterable[Any], field: str) -> list[str]:
    """Each item of an argv that a process cannot take, as `field[i]: why`."""
    return [
        f"{field}[{i}]: {why}"
        for i, item in enumerate(argv)
        if isinstance(item, str) and (why := text_problem(item)) is not None
    ]


def env_problems(env: Mapping[Any, Any], field: str) -> list[str]:
    """Each name or value of an environment that a process cannot take."""
    found: list[str] = []
    for name, value in env.items():
        if isinstance(name, str) and (why := env_name_problem(name)) is not None:
            found.append(f"{field}: the name {name!r} {why}")
        elif isinstance(value, str) and (why := text_problem(value)) is not None:
            found.append(f"{field}.{name}: {why}")
    return found


def text_found(value: Any, *, names: bool = False) -> str | None:
    """What a process cannot take in a JSON value of text, in words for a refusal's "got …":
    `an empty string`, `a string that holds a NUL character`, `an array whose item 1 holds
    …` (`names`: its items are variable names), `an object whose name 'A=B' holds '='`, `an
    object whose value of A holds …`. None for any other value, or one with nothing to say.
    Names are quoted, values never: a value may be a secret."""
    check = env_name_problem if names else text_problem
    if value == "":
        return "an empty string"
    if isinstance(value, str):
        why = text_problem(value)
        return None if why is None else f"a string that {why}"
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        for i, item in enumerate(value):
            if (why := check(item)) is not None:
                return f"an array whose item {i} {why}"
        return None
    if isinstance(value, dict) and all(isinstance(x, str) for x in value.values()):
        for name, item in value.items():
            if (why := env_name_problem(name)) is not None:
                return f"an object whose name {name!r} {why}"
            if (why := text_problem(item)) is not None:
                return f"an object whose value of {name} {why}"
    return None
