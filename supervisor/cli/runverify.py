"""`runs verify FILE|RUN_ID`: a run's frames checked against the hash chain their `end`
frame holds (`core/chain.py`).

A FILE is a run's frames, one JSON line each, as `runs show --json` prints them or the
console downloads them; anything else is a stored run's id in the run history on this
machine. When a file's run is also in the history, the first frame that differs from the
stored one is named; else the sentence says what can be said (a line out of place, a chain
that does not match). Exit 0 when the frames are intact, 1 when they were changed (or the
run is not found). A file is read up to `[history] retainBytes` (what the history keeps in
all, so no run's frames are more): `/dev/zero` or a stream that never ends is refused there,
never held whole.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.places import shown_file
from .common import EXIT_FAILED, EXIT_OK, say

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import argparse

    from ..core.hooks import Config


def history_of(args: argparse.Namespace) -> tuple[Config, Path]:
    """The config in force (`--config`), and the run history's path it names. Without a
    home to keep it in, that is said and the command exits 1 (`SystemExit`)."""
    from ..history.faults import HistoryFault
    from ..history.store import default_path
    from .common import load

    config = load(args)
    try:
        path = Path(config.history_path) if config.history_path else default_path(os.environ)
    except HistoryFault as exc:
        say(f"mcpx-hooks {args.command}: {exc}")
        raise SystemExit(EXIT_FAILED) from None
    return config, path


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
            with open(target, "rb") as file:
                data = file.read(limit + 1)
            if len(data) > limit:
                say(f"mcpx-hooks {command}: {shown_file(target)}: over {limit} bytes, more than"
                    " the run history keeps in all ([history] retainBytes): not a run's frames;"
                    " not read further")  # fmt: skip
                return EXIT_FAILED
            lines = [line.rstrip(b"\r") for line in data.split(b"\n") if line.strip()]
            del data
            reference = _stored(history, _run_id(lines[0]) if lines else None)
            what = target
        else:
            stored = _stored(history, target)
            if stored is None:
                say(f"mcpx-hooks {command}: {shown_file(target)} is neither a file nor a run kept"
                    f" in the run history {shown_file(str(path))}{fault}")  # fmt: skip
                return EXIT_FAILED
            lines, reference, what = stored, None, f"run {target}"
    except OSError as exc:
        say(f"mcpx-hooks {command}: {shown_file(target)}: {exc.strerror}")
        return EXIT_FAILED
    finally:
        if history is not None:
            history.close()
    problem = check(lines, reference)
    what = shown_file(what) if what == target else what
    if problem is None:
        say(
            f"{what}: intact ({len(lines)} frames; their chain matches their end frame's)", out=True
        )
        return EXIT_OK
    say(f"{what}: CHANGED: {problem}", out=True)
    return EXIT_FAILED


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


def _run_id(line: bytes) -> str | None:
    from ..core.jsontext import wire_loads

    try:
        frame = wire_loads(line)
    except ValueError:
        return None
    run_id = frame.get("runId") if isinstance(frame, dict) else None
    return run_id if isinstance(run_id, str) else None
