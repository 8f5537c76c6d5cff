"""What the bus carries: the event kinds, an event, a gap, and kind matching.

Pure data and functions, no trio: `run/bus.py` numbers and fans events out; the docs list the
kinds from `KINDS`; a service target filters by `kind_matches`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .fieldmeta import KEEP, OMIT, WIRE
from .records import Record


class EventKind(enum.StrEnum):
    """The kinds something publishes today. A kind nothing publishes is not declared."""

    RUN_STARTED = "run.started"
    RUN_FINISHED = "run.finished"
    HOOK_STARTED = "hook.started"
    HOOK_FINISHED = "hook.finished"
    HOOK_FAILED = "hook.failed"
    HOOK_DROPPED = "hook.dropped"
    CLIENT_CONNECTED = "client.connected"
    CLIENT_CLOSED = "client.closed"
    SUPERVISOR_STARTED = "supervisor.started"
    SUPERVISOR_STOPPING = "supervisor.stopping"


#: What each kind means, one line each (the docs are generated from this table).
KINDS: Final[dict[EventKind, str]] = {
    EventKind.RUN_STARTED: "a script run started",
    EventKind.RUN_FINISHED: "a script run ended (after its `end` frame)",
    EventKind.HOOK_STARTED: "an observe hook started on an event",
    EventKind.HOOK_FINISHED: "an observe hook ended; data is its hook frame",
    EventKind.HOOK_FAILED: "a hook failed (non-zero exit, timeout, killed, invalid output)",
    EventKind.HOOK_DROPPED: "a hook answered keys above its effect in force; they were dropped",
    EventKind.CLIENT_CONNECTED: "a WebSocket client was admitted (its connection number, endpoint)",
    EventKind.CLIENT_CLOSED: "a WebSocket client's socket ended (its close code; null if aborted)",
    EventKind.SUPERVISOR_STARTED: "the supervisor is up",
    EventKind.SUPERVISOR_STOPPING: "the supervisor is shutting down",
}


@attrs.frozen(repr=False, eq=False)
class Event(Record):
    """One published event. `caused_by_observer` stays in the process: it is never on the
    wire, and an event carrying it never triggers observe hooks (no loops)."""

    seq: int
    kind: str
    at: str
    data: Mapping[str, Any]
    run_id: str | None = None
    caused_by_observer: bool = attrs.field(default=False, metadata=OMIT)


@attrs.frozen(repr=False, eq=False)
class Gap(Record):
    """The seqs `from_seq..to_seq` (inclusive) that a subscriber may have missed: those in
    the range its `kinds` match were dropped from its buffer or are no longer retained."""

    from_seq: int = attrs.field(metadata={WIRE: "from"})
    to_seq: int = attrs.field(metadata={WIRE: "to"})
    #: What a subscriber reads it as, beside the events.
    kind: str = attrs.field(default="gap", init=False, metadata=KEEP)


#: The prefix that matches every kind (`/v1/events?kinds=*`, an observe hook's `on = "*"`).
ANY_KIND: Final = "*"


def kind_matches(kind: str, prefixes: Iterable[str]) -> bool:
    """Whether `kind` is one of `prefixes` or below one on a dot boundary (`hook` matches
    `hook.failed`, not `hooks.x`); `*` matches every kind, and so do no prefixes at all."""
    found = False
    for prefix in prefixes:
        if prefix in (ANY_KIND, kind) or kind.startswith(prefix + "."):
            return True
        found = True
    return not found


def kind_prefixes() -> tuple[str, ...]:
    """Every prefix that matches a kind of `EventKind` (what the bus publishes): `*`, each
    kind, and each of its dot-boundary prefixes (`hook` for `hook.failed`). An observe hook's
    `on` and a `/v1/events?kinds=` prefix must be one of them."""
    found = [ANY_KIND]
    for kind in EventKind:
        parts = kind.value.split(".")
        found += [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return tuple(dict.fromkeys(found))
