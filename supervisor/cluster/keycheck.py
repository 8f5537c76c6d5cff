"""Whether the other parts hold this part's cluster key, asked once at start: a gateway or
worker given another `--cluster-key-file` than the rest is told so when it starts, not by
its first request failing.

- Every gateway and worker answers on `mcpx.keycheck.ask` (core NATS, nothing stored) for as
  long as it is connected: a question is a random nonce; the answer, published on
  `mcpx.keycheck.answer.<nonce>`, is the part's kind and `ClusterKey.proof(nonce)`, an
  HMAC-SHA256 under a key derived from the cluster key for this alone. Whoever asks learns
  whether two parts hold the same key, and nothing else: no signature of a request, nothing
  that opens a secret, nothing from which the key can be found. A part never answers its
  own question, and never publishes anywhere but an answer's subject.
- At start, a part asks once and gathers the answers for `ASK_S`; when any does not match
  its own proof, it logs one warning line. No answer (the first part to start) says
  nothing. NATS failing the check (a user not allowed `mcpx.keycheck.>`, a server gone) is
  a debug line: the check is a hint and never stops a part. An answer is only a hint too:
  whoever may publish there could answer falsely, and a warning is all that follows.
"""

from __future__ import annotations

import enum
import logging
import re
import secrets
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

import trio

from ..core import jsontext
from .jet import ClusterDown
from .link import Cluster
from .names import keycheck_answers, keycheck_subject
from .sealing import ClusterKey

logger = logging.getLogger("mcpx_hooks.cluster")

#: How long a part gathers the answers to its question (in the background: its start waits
#: only until it answers others, a round trip, and this long at most).
ASK_S: Final = 1.0
#: Answers gathered at most.
MOST_ANSWERS: Final = 256
#: The nonce's random bytes; written as hex.
NONCE_BYTES: Final = 16
_NONCE: Final = re.compile(f"[0-9a-f]{{{2 * NONCE_BYTES}}}")
_PROOF: Final = re.compile("[0-9a-f]{64}")


class Part(enum.StrEnum):
    """The kinds of part that answer."""

    GATEWAY = "gateway"
    WORKER = "worker"


_PARTS: Final = frozenset(Part)


class KeyCheck:
    """One part's side of the check: its question, its answer to others', its verdict."""

    def __init__(self, key: ClusterKey, part: Part) -> None:
        self.key = key
        self.part = part
        self.nonce = secrets.token_hex(NONCE_BYTES)

    def __repr__(self) -> str:
        return f"KeyCheck({self.part})"

    def question(self) -> tuple[str, bytes]:
        return keycheck_subject(), self.nonce.encode()

    def answer(self, data: bytes) -> tuple[str, bytes] | None:
        """The answer to a question (its subject, its bytes); None for this part's own
        question or one that is not a nonce. Runs on the bridge's loop: quick, no I/O."""
        nonce = data.decode("ascii", "replace")
        if nonce == self.nonce or not _NONCE.fullmatch(nonce):
            return None
        answer = {"part": self.part, "proof": self.key.proof(data)}
        return keycheck_answers(nonce), jsontext.dumps(answer)

    def verdict(self, answers: Sequence[bytes]) -> str | None:
        """The warning the answers call for: None when every answer (if any) holds this
        key; an answer that is not one is not counted."""
        own = self.key.proof(self.nonce.encode())
        read = [found for data in answers if (found := read_answer(data)) is not None]
        other = [part for part, proof in read if proof != own]
        if not other:
            return None
        holds = "holds" if len(other) == 1 else "hold"
        return (
            f"warning: {len(other)} of {len(read)} parts that answered ({kinds(other)}) {holds}"
            f" another cluster key than this {self.part} (--cluster-key-file): a worker refuses"
            " every request a gateway with another key signed"
        )


def read_answer(data: bytes) -> tuple[str, str] | None:
    """An answer's part and proof; None for one that is not an answer."""
    try:
        answer = jsontext.loads(data)
    except jsontext.JsonError:
        return None
    if not isinstance(answer, dict):
        return None
    part, proof = answer.get("part"), answer.get("proof")
    if not isinstance(proof, str) or not _PROOF.fullmatch(proof):
        return None
    return (part if isinstance(part, str) and part in _PARTS else "part"), proof


def held_keys(answers: Sequence[bytes]) -> list[list[str]]:
    """The parts that answered one question, grouped by the key they hold (each group its
    parts' kinds), the largest group first; an answer that is not one is not counted."""
    groups: dict[str, list[str]] = {}
    for data in answers:
        if (found := read_answer(data)) is not None:
            groups.setdefault(found[1], []).append(found[0])
    return sorted(groups.values(), key=len, reverse=True)


async def ask_parts(cluster: Cluster) -> list[list[str]]:
    """Asks the parts once, as someone without the key (`doctor`): who answered within
    `ASK_S`, grouped by the key they hold (`held_keys`). `ClusterDown` if NATS fails it."""
    nonce = secrets.token_hex(NONCE_BYTES)
    asked = (keycheck_subject(), nonce.encode())
    answers = await cluster.gather(keycheck_answers(nonce), asked, ASK_S, MOST_ANSWERS)
    return held_keys(answers)


def kinds(parts: Iterable[str]) -> str:
    """`2 gateways, 1 worker`."""
    counted = Counter(parts)
    return ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in sorted(counted.items()))


async def check_key(
    cluster: Cluster,
    key: ClusterKey,
    part: Part,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answers the other parts' questions from now on, then (started) asks once, and logs
    one warning if a part that answered within `ASK_S` holds another key. Started at once
    if answering fails or takes longer than `ASK_S`; NATS failing anything here is a debug
    line, never raised. Cancelled, it stops asking (the answering ends with the connection)."""
    check = KeyCheck(key, part)
    try:
        with trio.move_on_after(ASK_S):
            await cluster.answer(keycheck_subject(), check.answer)
    except ClusterDown as exc:
        logger.debug("this part answers no key check: %s", exc)
    task_status.started()
    try:
        asked = check.question()
        answers = await cluster.gather(keycheck_answers(check.nonce), asked, ASK_S, MOST_ANSWERS)
    except ClusterDown as exc:
        logger.debug("the key check was not asked: %s", exc)
        return
    warning = check.verdict(answers)
    if warning is not None:
        logger.warning("%s", warning)
