"""Properties (Hypothesis) of the cluster: what comes off NATS (a queued request, a run's
subject), and what a gateway reads of the bucket and of a request.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

# ---- the cluster: what comes off NATS (a queued request, a run's subject) ---------------------

CLUSTER_MESSAGE_CASES = (
    b"",
    b"\xff\xfe",
    b"[]",
    b"{" * 5000,
    b'{"runId": "a.b", "request": "{}"}',
    b'{"runId": ">", "request": 1}',
    b'{"runId": "ok", "request": "not json"}',
    b'{"type": "end", "seq": 0}',
)


@example(data=CLUSTER_MESSAGE_CASES[0], seq="0")
@example(data=CLUSTER_MESSAGE_CASES[6], seq="\x80")  # a signature header not ASCII
@given(
    data=st.one_of(st.sampled_from(CLUSTER_MESSAGE_CASES), st.binary(max_size=2000)),
    seq=st.one_of(st.just("0"), st.just("-1"), st.just("x"), st.text(max_size=8)),
)
def test_hostile_cluster_messages_are_dropped_never_taken(data: bytes, seq: str) -> None:
    """A worker takes only a request a gateway signed, naming a subject-safe run id (an
    unsigned message, whatever it holds, is never a request to run); a gateway's mirror
    takes only a frame at the next seq, and never past its `end`."""
    from mcpx_hooks.supervisor.cluster.jet import Stored
    from mcpx_hooks.supervisor.cluster.mirror import MirrorJournal
    from mcpx_hooks.supervisor.cluster.names import RUN_ID
    from mcpx_hooks.supervisor.cluster.sealing import ClusterKey, unpack_request

    key = ClusterKey(bytes(32))
    for headers in ({}, {"Mcpx-Signature": seq}, {"Mcpx-Signature": key.sign(data)}):
        unpacked = unpack_request(key, data, headers)
        assert unpacked.run_id is None or RUN_ID.fullmatch(unpacked.run_id)
        if not headers:
            assert unpacked.text is None
    journal = MirrorJournal("run", 1 << 20)
    for _ in range(3):
        journal.take(Stored(data, {"Mcpx-Seq": seq}, 1))
    assert len(journal) <= 1
    if len(journal):
        assert int(seq) == 0 and journal.lines[0] == data


# ---- the cluster's artifacts: what a gateway reads of the bucket and of a request ------------


@given(description=st.one_of(st.none(), st.text(), st.binary().map(repr), st.integers()))
@example(description='{"name": "a.txt", "mime": "text/plain\\r\\nX-Evil: 1"}')
@example(description='{"name": 3, "mime": ["x"]}')
def test_a_hostile_object_description_gives_a_name_and_one_line_type(description: Any) -> None:
    from mcpx_hooks.supervisor.cluster.objects import described

    name, mime = described(description, "r.a0")
    assert isinstance(name, str) and name
    assert isinstance(mime, str) and mime.isprintable() and mime


@given(run_id=st.text(max_size=80), artifact_id=st.text(max_size=80))
def test_hostile_artifact_ids_on_a_gateway_are_404_or_looked_up(
    run_id: str, artifact_id: str
) -> None:
    from mcpx_hooks.supervisor.cluster.artifacts import ClusterArtifact, ClusterRoutes
    from mcpx_hooks.supervisor.cluster.names import RUN_ID
    from mcpx_hooks.supervisor.cluster.watch import RunsIndex
    from mcpx_hooks.supervisor.run.artifacts import ArtifactGone

    routes = ClusterRoutes(RunsIndex(4), None)  # type: ignore[arg-type]
    try:
        found = routes.find_artifact(run_id, artifact_id)
    except ArtifactGone as exc:
        assert str(exc)
        return
    assert isinstance(found, ClusterArtifact)
    assert RUN_ID.fullmatch(run_id) and RUN_ID.fullmatch(artifact_id)
