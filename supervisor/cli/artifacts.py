"""`exec --artifacts DIR`: a run's kept artifacts copied out when it ends, in process or from
the server (`--remote`), each to `DIR/<its name>`.

An artifact's name comes from the script (or from a server), so it is taken apart before it
names a file: a relative path of plain segments (no `..`, `.`, empty or absolute parts, no
NUL), whose directories under DIR are made here and are never symlinks, and whose file is
opened without following a symlink. A file of that name is replaced. Each copy is checked
against its frame's size and sha256; one that fails the check (or is cut short) is removed.
What could not be copied is said on stderr, and a run that ended in `result` then exits 1: a
CI job that asked for the artifacts finds out.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys

from .common import EXIT_FAILED, EXIT_OK, say

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, Final

    from ..run.journal import RunJournal
    from ..service.remote import Remote

_WRITE: Final = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK: Final = 1 << 20


def directory_problem(directory: str) -> str | None:
    """Why `--artifacts DIR` cannot be used, before anything runs (None: it can). DIR is made
    here when missing: a run with no artifacts leaves it there empty, and one that cannot be
    made is said now, not after the run."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        return f"--artifacts {directory}: exists and is not a directory"
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        return f"--artifacts {directory}: cannot make it: {exc.strerror or exc}"
    return None


def with_artifacts(code: int, copied: bool) -> int:
    """`exec`'s exit code once the artifacts were asked for: a result whose artifacts could
    not all be copied out exits 1."""
    return EXIT_FAILED if code == EXIT_OK and not copied else code


def _artifacts(frames: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    from ..core.frames import FrameType

    return [f for f in frames if f.get("type") == FrameType.ARTIFACT]


def target(directory: str, name: object) -> str | None:
    """Where an artifact named `name` goes under `directory`, its directories made (never
    through a symlink); None when the name is not a plain relative path."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        return None
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    here = directory
    os.makedirs(here, exist_ok=True)
    for part in parts[:-1]:
        here = os.path.join(here, part)
        try:
            os.mkdir(here, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                return None
    return os.path.join(here, parts[-1])


def _check(frame: Mapping[str, Any], size: int, digest: str) -> str | None:
    if size != frame.get("size") or digest != frame.get("sha256"):
        return f"{size} bytes with sha256 {digest[:12]}…, not what its frame says"
    return None


def _say(problems: list[str], copied: int, directory: str) -> bool:
    for problem in problems:
        say(f"mcpx-hooks exec: --artifacts: {problem}")
    if copied:
        print(f"mcpx-hooks exec: {copied} artifact(s) copied to {directory}", file=sys.stderr)
    return not problems


def copy_local(journal: RunJournal, directory: str) -> bool:
    """Copies an in-process run's kept artifacts out (blocking: run it in a thread)."""
    from ..run.artifacts import ArtifactGone

    problems: list[str] = []
    copied = 0
    for frame in _artifacts(journal.frames):
        name = frame.get("name")
        path: str | None = None
        try:
            if journal.artifacts is None:
                raise ArtifactGone("this run's artifacts are not kept")
            stored = journal.artifacts.find(journal.run_id, str(frame.get("id")))
            path = target(directory, name)
            if path is None:
                problems.append(f"{name!r}: not a plain relative name; not copied")
                continue
            size, digest = _copy_file(stored.path, path)
            bad = _check(frame, size, digest)
        except ArtifactGone as exc:
            bad = str(exc)
        except OSError as exc:
            bad = _os_said(exc, path)
        if bad is not None:
            problems.append(f"{name}: {bad}")
            if path is not None:
                _discard(path)
            continue
        copied += 1
    return _say(problems, copied, directory)


def _copy_file(source_path: str, path: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(source_path, "rb") as source, os.fdopen(_opener(path, 0), "wb") as out:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


async def copy_remote(remote: Remote, frames: Sequence[Mapping[str, Any]], directory: str) -> bool:
    """Fetches a remote run's artifacts (`GET /v1/runs/{runId}/artifacts/{id}`) into
    `directory`, each streamed to its file."""
    import trio

    from ..service.httpclient import artifact_path, open_get
    from ..service.remoteread import RemoteError

    problems: list[str] = []
    copied = 0
    for frame in _artifacts(frames):
        name = frame.get("name")
        try:
            path = await trio.to_thread.run_sync(target, directory, name)
        except OSError as exc:
            problems.append(f"{name}: {_os_said(exc, None)}")
            continue
        if path is None:
            problems.append(f"{name!r}: not a plain relative name; not copied")
            continue
        digest = hashlib.sha256()
        size = 0
        try:
            where = artifact_path(str(frame.get("runId")), str(frame.get("id")))
            async with open_get(remote, where) as pieces:
                out = await trio.open_file(path, "wb", opener=_opener)
                async with out:
                    async for piece in pieces:
                        digest.update(piece)
                        size += len(piece)
                        await out.write(piece)
            bad = _check(frame, size, digest.hexdigest())
        except RemoteError as exc:
            bad = str(exc)
        except OSError as exc:
            bad = _os_said(exc, path)
        if bad is not None:
            problems.append(f"{name}: {bad}")
            _discard(path)  # never a partial or unverified file under its name
            continue
        copied += 1
    return _say(problems, copied, directory)


def _os_said(exc: OSError, path: str | None) -> str:
    """What went wrong, in words: the file the error names, else the one being written (a
    write that finds the disk full names none), without Python's `[Errno N]`."""
    why = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{exc.filename}: {why}"
    return why if path is None else f"cannot write {path}: {why}"


def _discard(path: str) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)


def _opener(path: str, flags: int) -> int:
    return os.open(path, _WRITE, 0o644)
