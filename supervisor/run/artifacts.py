"""A run's artifacts: the files its script left under `MCPX_ARTIFACTS_DIR`, framed and kept.

When the script has exited, each regular file under its artifacts directory (sorted by name,
at most `MAX_ARTIFACTS`) becomes an `artifact` frame, and its contents are copied into the
`ArtifactStore` while they are hashed (one read). The store keeps them with their run until
the run is forgotten (`Journals`), within a byte budget over all retained runs
(`[runs] artifactBytes`): an artifact that does not fit pushes out the artifacts of older
runs, oldest first; one that still does not fit beside the run's own earlier ones is not
kept. Either way a `warning` frame says so, and asking for one no longer kept says why.

Nothing from the script names a path in the store: stored files are named by a counter, and
a reader finds one by run id and artifact id in a table (`find`). Symlinks under the
artifacts directory are never followed, and only regular files are read.

The store's files are on disk (the temporary directory), not in the scratch's RAM: they may
add up to the budget. `close` removes them all; a store left by a supervisor that was killed
is removed by the next one that keeps an artifact.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import stat
import tempfile
import threading
from collections import OrderedDict
from typing import BinaryIO, Final

import attrs

from ..core.errors import HooksError
from ..core.frames import ArtifactFrame, WarningFrame, blank
from ..core.records import Record

#: Artifacts reported at the most, per run.
MAX_ARTIFACTS: Final = 1000
_CHUNK: Final = 1 << 20
_NOFOLLOW: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The store's directory under the temporary directory: `<prefix><uid>-<pid>-<random>`.
STORE_PREFIX: Final = "mcpx-hooks-artifacts-"
#: The config key of the budget, as messages name it.
BUDGET_KEY: Final = "[runs] artifactBytes"


@attrs.frozen(repr=False, eq=False)
class Stored(Record):
    """One kept artifact: where its bytes are, and what its frame said."""

    path: str
    name: str
    mime: str
    size: int


class ArtifactGone(HooksError, LookupError):
    """No such artifact, or it is no longer kept: the message says which, and why."""


class ArtifactStore:
    """The retained runs' artifacts on disk, at most `budget` bytes together.

    `keep` does blocking file I/O (call it in a worker thread); the table is guarded by a lock
    held only for bookkeeping, so `find` may be called from the event loop."""

    def __init__(self, budget: int, *, keeps: bool = True) -> None:
        self.budget = budget
        #: False: frames only, nothing kept and nothing said (a bare journal's runs).
        self.keeps = keeps
        self._lock = threading.Lock()
        self._root: str | None = None
        self._names = itertools.count()
        #: Per run, oldest run first: each artifact id's stored file, or why it is not kept.
        self._runs: OrderedDict[str, dict[str, Stored | str]] = OrderedDict()
        self._held = 0

    @property
    def held(self) -> int:
        """The bytes kept, over all runs."""
        return self._held

    def framed(self, run_id: str) -> set[str]:
        """The ids of the run's artifacts framed so far, kept or not (its `artifact` frames
        name no other)."""
        with self._lock:
            return set(self._runs.get(run_id, ()))

    def find(self, run_id: str, artifact_id: str) -> Stored:
        """The kept artifact, or `ArtifactGone` saying why there is none."""
        with self._lock:
            entry = self._runs.get(run_id, {}).get(artifact_id)
        if isinstance(entry, Stored):
            return entry
        raise ArtifactGone(entry or f"run {run_id} has no artifact {artifact_id!r}")

    def nothing_to_keep(self, run_id: str, directory: str) -> bool:
        """True when `directory` holds no entry at all, the run then noted as `keep` notes
        it: `keep` would return no frame, and the caller needs no worker thread for it. One
        entry is read, whatever the directory holds; False when it cannot be read (`keep`
        says what it finds)."""
        try:
            with os.scandir(directory) as entries:
                if next(entries, None) is not None:
                    return False
        except OSError:
            return False
        with self._lock:
            self._runs.setdefault(run_id, {})
        return True

    def keep(self, run_id: str, directory: str) -> list[ArtifactFrame | WarningFrame]:
        """The frames for the files under `directory` (artifacts, then warnings), each
        file's contents kept as it is framed. Blocking: run it in a worker thread."""
        frames: list[ArtifactFrame | WarningFrame] = []
        warnings: list[WarningFrame] = []
        with self._lock:
            self._runs.setdefault(run_id, {})
        files, others = _files(directory)
        if others:
            shown = ", ".join(others[:10]) + (", …" if len(others) > 10 else "")
            warnings.append(
                _warning(
                    (
                        "1 entry under the artifacts directory is not a regular file (a"
                        " symlink, a device…) and is not an artifact"
                        if len(others) == 1
                        else f"{len(others)} entries under the artifacts directory are not"
                        " regular files (symlinks, devices…) and are not artifacts"
                    )
                    + f": {shown}"
                )
            )
        if len(files) > MAX_ARTIFACTS:
            warnings.append(
                _warning(
                    f"the script left {len(files)} files as artifacts; the first {MAX_ARTIFACTS}"
                    " (by name) are reported, the rest are not"
                )
            )
        dropped: dict[str, int] = {}
        for index, (name, path) in enumerate(files[:MAX_ARTIFACTS]):
            frame, note = self._keep_one(run_id, f"a{index}", name, path, dropped)
            if frame is not None:
                frames.append(frame)
            if note is not None:
                warnings.append(_warning(note))
        if dropped:
            runs = ", ".join(f"{r} ({n} bytes)" for r, n in dropped.items())
            warnings.insert(
                0,
                _warning(
                    f"the artifacts of {len(dropped)} older run(s) were dropped to keep the"
                    f" retained artifacts within {BUDGET_KEY} ({self.budget} bytes): {runs}"
                ),
            )
        return [*frames, *warnings]

    def _keep_one(
        self, run_id: str, artifact_id: str, name: str, path: str, dropped: dict[str, int]
    ) -> tuple[ArtifactFrame | None, str | None]:
        try:
            fd = os.open(path, _NOFOLLOW)
        except OSError as exc:
            return None, f"artifact {name}: not read ({exc.strerror})"
        with os.fdopen(fd, "rb") as source:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None, None
            fits = self.keeps and self._make_room(run_id, info.st_size, dropped)
            target = os.path.join(self._store_root(), str(next(self._names))) if fits else None
            digest, size = _copy(source, target)
        import mimetypes  # here: a run that keeps no artifact never reads the types table

        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        frame = blank(ArtifactFrame, id=artifact_id, name=name, mime=mime, size=size, sha256=digest)
        with self._lock:
            table = self._runs.setdefault(run_id, {})
            if target is not None:
                table[artifact_id] = Stored(target, name, mime, size)
                self._held += size
                return frame, None
            if not self.keeps:
                return frame, None
            why = (
                f"artifact {artifact_id} ({name}, {size} bytes) of run {run_id} is not kept: it"
                f" does not fit in {BUDGET_KEY} ({self.budget} bytes) beside its run's other"
                " artifacts"
            )
            table[artifact_id] = why
        return frame, why

    def _make_room(self, run_id: str, size: int, dropped: dict[str, int]) -> bool:
        """Drops older runs' artifacts, oldest first, until `size` more bytes fit; False when
        they cannot (the run's own artifacts are never dropped for it)."""
        gone: list[str] = []
        with self._lock:
            for other, table in self._runs.items():
                if self._held + size <= self.budget or other == run_id:
                    break
                for artifact_id, entry in table.items():
                    if isinstance(entry, Stored):
                        gone.append(entry.path)
                        self._held -= entry.size
                        dropped[other] = dropped.get(other, 0) + entry.size
                        table[artifact_id] = (
                            f"artifact {artifact_id} ({entry.name}) of run {other} is no longer"
                            f" kept: it was dropped to keep the retained artifacts within"
                            f" {BUDGET_KEY} ({self.budget} bytes)"
                        )
            fits = self._held + size <= self.budget
        for path in gone:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return fits

    def forget(self, run_id: str) -> None:
        """Removes a run's artifacts (the run is no longer retained). A reader that has one
        open keeps reading it."""
        with self._lock:
            table = self._runs.pop(run_id, {})
            kept = [e for e in table.values() if isinstance(e, Stored)]
            self._held -= sum(e.size for e in kept)
        for entry in kept:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)

    def close(self) -> None:
        """Removes every kept artifact and the store's directory."""
        with self._lock:
            root, self._root = self._root, None
            self._runs.clear()
            self._held = 0
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def _store_root(self) -> str:
        with self._lock:
            if self._root is None:
                prefix = f"{STORE_PREFIX}{os.getuid()}-"
                _remove_orphans(prefix)
                self._root = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
            return self._root


def _remove_orphans(prefix: str) -> None:
    """Removes the stores of this user's supervisors that are gone (killed by SIGKILL, say):
    a store is named by its process id, and one whose process no longer exists is left over.
    A process id in use by another program keeps its store (never a wrong removal)."""
    base = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            pid_text = entry.name[len(prefix) :].split("-", 1)[0]
            if not entry.name.startswith(prefix) or not (pid_text.isascii() and pid_text.isdigit()):
                continue
            try:
                os.kill(int(pid_text), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                pass  # alive, someone else's


def _files(directory: str) -> tuple[list[tuple[str, str]], list[str]]:
    """`(name, path)` of each regular file under `directory`, by name, and the names of the
    other entries (symlinks to files or directories are never followed)."""
    found: list[tuple[str, str]] = []
    others: list[str] = []
    for top, dirs, names in os.walk(directory, followlinks=False):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, directory)
            if stat.S_ISREG(os.lstat(path).st_mode):
                found.append((rel, path))
            else:
                others.append(rel)
    return sorted(found), sorted(others)


def _copy(source: BinaryIO, target: str | None) -> tuple[str, int]:
    """Hashes `source` to its end, copying it to `target` if given: the sha256 and the
    size read."""
    digest = hashlib.sha256()
    size = 0
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(target, "xb")) if target is not None else None
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
    return digest.hexdigest(), size


def _warning(message: str) -> WarningFrame:
    return blank(WarningFrame, message=message)
