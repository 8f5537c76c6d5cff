"""A run's frames through the cluster in batches: a worker publishes many frames to a message
(`names.batch_message`: their seq range in `Mcpx-Seq` and `Mcpx-Seq-Last`, one line a
frame), cut by the server's max payload; a gateway's mirror takes a batch frame by frame
(`MirrorJournal.take`). With real parts, on a nats-server whose messages are small (so that
a run of a few hundred KiB takes many of them): a long run arrives whole, in order, on
another gateway, in fewer messages than frames; a follower, or a gateway, that comes late
replays it from any seq, inside a batch or at its edge. Without NATS: the cut by size, a
batch sent again after a lost ack cut where it was cut before, a mirror that takes a batch
it partly holds, and one whose record breaks at a gap or at a frame that is not one."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import orjson
import pytest
import trio
from clusterparts import Cluster, PublishedRun, need_nats, open_cluster, raw_messages
from service_client import Server, Stream, arun, open_ws, read_all, run_remote

from mcpx_hooks.supervisor.cluster import publish
from mcpx_hooks.supervisor.cluster.jet import ClusterDown, Published, Stored
from mcpx_hooks.supervisor.cluster.mirror import MirrorJournal
from mcpx_hooks.supervisor.cluster.names import HEADROOM, Header, batch_frames, batch_message
from mcpx_hooks.supervisor.cluster.publish import Publisher
from mcpx_hooks.supervisor.core.frames import EndFrame, FrameType, ResultFrame, StartFrame, blank
from mcpx_hooks.supervisor.core.order import check_order
from mcpx_hooks.supervisor.run.journal import RunJournal

#: The server's max payload here: a message carries at most this much.
MAX_PAYLOAD = 32 * 1024
LINES = 3000
PAD = "x" * 200


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_nats()
    cwd = tmp_path_factory.mktemp("batches")
    cluster = open_cluster(cwd, gateways=2, workers=1, max_payload=MAX_PAYLOAD)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def long_run(parts: Cluster) -> Stream:
    """A run of `LINES` lines of 200-odd bytes, through gateway A, to its end."""
    argv = ["seq", "-f", f"%g-{PAD}", "1", str(LINES)]
    ran = arun(run_remote(parts.gateways[0], {"argv": argv}))
    assert ran.code == 1000, ran
    return ran


async def _follow(server: Server, run_id: str, start: int = 0) -> Stream:
    async with open_ws(server, f"/v1/runs/{run_id}?from={start}") as ws:
        return await read_all(ws)


def test_a_long_run_reaches_another_gateway_whole_in_fewer_messages_than_frames(
    parts: Cluster, long_run: Stream
) -> None:
    frames = long_run.frames
    check_order(frames)
    assert [f["seq"] for f in frames] == list(range(len(frames)))
    texts = [f["text"] for f in frames if f["type"] == "stdout"]
    assert texts == [f"{n}-{PAD}" for n in range(1, LINES + 1)]
    run_id = frames[0]["runId"]
    assert arun(_follow(parts.gateways[1], run_id)).frames == frames
    messages = arun(raw_messages(parts.nats.client_url(), run_id))
    held = [frame for _, carried in messages for frame in carried]
    assert [seq for seq, _ in held] == list(range(len(frames)))  # each seq once, in order
    assert [frame for _, frame in held] == frames
    assert len(messages) < len(frames) / 10
    # Cut by size: no message over what the server takes, and as many as that needs.
    sizes = [size for size, _ in messages]
    assert max(sizes) <= MAX_PAYLOAD - HEADROOM
    assert len(messages) >= sum(sizes) // (MAX_PAYLOAD - HEADROOM)
    assert sum(sizes) > 10 * MAX_PAYLOAD


def test_a_late_follower_and_a_late_gateway_replay_across_batches(
    parts: Cluster, long_run: Stream
) -> None:
    frames = long_run.frames
    run_id = frames[0]["runId"]
    messages = [carried for _, carried in arun(raw_messages(parts.nats.client_url(), run_id))]
    batches = [carried for carried in messages if len(carried) > 2]
    assert len(batches) >= 3
    inside = [batches[0][1][0], batches[1][-1][0], batches[2][0][0], batches[-1][1][0]]
    starts = [*inside, len(frames) - 1]
    for start in starts:
        seen = arun(_follow(parts.gateways[1], run_id, start))
        assert seen.code == 1000 and seen.frames == frames[start:], start
    late = parts.add_gateway()  # its mirror made from the stream, after the run ended
    for start in (0, *inside):
        seen = arun(_follow(late, run_id, start))
        assert seen.code == 1000 and seen.frames == frames[start:], start


# ---- without NATS ------------------------------------------------------------------------


def _lines(sizes: list[int]) -> tuple[list[bytes], list[int]]:
    lines = [
        orjson.dumps({"seq": n, "type": "stdout", "text": "y" * s}) for n, s in enumerate(sizes)
    ]
    return lines, [0, *accumulate(len(line) + 1 for line in lines)]


def test_a_batch_is_cut_by_the_message_size_and_a_frame_too_large_goes_alone() -> None:
    limit = HEADROOM + 1000
    lines, ends = _lines([100] * 30 + [5000] + [100] * 5)
    carried: list[bytes] = []
    at = 0
    while at < len(lines):
        (_, payload, headers), upto = batch_message("r1", lines, ends, at, limit=limit, most=8)
        assert 0 < upto - at <= 8 and len(payload) <= limit - HEADROOM
        assert batch_frames(headers, payload) == (at, payload.split(b"\n"))
        assert headers[Header.SEQ] == str(at) and headers[Header.LAST_SEQ] == str(upto - 1)
        assert (Header.LAST_SUBJECT_SEQ in headers) == (at == 0)
        carried += payload.split(b"\n")
        at = upto
    assert len(carried) == len(lines)
    big = orjson.loads(carried[30])
    assert big["type"] == FrameType.WARNING and big["seq"] == 30  # its place kept
    assert carried[:30] == lines[:30] and carried[31:] == lines[31:]


def _stored(lines: list[bytes], first: int, sequence: int) -> Stored:
    last = first + len(lines) - 1
    headers = {Header.SEQ: str(first), Header.LAST_SEQ: str(last)}
    return Stored(b"\n".join(lines), headers, sequence)


def _run_lines() -> RunJournal:
    journal = RunJournal("r1")
    journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    journal.offer_output(FrameType.STDOUT, [str(n) for n in range(10)])
    journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    return journal


def test_a_mirror_takes_what_it_lacks_of_a_batch_and_nothing_after_end() -> None:
    journal = _run_lines()
    lines = journal.lines
    mirror = MirrorJournal("r1", 1 << 20)
    mirror.take(_stored(lines[0:4], 0, 1))
    mirror.take(_stored(lines[2:6], 2, 2))  # sent again, longer: only 4 and 5 are new
    mirror.take(Stored(b"\n".join(lines[6:8]), {Header.SEQ: "6", Header.LAST_SEQ: "9"}, 3))
    assert mirror.lines == lines[:6]  # (a stray: its range is not its lines')
    mirror.take(_stored([*lines[6:], lines[3]], 6, 4))  # a frame after `end`: not kept
    assert mirror.lines == lines and mirror.finished and mirror.broken is None
    assert list(mirror.ends) == list(journal.ends) and mirror.outcome == journal.outcome
    assert mirror.frames == journal.frames and mirror.begun.is_set()


@pytest.mark.parametrize(
    ("first", "message", "problem"),
    [
        (8, [8, 9], "the next message on its subject begins at frame 8"),
        (6, [b"not json", 7], "not a frame: not a JSON object"),
        (6, [b'{"type": "end", "exitCode": "0"}'], "not a frame: exitCode: "),
    ],
)
def test_a_mirror_breaks_at_a_gap_or_a_frame_that_is_not_one(
    first: int, message: list[Any], problem: str
) -> None:
    # It skipped them and waited for what would fill the gap: its readers waited for ever.
    lines = _run_lines().lines
    mirror = MirrorJournal("r1", 1 << 20)
    mirror.take(_stored(lines[0:6], 0, 1))
    mirror.take(_stored([lines[n] if isinstance(n, int) else n for n in message], first, 2))
    assert mirror.broken is not None and mirror.over and not mirror.finished
    assert mirror.broken.startswith(
        f"run r1's record on the cluster is broken at frame 6 ({problem}"
    )
    assert mirror.broken.endswith("): the frames before it were sent, none after it can be")
    mirror.take(_stored(lines[6:], 6, 3))  # what would have filled it: too late
    assert mirror.lines == lines[:6] and not mirror.finished


async def test_a_break_wakes_the_readers_and_the_wait_for_the_first_frame() -> None:
    # (The wait for the first frame: an exec socket's, until a worker begins its run.)
    mirror = MirrorJournal("r1", 1 << 20)
    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(mirror.wait_past, 0)
            nursery.start_soon(mirror.begun.wait)
            await trio.lowlevel.checkpoint()
            mirror.take(_stored([b"[]"], 0, 1))
    assert mirror.broken is not None and "at frame 0 (not a frame" in mirror.broken
    assert [batch async for batch in mirror.follow(0)] == []
    assert not len(mirror)


def test_a_mirror_tells_a_batch_of_output_alone_from_one_with_other_frames() -> None:
    """A batch all of output is kept at once (its lines' endings counted over the message);
    one with any other frame among them, or an output text that spells an output line's
    ending, is kept frame by frame as ever: the mirror holds what the journal holds."""
    journal = RunJournal("r2")
    journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    spelled = ['a","type":"stdout"}', 'b,"type":"stderr"}\n', "c"]
    journal.offer_output(FrameType.STDOUT, spelled)
    journal.offer_output(FrameType.STDERR, ["e1", "e2"])
    journal.offer_output(FrameType.STDOUT, ["o1", "o2"])
    journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    lines = journal.lines
    mirror = MirrorJournal("r2", 1 << 20)
    mirror.take(_stored(lines[0:2], 0, 1))  # start and output
    mirror.take(_stored(lines[2:7], 2, 2))  # stdout and stderr: output alone
    assert not mirror.finished and mirror.outcome is None
    mirror.take(_stored(lines[7:], 7, 3))  # output and end
    assert mirror.lines == lines and mirror.finished
    assert list(mirror.ends) == list(journal.ends) and mirror.outcome == journal.outcome
    assert mirror.frames == journal.frames


def test_a_mirror_keeps_a_frame_holding_an_integer_past_64_bits() -> None:
    """A `result` of `10 ** 400` (written exactly) among a batch's frames: kept, with the
    frames after it, where orjson's float range once had the mirror skip it and the rest."""
    journal = RunJournal("r3")
    journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    journal.offer_output(FrameType.STDOUT, ["o1"])
    journal.append(blank(ResultFrame, value=[10**400, 2**70]))
    journal.append(blank(EndFrame, exit_code=0, duration_ms=1))
    lines = journal.lines
    mirror = MirrorJournal("r3", 1 << 20)
    mirror.take(_stored(lines, 0, 1))
    assert mirror.lines == lines and mirror.finished and mirror.outcome == journal.outcome
    assert mirror.frames[2]["value"] == [10**400, 2**70]


class _Cluster:
    """What `Publisher.publish` uses of a `Cluster`: every message sent kept; the ack of the
    `lose`-th batch sent without waiting lost once."""

    def __init__(self, lose: int) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []
        self.sends = 0
        self.lose = lose

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> Published:
        self.sent.append((subject, data, headers))
        return Published(len(self.sent), False)

    async def send_many(self, items: list[Any]) -> list[Any]:
        self.sent += items
        self.sends += 1
        return [self.sends]

    async def acked(self, handles: list[int]) -> None:
        if handles == [self.lose]:
            self.lose = 0
            raise ClusterDown("an ack lost")

    async def drop(self, handles: list[Any]) -> None:
        pass


async def test_a_batch_sent_again_is_cut_where_it_was_and_keeps_its_id(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish, "BATCH", 100)
    journal = RunJournal("r1")
    journal.append(blank(StartFrame, argv=("x",), cwd="/", sandbox="none"))
    cluster = _Cluster(lose=2)
    publisher = Publisher(cluster, 30)  # type: ignore[arg-type]

    async def write() -> None:
        for wave in range(5):  # output arrives while batches are in flight
            journal.offer_output(FrameType.STDOUT, [f"{wave}.{n}" for n in range(70)])
            await trio.sleep(0.01)
        journal.append(blank(EndFrame, exit_code=0, duration_ms=1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher.publish, PublishedRun(journal))
        nursery.start_soon(write)
    frames = [(payload, h) for subject, payload, h in cluster.sent if subject == "mcpx.frames.r1"]
    assert len(frames) < len(journal) / 10
    # The claim, the first batch sent without waiting, then the second: its ack lost.
    lost_payload, lost = frames[2]
    again = [payload for payload, h in frames if h[Header.MSG_ID] == lost[Header.MSG_ID]]
    assert again == [lost_payload, lost_payload]  # sent again as it was, under its id
    assert int(lost[Header.LAST_SEQ]) > int(lost[Header.SEQ])
    for payload, headers in frames:  # one id, one content
        assert {p for p, h in frames if h[Header.MSG_ID] == headers[Header.MSG_ID]} == {payload}
    held: dict[int, bytes] = {}
    for payload, headers in frames:
        first, lines = batch_frames(headers, payload) or (0, [])
        held.update(enumerate(lines, first))
    assert [held[seq] for seq in range(len(journal))] == journal.lines
