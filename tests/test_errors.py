"""The one exception tree: every exception class the supervisor defines derives from
`HooksError`, found by importing every module of `mcpx_hooks.supervisor`.

`runners/` is outside it on purpose: runners are standard library only and never import the
supervisor (an import contract), and their exceptions never leave the hook or script process
that raises them (they become exit statuses and reports the supervisor reads)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mcpx_hooks.supervisor
from mcpx_hooks.supervisor.core.errors import HooksError, Problem

#: Running it is the CLI's `main` (it exits): its names are `cli/main.py`'s.
_NOT_IMPORTED = {"mcpx_hooks.supervisor.__main__"}


def _exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    package = mcpx_hooks.supervisor
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if info.name in _NOT_IMPORTED:
            continue
        module = importlib.import_module(info.name)
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        ]
    return found


def test_every_exception_the_supervisor_defines_is_a_hooks_error() -> None:
    classes = _exception_classes()
    # Every room is walked (a walk that imported nothing would pass).
    rooms = {c.__module__.split(".")[2] for c in classes}
    assert {"cli", "cluster", "config", "core", "process", "run", "service"} <= rooms
    outside = sorted(
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, HooksError)
    )
    assert outside == []


def test_an_error_callers_catch_by_its_standard_base_keeps_it() -> None:
    from mcpx_hooks.supervisor.core.jsontext import JsonError
    from mcpx_hooks.supervisor.run.journals import UnknownRun

    assert issubclass(JsonError, ValueError) and issubclass(JsonError, HooksError)
    assert issubclass(UnknownRun, LookupError) and issubclass(UnknownRun, HooksError)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": "x\x1b"}', "Invalid control character at line 1, column 9"),
        ('{"a": "x', "Unterminated string starting at line 1, column 7"),
        ("{oops", "Expecting property name enclosed in double quotes (at line 1, column 2)"),
    ],
)
def test_a_json_error_reads_as_one_sentence(text: str, said: str) -> None:
    # Python's words for some errors end with "at", which read "Invalid control character
    # at (at line 1, column 9)" in a hook's invalid-output reason.
    from mcpx_hooks.supervisor.core.jsontext import JsonError, loads

    with pytest.raises(JsonError) as caught:
        loads(text)
    assert str(caught.value) == said


def test_a_problem_is_said_on_one_line_whatever_its_file_and_pointer_hold() -> None:
    # A file's name as bash quotes it (it pastes back), a key's characters as JSON escapes
    # (as the message quotes the key); what is printable is left as it is.
    assert str(Problem("a b.toml", "/hooks/0", "m")) == "a b.toml:/hooks/0: m"
    assert str(Problem("c.toml", "", "m")) == "c.toml:/: m"
    said = str(Problem("/p/a\nb\x1b.toml", "/x\ny\u202e", 'unknown key "x\\ny\\u202e"'))
    assert said == "$'/p/a\\nb\\x1b.toml':/x\\ny\\u202e: unknown key \"x\\ny\\u202e\""
    assert str(Problem("it's\n.toml", "/", "m")) == "$'it\\'s\\n.toml':/: m"
