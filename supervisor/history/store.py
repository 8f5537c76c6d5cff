"""The run history on disk: a SQLite database (WAL) and, beside it, the artifacts by SHA-256.

Blocking, and used from one writer thread (`write`, `retain`) and from readers (`summaries`,
`lines`, `artifact`) on a connection of their own. What is stored of a run:

- its row in `runs`: its id, when it started, its status, and its summary as `GET /v1/runs`
  lists it (JSON), the bytes it holds on disk, and whether its `end` is in;
- its frames, in `chunks`: the JSON lines that were sent, in seq order, a batch of them a row
  (joined by newlines, zlib-compressed when that is smaller), so any seq is found by the
  chunk that holds it and its lines come back byte for byte;
- its artifacts, in `artifacts`: each one's frame fields and SHA-256; the bytes are a file
  `artifacts/<sha256>` beside the database, shared by every run that made the same bytes.

And, in `marks`, how far a cluster gateway has read the frames stream it indexes
(`cluster/indexing.py`), written in the same transaction as what it read there.

A run's lines are stored once, in seq order: a write that brings lines already stored (two
processes recording the same run: gateways, or a gateway and a worker, sharing one database)
stores only those past them, one that would leave a gap stores nothing of that run, and one
that brings nothing new (a process behind another) leaves its summary and its end as they
are. Each write takes the database's write lock before it reads how much is stored, so that
no other process stores lines between the two.

Every failure of SQLite or of the file system is a `HistoryFault` saying what went wrong;
what to do about it (go on in memory, warn once) is the caller's (`run/recording.py`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import orjson

from ..config.statefiles import make_state_dir, state_home
from ..core.batches import bounded
from ..core.jsontext import wire_loads
from ..core.places import shown_file
from ..core.records import Record
from . import files, search, sizes
from .faults import BUSY_MS, HistoryFault, faults, write_failed
from .schema import prepare

#: The database's name under its state directory.
DB_NAME: Final = Path("mcpx-hooks") / "history.db"
OWNER_MARK: Final = "owner:"  #: with a run's id: its owner while it runs (`run/interrupted.py`)
#: Lines a chunk holds at most (a large batch is several chunks: what a write holds at once,
#: and what a reader decompresses to reach one seq, stay small).
CHUNK_LINES: Final = 4096
CHUNK_BYTES: Final = 1 << 20  #: and the bytes of its lines (a longer line is a chunk alone)
#: A chunk's data is zlib's when that is smaller (level 1: the writer keeps up with a run).
_LEVEL: Final = 1
#: The stored lines a search indexes in one transaction when the index is behind (about
#: 0.2 s here): what another process's write waits for at most.
_SEARCH_SLICE: Final = 50_000


def default_path(environ: Mapping[str, str]) -> Path:
    """`$XDG_STATE_HOME/mcpx-hooks/history.db` when that is absolute, else
    `~/.local/state/mcpx-hooks/history.db` (`state_home`); `HistoryFault` without a home."""
    if (state := state_home(environ)) is None:
        raise HistoryFault("no state directory for the run history: set XDG_STATE_HOME or HOME")
    return state / DB_NAME


@attrs.frozen(repr=False, eq=False)
class Written(Record):
    """What one write adds of a run: its lines from seq `first`, its summary now, and, once
    it has ended, its artifacts as `(id, sha256, name, mime, size, path of the bytes)`."""

    run_id: str
    first: int
    lines: Sequence[bytes]
    summary: Mapping[str, Any]
    started: float
    finished: bool
    artifacts: Sequence[tuple[str, str, str, str, int, str]] = ()


@attrs.frozen(repr=False, eq=False)
class StoredArtifact(Record):
    """An artifact of a stored run: where its bytes are, and what its frame said."""

    path: str
    name: str
    mime: str
    size: int


def _connect(path: Path, mode: str | None = None) -> sqlite3.Connection:
    """A connection (by URI with `mode`), with the search index's SQL function."""
    at = path if mode is None else f"{path.resolve().as_uri()}?mode={mode}"
    db = sqlite3.connect(at, uri=bool(mode), timeout=BUSY_MS / 1000, check_same_thread=False)
    search.functions(db)
    return db


class History:
    """One open history database. `open` creates it (0600, its directory 0700) if need be."""

    def __init__(self, path: Path, connection: sqlite3.Connection, *, writes: bool) -> None:
        self.path = path
        self.artifacts_dir = path.parent / "artifacts"
        #: The writer's connection (one thread at a time), and the readers' (WAL: a reader
        #: never waits for a write in progress, nor a write for a reader).
        self._db = connection
        self._lock = threading.RLock()
        self.writes = writes
        self._reads: sqlite3.Connection | None = None if writes else connection
        self._read_lock = threading.Lock() if writes else self._lock
        found = os.stat(path)
        #: The file opened (device, inode): a write checks it is still the one at `path`.
        self._identity = (found.st_dev, found.st_ino)
        self._shares = sizes.IndexShares()

    @classmethod
    def open(cls, path: Path, *, writes: bool = True) -> History:
        """The database at `path`, its schema made; `writes=False` opens an existing one to
        read only (`HistoryFault` when there is none, or only the empty file a first write left
        on a full disk)."""
        with faults(f"opening the run history {shown_file(path)}", path):
            files.a_file_or_none(path)
            if writes:
                make_state_dir(path.parent)
                os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
                db = _connect(path)
            elif not path.is_file() or not path.stat().st_size:  # (empty: a disk full at once)
                raise FileNotFoundError(2, "no run has been recorded there", str(path))
            else:
                db = _connect(path, "ro")
            try:
                prepare(db, writes)
            except sqlite3.OperationalError as exc:
                db.close()
                if writes or (os.access(path.parent, os.W_OK) and not write_failed(exc)):
                    raise
                # On read-only media or a full disk a WAL database without its `-shm` cannot
                # be opened to read (SQLite would make that file): read as it is, unwritten.
                db = _connect(path, "ro&immutable=1")
                prepare(db, writes)
            except BaseException:
                db.close()
                raise
        return cls(path, db, writes=writes)

    def close(self) -> None:
        with self._lock, self._read_lock, contextlib.suppress(sqlite3.Error):
            self._db.close()
            if self._reads is not None:
                self._reads.close()

    def _reader(self) -> sqlite3.Connection:
        """The readers' connection (hold `_read_lock`): to the file `open` made, never one
        made anew (0644) where it was removed since."""
        if self._reads is None:
            self._reads = _connect(self.path, "rw")
        return self._reads

    def _still_there(self) -> None:
        """Raises `OSError` when the file `open` opened is no longer at `path` (removed,
        replaced): what is written goes nowhere anyone will read it."""
        found = os.stat(self.path) if os.path.exists(self.path) else None
        if found is None or (found.st_dev, found.st_ino) != self._identity:
            how = "removed" if found is None else "replaced"
            raise FileNotFoundError(2, f"{shown_file(self.path)} was {how} while open")

    # The writer's side.

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, its lock taken before its first read (Python's sqlite3
        begins one only at the first write): what it reads is what it writes on, while
        another process sharing the database waits for it, or it for them."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            yield self._db

    def write(
        self,
        items: Iterable[Written],
        *,
        index: int | None = None,
        marks: Mapping[str, int] | None = None,
    ) -> bool:
        """Adds the items' lines, summaries and artifacts, and sets `marks`, in one
        transaction, and indexes at most `index` stored lines for search (None: all);
        whether the index is behind."""
        with faults("writing the run history"), self._indexing() as written:
            self._still_there()
            written.stored = sum(self._write_one(item) for item in items)
            for name, value in (marks or {}).items():
                self._db.execute("INSERT OR REPLACE INTO marks VALUES (?, ?)", (name, value))
            return search.catch_up(self._db, index, written.indexed)

    @contextlib.contextmanager
    def _indexing(self) -> Iterator[sizes.Written]:
        """A write transaction that may index lines: what it stored and indexed is counted
        in what it yields, and the index's growth is shared among those runs (`sizes.py`)."""
        written = sizes.Written()
        with self._transaction() as db:
            self._shares.settle(db)
            before = sizes.used(db)
            yield written
        with self._lock:
            grown = sizes.used(self._db) - before - written.stored
            self._shares.add(grown, written.indexed)

    def mark(self, name: str) -> int | None:
        """A mark `write` set (None: never set)."""
        with faults("reading the run history"), self._read_lock:
            row = self._reader().execute("SELECT value FROM marks WHERE name = ?", (name,))
            found = row.fetchone()
        return None if found is None else int(found[0])

    def _write_one(self, item: Written) -> int:
        """Stores what `item` adds; the bytes of the chunks stored."""
        db = self._db
        row = db.execute("SELECT frames, finished FROM runs WHERE id = ?", (item.run_id,))
        held, ended = row.fetchone() or (0, False)
        if item.first > held:  # a gap: nothing of it (see the module docstring)
            return 0
        first, new = max(item.first, held), item.lines[max(0, held - item.first) :]
        if ended or (held and not new and not item.finished):
            return 0  # behind what is stored (another process's): its summary is older too
        summary = orjson.dumps(item.summary)
        db.execute(
            "INSERT INTO runs(id, started, summary) VALUES (?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET summary = excluded.summary",
            (item.run_id, item.started, summary),
        )
        (key,) = db.execute("SELECT key FROM runs WHERE id = ?", (item.run_id,)).fetchone()
        size = at = 0
        for lines in bounded(new, CHUNK_BYTES, CHUNK_LINES):  # what one chunk holds is bounded
            data = b"\n".join(lines)
            packed = zlib.compress(data, _LEVEL)
            small = len(packed) < len(data)
            db.execute(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)",
                (key, first + at, len(lines), small, packed if small else data),
            )
            at += len(lines)
            size += min(len(packed), len(data))
        chunks = size
        for artifact_id, sha, name, mime, bytes_, source in item.artifacts:
            if files.keep(self.artifacts_dir, sha, source):
                db.execute(
                    "INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?, ?, ?, ?)",
                    (key, artifact_id, sha, name, mime, bytes_),
                )
                size += bytes_
        db.execute(
            "UPDATE runs SET bytes = bytes + ?, frames = ?, finished = ? WHERE key = ?",
            (size, first + len(new), item.finished, key),
        )
        if item.finished:  # (its owner's mark: `run/interrupted.py`)
            db.execute("DELETE FROM marks WHERE name = ?", (OWNER_MARK + item.run_id,))
        return chunks

    def drop(self, run_ids: Iterable[str]) -> None:
        """Removes runs (their rows; their artifacts' files once no run names them)."""
        with faults("dropping runs from the run history"), self._transaction():
            keys = [
                row[0]
                for run_id in run_ids
                for row in self._db.execute("SELECT key FROM runs WHERE id = ?", (run_id,))
            ]
            self._drop_keys(keys)
        self._remove_unnamed()

    def retain(self, *, days: float, max_bytes: int, now: float | None = None) -> list[str]:
        """Drops runs older than `days`, then the oldest finished runs while the runs hold
        more than `max_bytes`; the ids dropped, oldest first."""
        cutoff = (time.time() if now is None else now) - days * 86400
        with faults("dropping old runs from the run history"):
            with self._lock:
                db = self._db
                rows = db.execute(
                    "SELECT key, id, started, finished, bytes FROM runs ORDER BY started"
                )
                gone: list[tuple[int, str]] = []
                (total,) = db.execute("SELECT coalesce(sum(bytes), 0) FROM runs").fetchone()
                for key, run_id, started, finished, size in rows.fetchall():
                    if started < cutoff or (finished and total > max_bytes):
                        gone.append((key, run_id))
                        total -= size
                    elif total <= max_bytes:
                        break
            for key, _ in gone:  # a run a transaction: another process waits for one at most
                with self._transaction():
                    self._drop_keys([key])
        if gone:
            self._remove_unnamed()
        return [run_id for _, run_id in gone]

    def _drop_keys(self, keys: Sequence[int]) -> None:
        for key in keys:
            search.unindex(self._db, key)
            for table, column in (("chunks", "run"), ("artifacts", "run"), ("runs", "key")):
                self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (key,))

    def _remove_unnamed(self) -> None:
        """Removes the artifact files no stored run names any more."""
        with faults("removing old artifacts"):
            if not self.artifacts_dir.is_dir():
                return
            with self._lock:
                named = {r[0] for r in self._db.execute("SELECT DISTINCT sha256 FROM artifacts")}
            files.remove_unnamed(self.artifacts_dir, named)

    # The readers' side.

    def summaries(self, limit: int, skip: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The stored runs' summaries, newest first, at most `limit`, none of `skip`'s."""
        skipped = set(skip)
        query = "SELECT id, summary FROM runs ORDER BY started DESC, key DESC LIMIT ?"
        with faults("reading the run history"), self._read_lock:
            rows = self._reader().execute(query, (limit + len(skipped),)).fetchall()
        return [wire_loads(summary) for run_id, summary in rows if run_id not in skipped][:limit]

    def lines(
        self, run_id: str, start: int = 0, chunks: int = -1
    ) -> tuple[list[bytes], bool] | None:
        """The lines of run `run_id` from seq `start` as sent (those of `chunks` chunks at most:
        -1, all), whether its end is in; or None."""
        # One statement, so one snapshot: the run's row and its chunks as one write left them.
        query = (
            "SELECT r.finished, c.first, c.packed, c.data FROM runs r LEFT JOIN chunks c"
            " ON c.run = r.key AND c.first + c.count > ? WHERE r.id = ? ORDER BY c.first LIMIT ?"
        )
        with faults("reading the run history"), self._read_lock:
            rows = self._reader().execute(query, (start, run_id, chunks)).fetchall()
        if not rows:
            return None
        lines: list[bytes] = []
        for _, first, packed, data in rows:
            if data is None:  # (the row of a run with no chunk there)
                continue
            batch = (zlib.decompress(data) if packed else bytes(data)).split(b"\n")
            lines += batch[max(0, start - first) :] if first < start else batch
        return lines, bool(rows[0][0])

    def extent(self, run_id: str) -> tuple[int, bool] | None:
        """How many lines of run `run_id` are stored and whether its end is in; or None."""
        with faults("reading the run history"), self._read_lock:
            row = self._reader().execute(
                "SELECT frames, finished FROM runs WHERE id = ?", (run_id,)
            )
            found = row.fetchone()
        return None if found is None else (int(found[0]), bool(found[1]))

    def lags(self) -> bool:
        """Whether some stored lines are not in the search index yet."""
        with faults("reading the run history"), self._read_lock:
            return search.lags(self._reader())

    def artifact(self, run_id: str, artifact_id: str) -> StoredArtifact | None:
        """A stored run's artifact, or None when it has none of that id."""
        with faults("reading the run history"), self._read_lock:
            asked = self._reader().execute(
                "SELECT a.sha256, a.name, a.mime, a.size FROM artifacts a JOIN runs r"
                " ON a.run = r.key WHERE r.id = ? AND a.id = ?",
                (run_id, artifact_id),
            )
            row = asked.fetchone()
        if row is None:
            return None
        return StoredArtifact(str(self.artifacts_dir / row[0]), row[1], row[2], row[3])

    def search(
        self, text: str, *, run_id: str | None = None, limit: int = search.MATCHES,
        index: bool = True,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The stored frames that hold what `text` asks for (`search.find`), the index first
        brought up to every stored line (an ended process's: `run/recording.py`) if `index`
        and this connection may write; else in what is indexed already."""
        if self.writes and index:
            with faults("indexing the run history"):
                with self._lock:
                    lagging = search.lags(self._db)
                while lagging:  # (the write lock only then, a slice at a time: another
                    # process's writes wait for at most one slice, never for all of it)
                    with self._indexing() as written:
                        lagging = search.catch_up(self._db, _SEARCH_SLICE, written.indexed)
        with faults("searching the run history"), self._read_lock:
            return search.find(self._reader(), text, run_id=run_id, limit=limit)

    def held(self) -> int:
        """The bytes the stored runs hold (their frames as stored, and their artifacts)."""
        with faults("reading the run history"), self._read_lock:
            return int(
                self._reader().execute("SELECT coalesce(sum(bytes), 0) FROM runs").fetchone()[0]
            )
