"""pre-commit's `files` (a Python regex, searched in a path) as `when.files` globs, where globs
can say exactly the same; None where they cannot (the caller lists it as not converted).

What converts (each `|` alternative on its own, a group of plain alternatives `(a|b)` or
`(?:a|b)` expanded):

| regex | globs |
| --- | --- |
| `\\.py$`, `.*\\.py$`, `^.*\\.py$` | `*.py` (a name ending so, at any depth) |
| `\\.(py|pyi)$` | `*.py`, `*.pyi` |
| `^src/`, `^src/.*` | `src/**` |
| `^src/.*\\.py$` | `src/**/*.py` |
| `^setup\\.py$` | `/setup.py` |

Anything else (classes, `+`, `?`, a path without its anchor, …) is not converted: no guess.
"""

from __future__ import annotations

import re
from typing import Final

#: The most globs one regex or one lefthook glob becomes: each group of alternatives
#: multiplies them (`(a|b)` 24 times is 16,777,216), so past this it is not converted.
MAX_GLOBS: Final = 64
#: What stands for `.*` while an alternative is read (never in a path).
_ANY: Final = "\0"
#: Characters that are themselves in a regex and in a glob.
_PLAIN: Final = re.compile(r"[A-Za-z0-9_/\- ]")
#: Characters a glob would read as patterns: a literal one cannot be said in a glob.
_GLOB_CHARS: Final = frozenset("*?[]")


def _alternatives(regex: str) -> list[str] | None:
    """`regex` split at its top-level `|`, and each plain group expanded; None when it has
    a group that is not plain alternatives, or nested groups, or makes over `MAX_GLOBS`."""
    out = [""]
    i = 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            out = [o + regex[i : i + 2] for o in out]
            i += 2
        elif c == "(":
            end = regex.find(")", i)
            if end < 0:
                return None
            inner = regex[i + 1 : end]
            inner = inner.removeprefix("?:")
            if "(" in inner or inner.startswith("?"):
                return None
            choices = inner.split("|")
            if len(out) * len(choices) > MAX_GLOBS:
                return None
            out = [o + choice for o in out for choice in choices]
            i = end + 1
        elif c == "|":
            rest = _alternatives(regex[i + 1 :])
            return None if rest is None or len(out) + len(rest) > MAX_GLOBS else [*out, *rest]
        else:
            out = [o + c for o in out]
            i += 1
    return out


def _tokens(alternative: str) -> tuple[bool, bool, str] | None:
    """(anchored at the start, at the end, the body with `.*` as `_ANY`); None for anything
    but literals, escaped punctuation and `.*`."""
    start = alternative.startswith("^")
    body = alternative[1:] if start else alternative
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[:-1] if end else body
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if body.startswith(".*", i):
            out.append(_ANY)
            i += 2
        elif c == "\\" and i + 1 < len(body) and not body[i + 1].isalnum():
            out.append(body[i + 1])
            i += 2
        elif _PLAIN.fullmatch(c):
            out.append(c)
            i += 1
        else:
            return None
    return start, end, "".join(out)


def _glob(start: bool, end: bool, body: str) -> str | None:
    """The one glob an alternative is, or None."""
    if _GLOB_CHARS & set(body.replace(_ANY, "")):
        return None
    if body.startswith(_ANY):  # `.*` first: the same as no start anchor
        start, body = False, body[1:]
    if body.endswith(_ANY) and not end:  # `.*` last, unanchored: the same as none
        body = body[:-1]
    if not body or _ANY + _ANY in body:
        return None
    if _ANY not in body:
        if start and end:
            return body if "/" in body else "/" + body
        if end and "/" not in body:
            return "*" + body  # a name that ends so, at any depth
        if start and not end and body.endswith("/"):
            return body + "**"
        return None
    head, _, tail = body.partition(_ANY)
    if start and end and _ANY not in tail and "/" not in tail and head.endswith("/"):
        return f"{head}**/*{tail}"
    return None


def regex_globs(regex: str) -> list[str] | None:
    """The `when.files` globs that match exactly the paths pre-commit's `files = regex`
    does, or None when globs cannot say it."""
    alternatives = _alternatives(regex.strip())
    if not alternatives:
        return None
    globs = []
    for alternative in alternatives:
        tokens = _tokens(alternative)
        glob = None if tokens is None else _glob(*tokens)
        if glob is None:
            return None
        globs.append(glob)
    return list(dict.fromkeys(globs))


def brace_globs(glob: str) -> list[str] | None:
    """A lefthook glob's `{a,b}` alternatives expanded (one level, each group): `*.{js,ts}`
    → `*.js`, `*.ts`; None when that makes over `MAX_GLOBS`."""
    globs = _braces(glob, MAX_GLOBS)
    return None if globs is None or len(globs) > MAX_GLOBS else globs


def _braces(glob: str, room: int) -> list[str] | None:
    """`brace_globs`, or None as soon as one group's expansion passes `room` globs (each
    group multiplies them: expanding them all first would take exponential time)."""
    match = re.search(r"\{([^{}]*)\}", glob)
    if match is None:
        return [glob]
    head, tail = glob[: match.start()], glob[match.end() :]
    # Once each, in order: nested groups expand to the same glob more than once
    # (`*.{a,b,{c,d}}` → `*.a`, `*.b`, `*.c`, `*.d`).
    expanded: dict[str, None] = {}
    for choice in match.group(1).split(","):
        more = _braces(head + choice + tail, room)
        if more is None or len(expanded) + len(more) > room * 4:
            return None
        expanded.update(dict.fromkeys(more))
    return list(expanded)
