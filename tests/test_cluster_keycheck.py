"""The key check at start (`cluster/keycheck.py`, docs/cluster.md "Who may touch the
cluster"): a part given another `--cluster-key-file` than the others is told so in one line
when it starts, parts that share the key say nothing, and a run that meets the other key
tells its client what to fix. The answers alone, without NATS; then real parts."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from clusterparts import Cluster, Nats, need_nats, start_worker, write_private
from service_client import CLI, ENV, arun, run_remote

from mcpx_hooks.supervisor.cluster.keycheck import KeyCheck, Part, held_keys, kinds
from mcpx_hooks.supervisor.cluster.names import keycheck_answers, keycheck_subject
from mcpx_hooks.supervisor.cluster.sealing import UNSIGNED, ClusterKey

#: A warning a part logs is waited for this long at most.
TOLD_S = 20.0


def test_a_part_answers_others_with_a_proof_that_gives_nothing_away() -> None:
    raw = os.urandom(32)
    key = ClusterKey(raw)
    gateway, worker = KeyCheck(key, Part.GATEWAY), KeyCheck(ClusterKey(raw), Part.WORKER)
    subject, nonce = gateway.question()
    assert subject == keycheck_subject()
    answer = worker.answer(nonce)
    assert answer is not None
    assert answer[0] == keycheck_answers(nonce.decode())  # never a subject the asker chose
    # Neither the key, nor its signature of the nonce (a request's), is in the answer.
    assert raw.hex().encode() not in answer[1] and raw not in answer[1]
    assert key.sign(nonce).encode() not in answer[1]
    assert gateway.verdict([answer[1]]) is None
    # Its own question, and what is not a nonce, are not answered.
    assert gateway.answer(nonce) is None
    for data in (b"", b"mcpx.requests", b"0" * 31, b"0" * 33, b"A" * 32, nonce + b"\n"):
        assert worker.answer(data) is None


def test_answers_by_another_key_are_counted_in_one_warning() -> None:
    raw = os.urandom(32)
    asking = KeyCheck(ClusterKey(raw), Part.WORKER)
    _, nonce = asking.question()

    def answer(key: bytes, part: Part) -> bytes:
        answered = KeyCheck(ClusterKey(key), part).answer(nonce)
        assert answered is not None
        return answered[1]

    same = [answer(raw, Part.GATEWAY), answer(raw, Part.WORKER)]
    other = [answer(os.urandom(32), Part.GATEWAY) for _ in range(2)]
    odd = [b"not json", b"[]", b'{"part": "worker", "proof": "nothex"}', b'{"part": []}']
    assert asking.verdict([]) is None and asking.verdict([*same, *odd]) is None
    said = asking.verdict([*same, *other, answer(os.urandom(32), Part.WORKER), *odd])
    assert said is not None
    assert said.startswith(
        "warning: 3 of 5 parts that answered (2 gateways, 1 worker) hold another cluster key"
        " than this worker (--cluster-key-file)"
    )
    assert raw.hex() not in said and "\n" not in said
    assert kinds(["worker"]) == "1 worker"
    # A stranger's answer counts, as a part of no kind it may name.
    stranger = b'{"part": ["x"], "proof": "%s"}' % (b"0" * 64)
    assert "(1 part)" in (asking.verdict([*same, stranger]) or "")
    assert held_keys([*same, stranger, *odd]) == [["gateway", "worker"], ["part"]]


def doctor(nats: Nats, cwd: Path) -> subprocess.CompletedProcess[str]:
    access = ["--nats-auth-file", str(nats.auth_file("gateway"))]
    return subprocess.run(
        [*CLI, "doctor", "--cluster", nats.url, *access],
        check=False, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def told(log: Path, words: str) -> str:
    """The log's one line holding `words`, once there (bounded: `TOLD_S`)."""
    deadline = time.monotonic() + TOLD_S
    while True:
        lines = [line for line in log.read_text().splitlines() if words in line]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == 1, (words, log.read_text())
    return lines[0]


def test_a_part_with_another_key_is_told_at_start_and_its_runs_say_why(tmp_path: Path) -> None:
    need_nats()
    parts = Cluster(tmp_path, Nats(tmp_path / "jetstream"))
    parts.nats.start()
    try:
        gateway = parts.add_gateway()  # the first part: nobody answers
        same = parts.add_worker()
        checked = doctor(parts.nats, tmp_path)
        assert "ok       parts     2 answered (1 gateway, 1 worker), one cluster key" in (
            checked.stdout
        ), checked
        other_key = write_private(tmp_path / "other.key", secrets.token_hex(32) + "\n")
        other = start_worker(tmp_path, parts.nats, "--cluster-key-file", str(other_key))
        parts.workers.append(other)
        line = told(other.log, "another cluster key")
        assert line == (
            "mcpx-hooks worker: warning: 2 of 2 parts that answered (1 gateway, 1 worker) hold"
            " another cluster key than this worker (--cluster-key-file): a worker refuses every"
            " request a gateway with another key signed"
        )
        later = parts.add_gateway()  # the key of the first two: only `other` differs
        line = told(later.stderr, "another cluster key")
        assert line.startswith(
            "mcpx-hooks serve: warning: 1 of 3 parts that answered (1 worker) holds another"
            " cluster key than this gateway"
        )
        checked = doctor(parts.nats, tmp_path)
        assert checked.returncode == 1, checked
        assert (
            "  KEYS     parts     4 answered, holding 2 different cluster keys:"
            " 3 (2 gateways, 1 worker); 1 (1 worker); give every part the same --cluster-key-file"
        ) in checked.stdout.splitlines(), checked.stdout
        # The parts that share the key said nothing: each asked before the later two began.
        for log in (gateway.stderr, same.log):
            assert "another cluster key" not in log.read_text()
        # Only the worker with the other key takes runs now: the client is told why.
        parts.workers.remove(same)
        same.stop()
        ran = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo never"]}))
        assert [f["type"] for f in ran.frames] == ["start", "error", "end"], ran
        assert ran.frames[1]["message"] == UNSIGNED
        assert "do not share a cluster key (--cluster-key-file)" in UNSIGNED
        assert ran.frames[1]["cause"] == "failed"
        keys = (parts.nats.key_file.read_text().strip(), other_key.read_text().strip())
        for log in (gateway.stderr, later.stderr, same.log, other.log):
            text = log.read_text()
            assert not any(key in text for key in keys) and "Traceback" not in text
    finally:
        parts.stop()


def test_a_user_not_allowed_the_key_check_starts_and_runs_saying_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NATS users set up before the key check (no `mcpx.keycheck.>`): the parts start and
    run as before; NATS refusing the check's subjects is not a warning."""
    import clusterparts

    need_nats()
    documented = clusterparts.documented_authorization()
    before = documented.replace(', "mcpx.keycheck.>"', "").replace('"mcpx.keycheck.>",', "")
    assert "keycheck" not in before
    monkeypatch.setattr(clusterparts, "documented_authorization", lambda: before)
    parts = Cluster(tmp_path, Nats(tmp_path / "jetstream"))
    parts.nats.start()
    try:
        gateway = parts.add_gateway()
        worker = parts.add_worker()
        ran = arun(run_remote(gateway, {"argv": ["sh", "-c", "echo ran"]}))
        assert [f["text"] for f in ran.frames if f["type"] == "stdout"] == ["ran"]
        parts.stop()
        for log in (gateway.stderr, worker.log):
            text = log.read_text()
            assert "keycheck" not in text and "permissions violation" not in text, text
    finally:
        parts.stop()
