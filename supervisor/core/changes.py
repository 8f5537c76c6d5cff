"""`when.files`: which files a run counts as changed, and whether a hook's globs match one.
Pure: the list itself comes from git (`run/gitchanges.py`) or from `exec --files-from`.

The matching rule, exactly (docs/hooks.md says it for users):

- A path is relative to the top of the repository, with `/` between its parts, as git
  prints it (`src/app/main.py`).
- A pattern without a `/` is matched against each path's last part, at any depth: `*.py`
  matches `setup.py` and `src/app/main.py`.
- A pattern with a `/` is matched against the whole path, from the top (a leading `/` only
  says so: `/setup.py` is the top one alone).
- `*` matches any run of characters within one part (never a `/`); `?` one character that is
  not `/`; `[abc]`, `[a-z]`, `[!abc]` one character of (or not of) a set, never `/` (a
  range the wrong way round, `[z-a]`, holds none, as `fnmatch` has it).
- `**` as a whole part matches any number of parts, none included: `src/**` matches every
  file under `src/`, `**/test_*.py` a `test_*.py` at any depth, `a/**/b` `a/b` and `a/x/y/b`.
  Elsewhere (`a**b`) it is a `*`.
- Case counts; anything else matches itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import attrs

from .records import Record

#: How many matching or changed paths `--explain` names before it counts the rest.
SHOWN_PATHS = 3


@attrs.frozen(repr=False, eq=False)
class ChangedFiles(Record):
    """The files a run counts as changed, and how they were found (`exec --explain` says it).
    `paths` is None when there is no list (not a git checkout, git missing or failing): a
    hook with `when.files` then runs, and `how` says why."""

    paths: tuple[str, ...] | None
    how: str


def given_files(text: str, origin: str = "--files-from") -> ChangedFiles:
    """The list `exec --files-from` reads: one path per line, blank lines skipped, a leading
    `./` dropped, relative to the top of the repository."""
    paths = []
    for line in text.splitlines():
        path = line.strip()
        while path.startswith("./"):
            path = path[2:]
        if path:
            paths.append(path)
    return ChangedFiles(tuple(dict.fromkeys(paths)), f"listed by {origin}")


def _members(raw: str) -> str:
    """The regex of a set's members: `a-z` a range, a range whose ends are the wrong way
    round (`z-a`) no character (as `fnmatch` has it), a `-` first or last itself."""
    out, i = [], 0
    while i < len(raw):
        if i + 2 < len(raw) and raw[i + 1] == "-":
            low, high = raw[i], raw[i + 2]
            if low <= high:
                out.append(f"{re.escape(low)}-{re.escape(high)}")
            i += 3
        else:
            out.append(re.escape(raw[i]))
            i += 1
    return "".join(out)


def _class(pattern: str, start: int) -> tuple[str, int] | None:
    """The regex of the `[...]` set at `start`, and the index after it; None: no closing `]`
    (the `[` is then itself)."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    i += negate
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a `]` first is a member
    end = pattern.find("]", i)
    if end < 0:
        return None
    members = _members(pattern[start + 1 + negate : end].replace("/", ""))
    if not members:  # `[/]`, `[z-a]`: no character of a part is in it
        return ("[^/]" if negate else "(?!)"), end + 1
    return f"[{'^' if negate else ''}{members}{'/' if negate else ''}]", end + 1


def _atoms(part: str) -> list[str | None]:
    """The regexes of `part`'s characters, in order; None for each run of `*`."""
    out: list[str | None] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            while i < len(part) and part[i] == "*":
                i += 1
            out.append(None)
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[" and (found := _class(part, i)) is not None:
            out.append(found[0])
            i = found[1]
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return out


def _part(part: str) -> str:
    """The regex of one part (no `/`). Between two `*` runs the text has a fixed length, so
    its first place is as good as any later one: each is matched there and held (an atomic
    group, as `fnmatch` does), and only the last `*` may give back. Without that, `*a*a*a*b`
    against a long run of `a` tried every way to share it out."""
    chunks: list[str] = [""]
    for atom in _atoms(part):
        if atom is None:
            chunks.append("")
        else:
            chunks[-1] += atom
    if len(chunks) == 1:
        return chunks[0]
    middle = "".join(f"(?>[^/]*?{chunk})" for chunk in chunks[1:-1])
    return f"{chunks[0]}{middle}[^/]*{chunks[-1]}"


def _parts(parts: Sequence[str]) -> str:
    return "".join(_part(p) + "/" for p in parts)


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex a `when.files` pattern is, matched against a whole path (`fullmatch`).

    Matching takes time linear in the path for each part of the pattern, whatever the
    pattern: the parts between two `**` match a fixed number of path parts, so their first
    place is as good as any later one, and each is found there and held (atomic groups);
    `**` next to `**` is one `**`. A plain translation tried every way to share the path
    out between the `**` (`**/**/**/…/x` against `a/a/a/…/y` took minutes)."""
    if "/" not in pattern:
        return re.compile(r"(?:(?>.*/))?" + _part(pattern), re.DOTALL)
    parts = pattern.lstrip("/").split("/")
    groups: list[list[str]] = [[]]
    for part in parts:
        if part != "**":
            groups[-1].append(part)
        elif groups[-1] or len(groups) == 1:
            groups.append([])
    first, *rest = groups
    if not rest:
        return re.compile(_parts(first)[:-1], re.DOTALL)
    *between, last = rest
    out = _parts(first)
    out += "".join(f"(?>(?:[^/]+/)*?{_parts(group)})" for group in between)
    out += f"(?:[^/]+/)*{_parts(last)[:-1]}" if last else ".+"
    return re.compile(out, re.DOTALL)


def matching(patterns: Iterable[str], paths: Sequence[str]) -> list[str]:
    """The paths one of `patterns` matches, in order."""
    regexes = [glob_regex(p) for p in patterns]
    return [path for path in paths if any(r.fullmatch(path) for r in regexes)]


def _some(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:SHOWN_PATHS])
    more = len(paths) - SHOWN_PATHS
    return shown + (f" and {more} more" if more > 0 else "")


def files_mismatch(patterns: Sequence[str], changed: ChangedFiles | None) -> str | None:
    """None when a hook with `when.files = patterns` runs for `changed` (a match, or no list
    to match: outside a git checkout it runs); else why not, in words."""
    if changed is None or changed.paths is None:
        return None
    if matching(patterns, changed.paths):
        return None
    shown = ", ".join(f'"{p}"' for p in patterns)
    count = len(changed.paths)
    files = f"{count} file(s) changed ({_some(changed.paths)})" if count else "no file changed"
    return f"when.files [{shown}] matches none of the files: {files}, {changed.how}"


def files_note(patterns: Sequence[str], changed: ChangedFiles | None) -> str:
    """Why a hook with `when.files = patterns` runs for `changed` (`exec --explain`)."""
    if changed is None or changed.paths is None:
        how = changed.how if changed is not None else "no list of changed files"
        return f"when.files: {how}, so it runs"
    return f"when.files matched {_some(matching(patterns, changed.paths))}, {changed.how}"
