"""The cluster's names, declared once: its streams, subjects, consumer and headers, and each
stream's retention as it follows from the config (`runs.retain`, the journal's budgets, the
bus's history). Pure: no NATS, no trio; `jetstreams.py` turns a `StreamSpec` into JetStream's
stream config, and `ensure_streams` creates or updates each one at start (idempotent).
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Final

import attrs
import orjson

from ..core.frames import ENVELOPE_KEYS, OUTPUT_TYPES, FrameType
from ..core.hookframes import FRAME_CLASSES
from ..core.hooks import Config
from ..core.jsontext import wire_loads
from ..core.records import Record
from ..core.wireshape import shape_problem

#: Every subject starts with this.
PREFIX: Final = "mcpx"
#: The workers' durable pull consumer on the requests stream.
WORKERS_CONSUMER: Final = "workers"
#: A worker's lease on a request it took (JetStream's ack wait), renewed while the run lasts.
DEFAULT_LEASE_S: Final = 30.0
#: The bus's history, kept by the events stream as it is by one supervisor's bus.
EVENTS_KEPT: Final = 1024
#: Requests waiting for a worker at most; past it a gateway answers "try again later".
REQUESTS_KEPT: Final = 4096
#: How long JetStream remembers a `Nats-Msg-Id` to drop a duplicate publish.
DUPLICATE_WINDOW_S: Final = 120.0
#: A run id as it may stand in a subject: what `new_run_id` makes, nothing with `.`, `*`, `>`.
RUN_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


#: Bytes a message keeps for its headers and the protocol, below the server's max payload.
HEADROOM: Final = 4096
#: A field of a frame too large for one message is dropped if its encoding exceeds this.
FIELD_KEPT: Final = 4096


def fit(line: bytes, limit: int) -> bytes:
    """A frame's line as one NATS message can carry it (`limit`: the server's max payload).
    One that is too large keeps its place (`seq`) and its type, so the run's order stands:
    output (`OUTPUT_TYPES`) becomes a `warning` saying what was not carried; any other frame,
    of a type known or not, keeps its envelope and small fields (a `result` its `value` as
    null). Pure."""
    if len(line) <= limit - HEADROOM:
        return line
    wire = wire_loads(line)
    note = f"a {wire.get('type')} frame of {len(line)} bytes is over the cluster's message size"
    if wire.get("type") in OUTPUT_TYPES:
        keep = {k: wire[k] for k in ENVELOPE_KEYS if k in wire}
        warning = {**keep, "message": f"{note}; not carried", "type": FrameType.WARNING}
        return orjson.dumps(warning)
    small = {k: v for k, v in wire.items() if len(orjson.dumps(v)) <= FIELD_KEPT}
    if wire.get("type") == FrameType.RESULT:
        small.setdefault("value", None)
        small["advice"] = [*small.get("advice", []), f"{note}; its value is not carried"]
    return orjson.dumps(small)


class Header(enum.StrEnum):
    """The message headers the cluster reads and writes."""

    SEQ = "Mcpx-Seq"  # a frame's `seq` on the frames stream (a batch's first frame's)
    LAST_SEQ = "Mcpx-Seq-Last"  # a batch's last frame's `seq` (`batch_message`)
    LEASE = "Mcpx-Lease-S"  # the worker's lease, on a run's summary
    REFUSED = "Mcpx-Refused"  # a request the worker refused before it ran: the close code
    MSG_ID = "Nats-Msg-Id"  # JetStream drops a second publish with the same id
    LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"  # refused unless it is so
    SIGNATURE = "Mcpx-Signature"  # a request's HMAC-SHA256 by its gateway (`sealing.py`)


class Storage(enum.StrEnum):
    FILE = "file"
    MEMORY = "memory"


@attrs.frozen(repr=False, eq=False)
class StreamSpec(Record):
    """One JetStream stream: its name, subjects, and what it keeps."""

    name: str
    subjects: tuple[str, ...]
    what: str
    work_queue: bool = False
    storage: Storage = Storage.FILE
    max_msgs: int = -1
    max_bytes: int = -1
    max_msgs_per_subject: int = -1
    discard_new: bool = False
    #: An object store's stream: a rollup header replaces an object's meta, read direct.
    objects: bool = False


class Stream(enum.StrEnum):
    """The streams, by name."""

    REQUESTS = "MCPX_REQUESTS"
    FRAMES = "MCPX_FRAMES"
    RUNS = "MCPX_RUNS"
    EVENTS = "MCPX_EVENTS"
    ARTIFACTS = "OBJ_MCPX_ARTIFACTS"  # the object store bucket `ARTIFACTS_BUCKET`'s stream


#: The object store bucket of the runs' artifacts, each named `artifact_key(runId, id)`.
ARTIFACTS_BUCKET: Final = "MCPX_ARTIFACTS"
#: The bucket's stream holds the budget's bytes and this much more for chunks' and objects'
#: envelopes (the budget itself is kept by the workers, counting the artifacts' bytes).
ARTIFACTS_HEADROOM: Final = 1 << 20


def artifact_key(run_id: str, artifact_id: str) -> str:
    """An artifact's object name: its run id and its id (neither has a `.`)."""
    return f"{run_id}.{artifact_id}"


def artifact_run(key: str) -> str:
    """The run id of an object named by `artifact_key`."""
    return key.split(".", 1)[0]


def requests_subject() -> str:
    return f"{PREFIX}.requests"


def frames_subject(run_id: str) -> str:
    return f"{PREFIX}.frames.{run_id}"


def frame_message(
    run_id: str, seq: int, line: bytes, limit: int
) -> tuple[str, bytes, dict[str, str]]:
    """Frame `seq` of a run (`line`, its wire form) as a message of its own, as one message
    can carry it (`fit`): a batch of one (see `batch_message`). Pure."""
    return frames_subject(run_id), fit(line, limit), _frame_headers(run_id, seq, seq)


def batch_message(
    run_id: str, lines: Sequence[bytes], ends: Sequence[int], at: int, *, limit: int, most: int
) -> tuple[tuple[str, bytes, dict[str, str]], int]:
    """How a worker publishes a run's frames from seq `at` on (`lines`, their wire forms by
    seq; `ends[k]`, the bytes of lines 0..k-1 with a newline after each, as the journal
    counts them): as one message of at most `most` frames, one line each, to the run's one
    subject whatever their types, so the stream keeps the run's order. The batch is as long
    as one message carries (`limit`, the server's max payload): a longer run of frames takes
    several messages, and a frame too large for one message on its own goes alone, as it
    can be carried (`fit`). Returns the message and the seq after its last frame. Pure."""
    hi = min(len(lines), at + most)
    # The last k with lines at..k-1 within the message: ends[k] - ends[at] - 1 <= room.
    upto = bisect.bisect_right(ends, ends[at] + limit - HEADROOM + 1, at + 1, hi + 1) - 1
    if upto == at:
        upto, carried = at + 1, fit(lines[at], limit)
    else:
        carried = b"\n".join(lines[at:upto])
    headers = _frame_headers(run_id, at, upto - 1)
    return (frames_subject(run_id), carried, headers), upto


def _frame_headers(run_id: str, first: int, last: int) -> dict[str, str]:
    """A message of frames `first` to `last`: their seqs, an id that makes a second publish
    of it a no-op, and, on the run's first frame, the condition that the run's subject be
    empty (one worker starts a run)."""
    headers: dict[str, str] = {
        Header.SEQ: str(first),
        Header.LAST_SEQ: str(last),
        Header.MSG_ID: f"{run_id}.{first}" if first == last else f"{run_id}.{first}-{last}",
    }
    if first == 0:
        headers[Header.LAST_SUBJECT_SEQ] = "0"
    return headers


def batch_frames(headers: Mapping[str, str], data: bytes) -> tuple[int, list[bytes]] | None:
    """The frames one message of a run's subject carries: its first frame's seq and their
    lines, in order; None when its headers do not say which (a stray message). A message
    without `Mcpx-Seq-Last` carries one frame, whatever its bytes. Pure."""
    try:
        first = int(headers.get(Header.SEQ, ""))
        last = int(headers.get(Header.LAST_SEQ, first))
    except ValueError:
        return None
    if Header.LAST_SEQ not in headers:
        return first, [bytes(data)]
    lines = bytes(data).split(b"\n")
    if last - first + 1 != len(lines):
        return None
    return first, lines


#: The class of each frame type, by its name as the wire says it.
_CLASS_OF: Final = {str(kind): cls for kind, cls in FRAME_CLASSES.items()}


def frame_problem(wire: Mapping[str, object]) -> str | None:
    """What is wrong with a decoded frame of a run's subject, else None: a frame of a type
    this version knows holds each of its fields in the field's declared type (a frame that
    did not fit a message may lack some, `fit`); a type it does not know is let through.
    Anyone the server lets publish there may put anything there: what a gateway keeps of
    it is read as a frame (`RunJournal`, the metrics) and sent to clients, who hold it to
    the same shapes. Pure."""
    kind = wire.get("type")
    if not isinstance(kind, str):
        return "its type is not a string"
    cls = _CLASS_OF.get(kind)
    return None if cls is None else shape_problem(cls, wire, partial=True)


def runs_subject(run_id: str) -> str:
    return f"{PREFIX}.runs.{run_id}"


def events_subject() -> str:
    return f"{PREFIX}.events"


def lease_subject(run_id: str) -> str:
    """Core NATS (not a stream): a worker's heartbeat for a run, each time it renews."""
    return f"{PREFIX}.lease.{run_id}"


#: The key check's subjects start with this (`keycheck.py`; core NATS, nothing stored).
KEYCHECK: Final = f"{PREFIX}.keycheck"


def keycheck_subject() -> str:
    """A part's question whether the others hold its cluster key."""
    return f"{KEYCHECK}.ask"


def keycheck_answers(nonce: str) -> str:
    """The answers to the key check asked with `nonce` (hex: no `.`, `*`, `>`)."""
    return f"{KEYCHECK}.answer.{nonce}"


def every(subject: str) -> str:
    """The wildcard of every run's subject of the kind `subject` is (`mcpx.lease.*`)."""
    return subject.rsplit(".", 1)[0] + ".*"


def control_subject(run_id: str) -> str:
    """Core NATS: `cancel` and `answer` for a run, to the worker running it."""
    return f"{PREFIX}.control.{run_id}"


def stream_of(subject: str) -> Stream | None:
    """The stream that holds `subject` (a run's frames or summary, or every run's, or the
    events), None for any other: said when following it, so that JetStream is not first
    asked which stream holds it (one request to the server less for each run followed)."""
    if subject == events_subject():
        return Stream.EVENTS
    prefix, _, rest = subject.partition(".")
    kind, dot, run = rest.partition(".")
    if prefix != PREFIX or not dot or not run or "." in run:
        return None
    return _HELD.get(kind)


#: The streams that hold a subject a run of its own, by the subject's kind.
_HELD: Final = {"frames": Stream.FRAMES, "runs": Stream.RUNS}


def stream_specs(config: Config) -> tuple[StreamSpec, ...]:
    """The streams, their retention from `config`: the frames stream holds what the
    retained runs may (`runs.retainBytes`), the runs stream one summary for each of the last
    `runs.retain` runs, the events stream the bus's history, the artifacts bucket the
    artifacts within `[runs] artifactBytes` (kept so by the workers, `artifacts.py`).
    Requests live in memory only: they may carry the caller's environment, which is never
    written to a disk."""
    return (
        StreamSpec(
            Stream.REQUESTS,
            (requests_subject(),),
            "exec requests waiting for a worker (one worker each)",
            work_queue=True,
            storage=Storage.MEMORY,
            max_msgs=REQUESTS_KEPT,
            discard_new=True,
        ),
        StreamSpec(
            Stream.FRAMES,
            (every(frames_subject("-")),),
            "every frame of every run, one subject a run",
            max_bytes=config.runs_retain_bytes,
        ),
        StreamSpec(
            Stream.RUNS,
            (every(runs_subject("-")),),
            "each retained run's summary, the last one a run",
            max_msgs=config.runs_retain,
            max_msgs_per_subject=1,
        ),
        StreamSpec(
            Stream.EVENTS,
            (events_subject(),),
            "the event bus of every worker and gateway",
            max_msgs=EVENTS_KEPT,
        ),
        StreamSpec(
            Stream.ARTIFACTS,
            (f"$O.{ARTIFACTS_BUCKET}.C.>", f"$O.{ARTIFACTS_BUCKET}.M.>"),
            "the retained runs' artifacts (an object store bucket)",
            max_bytes=config.runs_artifact_bytes
            + config.runs_artifact_bytes // 100
            + ARTIFACTS_HEADROOM,
            discard_new=True,
            objects=True,
        ),
    )
