"""Runs a supervisor left unfinished in the history because it was killed (SIGKILL, a lost
machine): ended there, once, by the next process that opens the history to write.

Each run's first write stores its owner (`owner_token`: the writing process's pid and start
time, as a mark of the history's) in the same transaction as its lines; its last write, the
one that stores its `end`, removes it. A process opening the history (`seal_interrupted`)
takes each stored run still `running` whose owner is gone (no such process now, or another
one with its pid) and stores the end a run of its own would have had: an `error` saying
so, then `end` with the chain of every line before it. The run then lists as `error`, its
downloads and `runs verify` agree, and retention counts it as finished. A run whose owner
still runs is left to it (two processes may share one history). A run stored without an
owner is left as it is: a cluster gateway's record of a run a worker runs (the stream is
that run's, and goes on), or one an older version stored.

What the killed process had sent but not yet stored (its last batch, at most `BATCH_S`) is
not in the history: a client that saw those frames sees their seq numbers again, on the
error and end frames.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..history.store import OWNER_MARK, History, Written
from .storedrun import RunGone, StoredRun

#: The stored runs looked at, newest first (older ones stay as they are).
LOOKED_AT: Final = 1024
#: What the error frame of such a run says.
INTERRUPTED: Final = (
    "the run's history ends here: the supervisor that ran it stopped before its end"
    " (killed, or its machine went down); what it sent last may be missing"
)
#: A pid fits in 22 bits (Linux's `pid_max` at most 2**22).
_PID_BITS: Final = 22


def owner_token(pid: int | None = None) -> int:
    """The process `pid` (default: this one) as an owner: its pid and its start time (clock
    ticks after boot), which together name one process of one boot. 0: it is not there (or
    has ended, a zombie its parent has not reaped)."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # ended, not yet reaped by its parent: gone all the same
        return 0
    return (int(fields[19]) << _PID_BITS) | pid


def alive(token: int) -> bool:
    """Whether the owner `token` names a process that is still there."""
    pid = token & ((1 << _PID_BITS) - 1)
    return pid > 0 and owner_token(pid) == token


def orphaned(history: History, summary: Mapping[str, Any]) -> bool:
    """Whether the stored run `summary` lists is one a gone process left unfinished (the
    module's words): `running`, with an owner that is no longer there."""
    run_id = summary.get("runId")
    if summary.get("status") != "running" or not isinstance(run_id, str):
        return False
    owner = history.mark(OWNER_MARK + run_id)
    return owner is not None and not alive(owner)


def as_sealed(
    history: History,
    listed: Callable[[], list[dict[str, Any]]],
    read: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The summaries `listed()` reads, each of a run a gone process left (`orphaned`) as its
    seal will list it (read through a chunk at a time, as `seal_interrupted` does), for a
    reader that does not write the history: such a run is not listed as `running` until a
    writer seals it. One a writer sealed between the summaries' read and its owner's (the
    seal removes the owner), or as it was read through, has them read again, as the seal
    stored them. `read`: what such runs' seals say, by run id, kept by a caller that lists
    again (what is stored of a run whose owner is gone changes no more until its seal).
    Blocking; raises `HistoryFault` as the history's reads do."""
    read = {} if read is None else read
    for _ in range(2):
        shown, sealed_meanwhile = [], False
        for summary in listed():
            run_id = summary.get("runId")
            if not isinstance(run_id, str) or summary.get("status") != "running":
                shown.append(summary)
                continue
            if run_id not in read and orphaned(history, summary):
                with contextlib.suppress(RunGone):  # (dropped meanwhile: listed as read)
                    found = StoredRun(history, run_id).sealed(INTERRUPTED)
                    if found is None:  # (its end was stored as it was read: sealed)
                        sealed_meanwhile = True
                    else:
                        read[run_id] = found[2]
            elif run_id not in read and history.mark(OWNER_MARK + run_id) is None:
                extent = history.extent(run_id)  # (no owner: ended meanwhile, or never had)
                sealed_meanwhile |= extent is not None and extent[1]
            shown.append(summary | read.get(run_id, {}))
        if not sealed_meanwhile:
            break
    return shown


def seal_interrupted(history: History) -> list[str]:
    """Ends each stored run whose owner is gone (the module's words); their ids. Blocking:
    run it in a worker thread. Raises `HistoryFault` as the history's reads and writes do.
    A run is read a stored chunk at a time (`StoredRun`), never whole."""
    sealed: list[str] = []
    for summary in history.summaries(LOOKED_AT):
        if not orphaned(history, summary):  # (no owner: a gateway's mirror, an older's)
            continue
        run_id = summary["runId"]
        try:
            found = StoredRun(history, run_id).sealed(INTERRUPTED)
        except RunGone:  # (dropped meanwhile by another process's retention)
            continue
        if found is None:
            continue
        stored, seal, ended = found
        # (Not indexed for search here, under the write lock: the writer catches up.)
        history.write([Written(run_id, stored, seal, summary | ended, 0.0, True)], index=0)
        sealed.append(run_id)
    return sealed
