"""`runs verify FILE|RUN_ID`: a run's frames checked against the hash chain their `end`
frame holds (`core/chain.py`).

A FILE is a run's frames, one JSON line each, as `runs show --json` prints them or the
console downloads them; anything else is a stored run's id in the run history on this
machine. When a file's run is also in the history, the first frame that differs from the
stored one is named; else the sentence says what can be said (a line out of place, a chain
that does not match). Exit 0 when the frames are intact, 1 when they were changed (or the
run is not found). A file is checked as it is read (`chain.ChainCheck`), in memory bounded
by a constant, and read up to `[history] retainBytes` (what the history keeps in all, so no
run's frames are more): `/dev/zero` or a stream that never ends is refused there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Final

from ..core.places import shown_file
from .common import EXIT_FAILED, EXIT_OK, say

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import argparse

    from ..core.hooks import Config


def history_of(args: argparse.Namespace) -> tuple[Config, Path]:
    """The config in force (`--config`), and the run history's path it names. Without a
    home to keep it in, that is said and the command exits 1 (`SystemExit`). What loading
    said is said (`said_warnings`)."""
    from ..history.faults import HistoryFault
    from ..history.store import default_path
    from .common import load

    config = load(args, say=False)
    try:
        path = Path(config.history_path) if config.history_path else default_path(os.environ)
    except HistoryFault as exc:
        say(f"mcpx-hooks {args.command}: {exc}")
        raise SystemExit(EXIT_FAILED) from None
    for warning in said_warnings(config, path):
        say(f"mcpx-hooks: warning: {warning}")
    return config, path


def said_warnings(config: Config, path: Path) -> list[str]:
    """What loading said, less the project files it skipped (not trusted, changed since, not
    readable): a command that reads the history runs no hook, so a hook it would not have run
    is nothing to it. A skipped file that sets `[history]` is said all the same, in other
    words: the history read is not the one that file names (one `exec --trust-project` or a
    trusted run wrote to)."""
    from ..config import read_file
    from .common import other_warnings

    said = other_warnings(config)
    for file in config.skipped:
        document, _ = read_file(Path(file.file), file.file)
        if isinstance(document, dict) and "history" in document:
            trust = f" (or trust it: {file.trust_command})" if file.trust_command else ""
            said.append(
                f"the [history] table of {shown_file(file.file)} is not applied ({file.reason}):"
                f" this reads the run history {shown_file(str(path))}; to read the one it names,"
                f" add --trust-project{trust}"
            )
    return said


def no_history(path: Path) -> bool:
    """Whether there is no history at `path`, or only an empty file (the first run found the
    disk full): no runs. False when it cannot be looked at (a directory that may not be
    searched, as one made by `sudo`): opening it says why."""
    try:
        return not path.exists() or (path.is_file() and not path.stat().st_size)
    except OSError:
        return False


def verify(args: argparse.Namespace, command: str) -> int:
    from ..core.chain import check
    from ..history.faults import HistoryFault
    from ..history.store import History

    config, path = history_of(args)
    target: str = args.target
    fault = ""
    try:
        history: History | None = History.open(path, writes=False)
    except HistoryFault as exc:
        history, fault = None, f" ({exc})"
    try:
        if os.path.exists(target) and not os.path.isdir(target):  # a pipe too: /dev/stdin
            limit = config.history_retain_bytes
            with open(target, "rb", buffering=0) as file:
                checking = _check_file(file, limit, history)
            if checking is None:
                say(f"mcpx-hooks {command}: {shown_file(target)}: over {limit} bytes, more than"
                    " the run history keeps in all ([history] retainBytes): not a run's frames;"
                    " not read further")  # fmt: skip
                return EXIT_FAILED
            (count, problem), what = checking, target
        else:
            stored = _stored(history, target)
            if stored is None:
                say(f"mcpx-hooks {command}: {shown_file(target)} is neither a file nor a run kept"
                    f" in the run history {shown_file(str(path))}{fault}")  # fmt: skip
                return EXIT_FAILED
            count, problem, what = len(stored), check(stored), f"run {target}"
    except OSError as exc:
        say(f"mcpx-hooks {command}: {shown_file(target)}: {exc.strerror}")
        return EXIT_FAILED
    finally:
        if history is not None:
            history.close()
    what = shown_file(what) if what == target else what
    if problem is None:
        say(f"{what}: intact ({count} frames; their chain matches their end frame's)", out=True)
        return EXIT_OK
    say(f"{what}: CHANGED: {problem}", out=True)
    return EXIT_FAILED


def _check_file(file: BinaryIO, limit: int, history: object) -> tuple[int, str | None] | None:
    """How many frame lines `file` holds and what is wrong with them (None: intact), checked
    as they are read, in memory bounded by a constant (`chain.LINE_HELD`, one read, one chunk
    of the stored run), each compared with the stored run's where the history holds the run
    the first names. None: `file` is longer than `limit` bytes (read no further)."""
    from ..core.chain import ChainCheck

    checking, total = ChainCheck(_Pages(history).line), 0
    while chunk := file.read(_READ):
        if (total := total + len(chunk)) > limit:
            return None
        *ended, rest = chunk.split(b"\n")
        for part in ended:
            checking.piece(part)
            if (problem := checking.end_line()) is not None:
                return checking.count, problem
        checking.piece(rest)
    if (problem := checking.end_line()) is not None:
        return checking.count, problem
    return checking.count, checking.finish()


#: What one read takes of a file (`_check_file`).
_READ: Final = 64 * 1024


class _Pages:
    """A stored run's lines, read from the history a chunk at a time as they are asked for."""

    def __init__(self, history: object) -> None:
        self._history = history
        self._first, self._lines = 0, list[bytes]()

    def line(self, run_id: str, seq: int) -> bytes | None:
        from ..history.faults import HistoryFault
        from ..history.store import History

        if not isinstance(self._history, History):
            return None
        if not self._first <= seq < self._first + len(self._lines):
            try:
                found = self._history.lines(run_id, seq, chunks=1)
            except HistoryFault:
                found = None
            if found is None or not found[0]:  # (no such run, or none of it past here)
                self._history = None
                return None
            self._first, self._lines = seq, found[0]
        index = seq - self._first
        return self._lines[index] if index < len(self._lines) else None


def _stored(history: object, run_id: str | None) -> list[bytes] | None:
    from ..history.faults import HistoryFault
    from ..history.store import History

    if not isinstance(history, History) or not run_id:
        return None
    try:
        found = history.lines(run_id)
    except HistoryFault:
        return None
    return None if found is None else found[0]
