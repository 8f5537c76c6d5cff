"""`prompts promote`: a prompt hook's cached command written into a config file as a `run` hook.

In place (the declaring file): the prompt hook's table becomes a `run` hook with the cached
argv where `prompt` was, its other keys (name, on, phase, failure, when, timeoutMs, cwd, …)
kept as they are and the prompt's own keys (`PROMPT_KEYS`) dropped. Its `effect` is lowered
(`promoted_effect`): the prompt hook needed `run` for its answer's command to run; the
promoted hook is that command, and what it prints is advice (`advise`), or with `failure =
"closed"` a gate whose failure refuses (`ask`): never `run`, which would let the reviewed
command answer with yet another command. A TOML file is
rewritten with tomlkit, so every byte outside that table (comments, blank lines, order) stays
as it was; a JSON file is written again with its key order kept. To another file (`--to`): a
new hook with the same keys is appended there, and the prompt hook's own file is not touched.

The written file must validate (the validator runs on it, beside the file, before it
replaces the file by a rename); when it would not, or when the file is not the one the answer
was cached from (the hook is gone, or its prompt changed), or it changed while being
rewritten, nothing is written and `PromoteError` says why. No trio: file I/O only.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import tomlkit
import tomlkit.exceptions
from tomlkit.container import Container
from tomlkit.items import AoT, Array, InlineTable, Item, Table

from ..core.effects import REFUSING, Effect
from ..core.errors import HooksError, Problem
from ..core.hooks import Failure
from ..core.jsontext import is_unicode
from ..core.places import shown_file as shown
from ..core.records import Record
from .files import read_bytes
from .loading import validate_files

#: The keys only a prompt hook has: dropped when it becomes a `run` hook.
PROMPT_KEYS: Final = frozenset({"prompt", "model", "vars"})
_BOM: Final = "\ufeff"


class PromoteError(HooksError):
    """Nothing was written; the message says why. `problems`: what the validator found in
    the file as it would have been written."""

    def __init__(
        self, message: str, problems: Sequence[Problem] = (), *, bad_input: bool = True
    ) -> None:
        super().__init__(message)
        self.problems = tuple(problems)
        self.bad_input = bad_input


@attrs.frozen(repr=False, eq=False)
class Promoted(Record):
    """What was written: the file, the hook's name and its pointer there."""

    file: Path
    hook: str
    pointer: str
    appended: bool


def promote_answer(
    source: Path,
    *,
    hook: str,
    pointer: str | None,
    prompt: str,
    argv: Sequence[str],
    to: Path | None = None,
) -> Promoted:
    """Writes `argv` as the `run` hook that replaces the prompt hook `hook` (declared in
    `source` at `pointer`, with `prompt`): in `source` itself, or appended to `to`."""
    text, doc = _read(source)
    index = _find(doc, source, hook, pointer, prompt)
    if to is None or _same_file(source, to):
        with _unwritable(source):
            if source.suffix.lower() == ".json":
                new = _json_in_place(text, doc, index, argv)
            else:
                new = _toml_in_place(text, source, index, argv)
        _write_validated(source, text, new)
        return Promoted(source, hook, f"/hooks/{index}", appended=False)
    if to.suffix.lower() not in (".toml", ".json"):
        raise PromoteError(f"{shown(to)}: expected a .toml or .json config file to append to")
    declared = _run_hook(doc["hooks"][index], argv, name=hook)
    exists = to.exists() or to.is_symlink()
    target_text, target_doc = _read(to) if exists else ("", {})
    hooks = target_doc.get("hooks", [])
    if not isinstance(hooks, list):
        raise PromoteError(f"{shown(to)}: /hooks is not a list of hooks")
    with _unwritable(to):
        if to.suffix.lower() == ".json":
            new = _json_appended(target_text, target_doc, declared)
        else:
            new = _toml_appended(target_text, to, declared)
    _write_validated(to, target_text if exists else None, new)
    return Promoted(to, hook, f"/hooks/{len(hooks)}", appended=True)


@contextlib.contextmanager
def _unwritable(path: Path) -> Iterator[None]:
    """A value the file's format cannot hold (a TOML null, a JSON date) is `PromoteError`."""
    try:
        yield
    except (tomlkit.exceptions.TOMLKitError, TypeError, ValueError, RecursionError) as exc:
        raise PromoteError(
            f"{shown(path)}: the run hook cannot be written in this file's format: {str(exc)[:200]}"
        ) from None


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its document (order kept), or `PromoteError`."""
    data, problems = read_bytes(path, str(path))
    if data is None:
        raise PromoteError("; ".join(str(p) for p in problems))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromoteError(f"{shown(path)}: cannot read the file: {exc}") from None
    body = text.removeprefix(_BOM)
    try:
        doc = json.loads(body) if path.suffix.lower() == ".json" else tomllib.loads(body)
    except (ValueError, RecursionError) as exc:
        raise PromoteError(f"{shown(path)}: cannot be read as config: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise PromoteError(f"{shown(path)}: expected a config document (an object)")
    return text, doc


def _find(doc: Mapping[str, Any], path: Path, hook: str, pointer: str | None, prompt: str) -> int:
    """The index of the prompt hook `hook` in `doc`'s hooks: the one at `pointer` when it is
    that hook (by name, or unnamed there), else the one of that name."""
    hooks = doc.get("hooks")
    tables = hooks if isinstance(hooks, list) else []
    at = _pointer_index(pointer)
    candidates = [
        i
        for i, obj in enumerate(tables)
        if isinstance(obj, dict) and (obj.get("name") == hook or (i == at and "name" not in obj))
    ]
    if at in candidates:
        candidates = [at]
    if not candidates:
        raise PromoteError(
            f"{shown(path)}: no hook named {hook!r} (the file changed since its answer"
            " was cached); nothing was written"
        )
    index = candidates[0]
    obj = tables[index]
    if "prompt" not in obj:
        raise PromoteError(
            f"{shown(path)}:/hooks/{index}: {hook!r} is not a prompt hook (promoted"
            " already?); nothing was written"
        )
    if obj["prompt"] != prompt:
        raise PromoteError(
            f"{shown(path)}:/hooks/{index}/prompt: the prompt of {hook!r} is not the one"
            " its answer was cached for (the file changed since); run the hook again to cache"
            " an answer to this prompt. Nothing was written"
        )
    return index


def _pointer_index(pointer: str | None) -> int | None:
    parts = (pointer or "").split("/")
    if len(parts) == 3 and parts[1] == "hooks" and parts[2].isascii() and parts[2].isdigit():
        return int(parts[2])
    return None


#: The most effect a promoted hook keeps: its output is advice.
PROMOTED_MAX: Final = Effect.ADVISE


def promoted_effect(word: Any, failure: Any) -> Any:
    """The effect a promoted hook gets for its prompt hook's `word`: at most `advise`, or
    the refusing level (`ask`) when `failure` is `closed` (a gate stays a gate); a word that
    is not an effect is left for the validator to name."""
    try:
        declared = Effect.parse(str(word))
    except KeyError:
        return word
    most = REFUSING if failure == Failure.CLOSED.value else PROMOTED_MAX
    return min(declared, most).word if declared > most else word


def _run_hook(
    obj: Mapping[str, Any], argv: Sequence[str], *, name: str | None = None
) -> dict[str, Any]:
    """The prompt hook's keys, in order, with `run` where `prompt` was and the prompt's own
    keys dropped; given a `name`, an unnamed hook gets it first."""
    out: dict[str, Any] = {"name": name} if name is not None and "name" not in obj else {}
    for key, value in obj.items():
        if key == "prompt":
            out["run"] = list(argv)
        elif key == "effect":
            out[key] = promoted_effect(value, obj.get("failure"))
        elif key not in PROMPT_KEYS:
            out[key] = value
    return out


def _toml_in_place(text: str, path: Path, index: int, argv: Sequence[str]) -> str:
    doc = _toml_document(text, path)
    hooks = doc["hooks"]
    if not isinstance(hooks, AoT | Array):
        raise PromoteError(f"{shown(path)}:/hooks: expected a list of hooks")
    old = hooks[index]
    if isinstance(old, Table):
        body = Container(True)
        for key, item in old.value.body:
            if key is None:
                body.append(None, item)
            elif key.key == "prompt":
                body.append("run", _argv_item(argv))
            elif key.key == "effect":
                body.append(key, _lowered(item, old.get("failure")))
            elif key.key not in PROMPT_KEYS:
                body.append(key, item)
        hooks[index] = Table(body, old.trivia, is_aot_element=old.is_aot_element())
    elif isinstance(old, InlineTable):
        hooks[index] = _inline(_run_hook(old.unwrap(), argv))
    else:
        raise PromoteError(f"{shown(path)}:/hooks/{index}: expected a table")
    return _BOM * text.startswith(_BOM) + tomlkit.dumps(doc)


def _lowered(item: Item, failure: Any) -> Item:
    """An `effect` item as `promoted_effect` has it, its comment and spacing kept."""
    word = promoted_effect(item.unwrap(), failure)
    if word == item.unwrap():
        return item
    new: Item = tomlkit.item(word)
    for field in ("indent", "comment_ws", "comment", "trail"):
        setattr(new.trivia, field, getattr(item.trivia, field))
    return new


def _toml_appended(text: str, path: Path, declared: Mapping[str, Any]) -> str:
    doc = _toml_document(text, path) if text else tomlkit.document()
    hooks = doc.get("hooks")
    if isinstance(hooks, Array):
        hooks.append(_inline(declared))
    else:
        table = tomlkit.table()
        for key, value in declared.items():
            table.append(key, _argv_item(value) if key == "run" else _plain_item(value))
        if isinstance(hooks, AoT):
            hooks.append(table)
        else:
            aot = tomlkit.aot()
            aot.append(table)
            doc.append("hooks", aot)
    out = tomlkit.dumps(doc)
    return _BOM * text.startswith(_BOM) + out


def _toml_document(text: str, path: Path) -> tomlkit.TOMLDocument:
    body = text.removeprefix(_BOM)
    try:
        doc = tomlkit.parse(body)
    except (tomlkit.exceptions.TOMLKitError, ValueError, RecursionError) as exc:
        raise PromoteError(
            f"{shown(path)}: cannot be rewritten in place: {str(exc)[:200]}"
        ) from None
    if tomlkit.dumps(doc) != body:
        raise PromoteError(f"{shown(path)}: cannot be rewritten without changing other lines")
    return doc


def _argv_item(argv: Any) -> Item:
    array = tomlkit.array()
    array.extend(list(argv))
    return array


def _plain_item(value: Any) -> Item:
    """A value as one line: tables inline, so the new hook is one `[[hooks]]` block."""
    if isinstance(value, Mapping):
        return _inline(value)
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(_plain_item(v) if isinstance(v, Mapping | list) else v for v in value)
        return array
    item: Item = tomlkit.item(value)
    return item


def _inline(mapping: Mapping[str, Any]) -> InlineTable:
    table = tomlkit.inline_table()
    for key, value in mapping.items():
        table.append(key, _plain_item(value))
    return table


def _json_in_place(text: str, doc: dict[str, Any], index: int, argv: Sequence[str]) -> str:
    doc["hooks"][index] = _run_hook(doc["hooks"][index], argv)
    return _json_text(text, doc)


def _json_appended(text: str, doc: dict[str, Any], declared: Mapping[str, Any]) -> str:
    doc.setdefault("hooks", []).append(dict(declared))
    return _json_text(text, doc)


def _json_text(old: str, doc: Mapping[str, Any]) -> str:
    """`doc` as JSON, indented as the old text was (two spaces for a new file)."""
    indent: int | str = 2
    for line in old.removeprefix(_BOM).splitlines()[1:]:
        lead = line[: len(line) - len(line.lstrip())]
        if lead:
            indent = lead if "\t" in lead else len(lead)
            break
    text = json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"
    if not is_unicode(text):  # a lone surrogate, written as `\ud800` in the old text too
        text = json.dumps(doc, indent=indent, ensure_ascii=True) + "\n"
    return text


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _write_validated(path: Path, before: str | None, text: str) -> None:
    """Writes `text` beside `path`, validates it there, and renames it over `path` when it
    validates and `path` still holds `before` (None: there was no file)."""
    if not is_unicode(text):  # a lone surrogate from a JSON file's `\ud800`: TOML has none
        raise PromoteError(
            f"{shown(path)}: the hook holds text with no UTF-8 form; nothing was written"
        )
    target = Path(os.path.realpath(path))
    try:
        fd, temp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.stem}.promote-", suffix=target.suffix
        )
    except OSError as exc:
        raise PromoteError(
            f"cannot write beside {shown(path)}: {exc.strerror}", bad_input=False
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            os.fchmod(f.fileno(), _mode(target))
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        problems = [
            Problem(str(path), p.pointer, p.message) if p.file == temp else p
            for p in validate_files([temp])
        ]
        if problems:
            raise PromoteError(
                f"{shown(path)}: the file would not validate with the run hook; nothing"
                " was written",
                problems,
            )
        if _current(target) != before:
            raise PromoteError(
                f"{shown(path)}: the file changed while it was rewritten; run it again"
            )
        os.replace(temp, target)
    except OSError as exc:
        raise PromoteError(f"cannot write {shown(path)}: {exc.strerror}", bad_input=False) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def _mode(path: Path) -> int:
    """The file's own mode, kept; for a new file, what the umask gives (as an editor's)."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def _current(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
