"""Prompt once, keep the script: the cache of prompt hooks' `run` and `propose` answers.

A prompt hook whose answer carries `run` (an argv) or `propose` (a value) has its answer kept,
keyed by `cache_key`: the SHA-256 of a canonical JSON encoding of the hook's name, its prompt,
the effect in force, the model's name and the model's id, and the placeholder values. The
same instruction over the same data then gives the same command on every run, without asking
the model again, and `mcpx-hooks prompts promote` can turn it into a reviewed `run` hook.

Where: a `prompts/` directory under the state directory (`$XDG_STATE_HOME/mcpx-hooks` when
`XDG_STATE_HOME` is absolute, else `.local/state/mcpx-hooks` in the home: the trust state's
directory, `statefiles.state_home`). One file per entry, `<key>.json`, 0600 in a 0700
directory, written to a temporary file in the same directory and renamed over, so a reader
sees an entry whole or not at all. At most `MAX_ENTRIES` entries of at most
`MAX_ENTRY_BYTES` each: a `put` past the count evicts the oldest (by write time).

No secrets: the placeholder values are only hashed into the key, never stored. What is stored
is the hook's name, its declaring file and JSON pointer, its prompt as declared, the effect,
the model's name, provider and id, the time, and the answer: its argv is what the model wrote
(the caller redacts secrets from it before `put`, as from any hook output).

Reading never raises: an entry that is missing, unreadable, not a regular file of this user's,
writable by others, too large, not JSON, or not the document `put` writes is `None` (and
`unreadable()` names such files, so `prompts list` can say so). File I/O only, no trio.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ..config.privatefile import write_private
from ..config.statefiles import checkout_holding, exposed, make_state_dir, state_path
from ..core.errors import HooksError
from ..core.jsontext import JsonError, is_unicode, loads, wire_safe
from ..core.places import shown_file
from ..core.records import Record

#: Entries kept at most; a `put` past it evicts the oldest.
MAX_ENTRIES: Final = 256
#: One entry's JSON, at most; a larger one is not stored (and not read).
MAX_ENTRY_BYTES: Final = 64 * 1024
#: The directory under the state directory.
PROMPTS_DIR: Final = "prompts"
#: The version of the entry document.
ENTRY_VERSION: Final = 1

_KEY: Final = re.compile(r"[0-9a-f]{64}")
_LOCK: Final = ".lock"
#: The latest `created` believed (the year 5138): later is no time a clock shows.
_LATEST: Final = 1e11


class PromptCacheError(HooksError):
    """An entry could not be stored; the message names the file and why."""


def cache_key(  # noqa: PLR0917 -- the six inputs of the key, in their order, as callers pass them
    hook_name: str,
    prompt: str,
    effect: str,
    model_name: str,
    model_id: str,
    values: Mapping[str, Any],
) -> str:
    """The SHA-256 hex of the six, canonically encoded (sorted keys, no spaces, ASCII), so
    the same inputs give the same key in every process and any change to one gives another."""
    document = {
        "hook": hook_name,
        "prompt": prompt,
        "effect": effect,
        "model": {"name": model_name, "id": model_id},
        "values": dict(values),
    }
    try:
        text = _canonical(document)
    except (ValueError, TypeError, RecursionError):  # a value JSON has no exact form for
        text = _canonical(wire_safe(document))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def is_key(text: str) -> bool:
    """Whether `text` is spelled like a cache key (64 lowercase hex digits)."""
    return _KEY.fullmatch(text) is not None


@attrs.frozen(repr=False, eq=False)
class CachedAnswer(Record):
    """One cached answer. `file`/`pointer`: where the prompt hook was declared (None for a
    hook given on the command line or per call); `model`: `{name, provider, model}`;
    `answer`: the bound answer object, with `run` (`{"argv": [...]}`) or `propose`;
    `created`: seconds since the epoch."""

    hook: str
    file: str | None
    pointer: str | None
    prompt: str
    effect: str
    model: dict[str, Any]
    answer: dict[str, Any]
    created: float

    @property
    def argv(self) -> list[str] | None:
        """The cached command, when the answer is a `run`."""
        run = self.answer.get("run")
        return list(run["argv"]) if isinstance(run, dict) else None


def entry_document(key: str, entry: CachedAnswer) -> dict[str, Any]:
    """What `put` writes (and `prompts show --json` prints)."""
    return {"version": ENTRY_VERSION, "key": key, **attrs.asdict(entry, recurse=False)}


def parse_entry(key: str, data: Any) -> CachedAnswer | None:
    """The entry `data` holds, or None when it is not one `put` would write under `key`."""
    if not isinstance(data, dict) or data.get("version") != ENTRY_VERSION:
        return None
    if data.get("key") != key:
        return None
    hook, file, pointer = data.get("hook"), data.get("file"), data.get("pointer")
    prompt, effect, model = data.get("prompt"), data.get("effect"), data.get("model")
    answer, created = data.get("answer"), data.get("created")
    if not (isinstance(hook, str) and hook and isinstance(prompt, str)):
        return None
    if not all(v is None or isinstance(v, str) for v in (file, pointer)):
        return None
    if not (isinstance(effect, str) and isinstance(model, dict) and isinstance(answer, dict)):
        return None
    if not all(isinstance(v, str) for v in model.values()):
        return None
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    if not 0 <= created <= _LATEST:  # NaN and infinities too: no time a clock shows
        return None
    if not _answer_ok(answer):
        return None
    return CachedAnswer(hook, file, pointer, prompt, effect, model, answer, float(created))


def _answer_ok(answer: dict[str, Any]) -> bool:
    run, propose = answer.get("run"), answer.get("propose")
    if run is None:
        return isinstance(propose, dict) and "value" in propose
    if not isinstance(run, dict):
        return False
    argv = run.get("argv")
    return (
        isinstance(argv, list)
        and len(argv) > 0
        and all(isinstance(a, str) and "\0" not in a for a in argv)
        and argv[0] != ""
    )


@attrs.frozen(repr=False, eq=False)
class PromptCache(Record):
    """The cache in `directory` (created on the first `put`), keeping `max_entries`."""

    directory: Path
    max_entries: int = MAX_ENTRIES

    @classmethod
    def open(cls, environ: Mapping[str, str], cwd: str = ".") -> PromptCache | None:
        """The cache under the state directory `environ` names; None when it names none, or
        one inside the git checkout the run works in (`cwd`: a request's, on a `serve`) or
        the one this process started in (`checkout_holding`)."""
        state = state_path(environ)
        if state is None or checkout_holding(state.parent, cwd, "."):
            return None  # (in the checkout worked in, its answers may be the checkout's)
        return cls(state.parent / PROMPTS_DIR)

    @staticmethod
    def refused(environ: Mapping[str, str], cwd: str = ".") -> str:
        """Why `open` gives no cache, and how to have one: no state directory at all, or one
        inside the git checkout worked in (whose answers could have come with the checkout:
        none is believed)."""
        state = state_path(environ)
        tree = None if state is None else checkout_holding(state.parent, cwd, ".")
        if state is None or tree is None:
            return "no state directory: set XDG_STATE_HOME or HOME"
        return (
            f"the state directory {shown_file(str(state.parent))} lies inside the git checkout"
            f" {shown_file(tree)}, which could have brought prompt answers with it, so none is"
            " read or kept there; keep it outside the checkout (XDG_STATE_HOME)"
        )

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> CachedAnswer | None:
        """The entry under `key`; None when there is none or it cannot be believed."""
        if not is_key(key) or not self._directory_ok():
            return None
        data = _read_private(self.path(key))
        if data is None:
            return None
        try:
            doc = loads(data)
        except JsonError:
            return None
        if not is_unicode(json.dumps(doc, ensure_ascii=False)):
            return None  # a lone surrogate (`\ud800` in the file): no file name or argv has one
        return parse_entry(key, doc)

    def put(self, key: str, entry: CachedAnswer) -> None:
        """Stores `entry` under `key` atomically, then evicts the oldest past `MAX_ENTRIES`.
        `PromptCacheError` when it cannot (a bad key or entry, too large, the directory not
        this user's, a write that failed); nothing half-written is left behind."""
        if not is_key(key):
            raise PromptCacheError(f"{key!r} is not a cache key")
        if parse_entry(key, entry_document(key, entry)) is None:
            raise PromptCacheError(f"the answer of {entry.hook!r} is not a run or a propose")
        text = json.dumps(wire_safe(entry_document(key, entry)), ensure_ascii=False, indent=1)
        data = text.encode()
        if len(data) > MAX_ENTRY_BYTES:
            raise PromptCacheError(
                f"the answer of {entry.hook!r} is {len(data)} bytes, more than the cache keeps"
                f" ({MAX_ENTRY_BYTES})"
            )
        with self._locked():
            _write_atomic(self.path(key), data)
            self._evict()

    def entries(self) -> list[tuple[str, CachedAnswer]]:
        """Every entry that can be believed, newest first."""
        found = [(key, self.get(key)) for key in self._keys()]
        good = [(key, entry) for key, entry in found if entry is not None]
        return sorted(good, key=lambda item: (-item[1].created, item[0]))

    def unreadable(self) -> list[str]:
        """The keys whose files are there but cannot be believed."""
        return [key for key in self._keys() if self.get(key) is None]

    def remove(self, key: str) -> bool:
        """Removes the entry under `key`; whether there was one."""
        if not is_key(key):
            return False
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise PromptCacheError(f"cannot remove {self.path(key)}: {exc.strerror}") from None
        return True

    def clear(self) -> int:
        """Removes every entry (readable or not) and stale temporary files; how many
        entries there were. What cannot be removed (a directory in an entry's place) is
        left, and then `PromptCacheError` says how many went and what is left."""
        removed, left = 0, []
        for key in self._keys():
            try:
                removed += self.remove(key)
            except PromptCacheError as exc:
                left.append(str(exc))
        for name in self._names():
            if name.startswith(".") and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    (self.directory / name).unlink()
        if left:
            raise PromptCacheError(f"removed {removed}, but {'; '.join(left)}")
        return removed

    def unusable(self) -> str | None:
        """Why the cache's directory, there, cannot be read or believed (a directory above it
        that may not be searched, one of another user's or that others may write: every
        entry is then left out, as if there were none); None when it can, or is not there."""
        try:
            st = os.lstat(self.directory)
            if stat.S_ISDIR(st.st_mode):
                os.listdir(self.directory)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{shown_file(self.directory)} cannot be read: {exc.strerror}"
        return self._not_own(st)

    def _not_own(self, st: os.stat_result) -> str | None:
        """Why the directory, as `lstat` found it, is not one the cache is kept in."""
        if stat.S_ISLNK(st.st_mode):
            try:
                to = f" (to {shown_file(os.readlink(self.directory))})"
            except OSError:
                to = ""
            return (
                f"{shown_file(self.directory)} is a symlink{to}, not a directory of its own:"
                " remove it, and the cache is made again"
            )
        if not stat.S_ISDIR(st.st_mode):
            return f"{shown_file(self.directory)} is not a directory"
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return (
                f"{shown_file(self.directory)} is not a directory of yours that only you may write"
            )
        if (holder := exposed(self.directory)) is not None:
            return (
                f"{shown_file(self.directory)} is in {holder}, so another user could have put"
                " its answers there"
            )
        return None

    def _names(self) -> list[str]:
        if not self._directory_ok():
            return []
        try:
            return sorted(os.listdir(self.directory))
        except OSError:
            return []

    def _keys(self) -> list[str]:
        return [n[:-5] for n in self._names() if n.endswith(".json") and is_key(n[:-5])]

    def _directory_ok(self) -> bool:
        try:
            st = os.lstat(self.directory)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
        return exposed(self.directory) is None  # (another user could have written its files)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            make_state_dir(self.directory.parent)
            with contextlib.suppress(FileExistsError):
                self.directory.mkdir(mode=0o700)
        except OSError as exc:
            raise PromptCacheError(f"cannot create {self.directory}: {exc.strerror}") from None
        if not self._directory_ok():
            try:
                why = self._not_own(os.lstat(self.directory))
            except OSError as exc:
                why = f"{shown_file(self.directory)} cannot be read: {exc.strerror}"
            raise PromptCacheError(why or f"{shown_file(self.directory)} cannot be used")
        try:
            lock_fd = os.open(
                self.directory / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )
        except OSError as exc:
            raise PromptCacheError(f"cannot lock {self.directory}: {exc.strerror}") from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock_fd)

    def _evict(self) -> None:
        aged: list[tuple[int, str]] = []
        for key in self._keys():
            try:
                aged.append((os.lstat(self.path(key)).st_mtime_ns, key))
            except OSError:
                continue
        aged.sort()
        for _, key in aged[: max(0, len(aged) - self.max_entries)]:
            with contextlib.suppress(OSError):
                self.path(key).unlink()


def _read_private(path: Path) -> bytes | None:
    """The bytes of a regular file of this user's that only this user may write, at most
    `MAX_ENTRY_BYTES`; None otherwise. A FIFO or a device is refused before a read blocks,
    a symlink is not followed."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None
        data = os.read(fd, MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= MAX_ENTRY_BYTES else None


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        write_private(path, data)
    except OSError as exc:
        raise PromptCacheError(f"cannot write {path}: {exc.strerror}") from None
