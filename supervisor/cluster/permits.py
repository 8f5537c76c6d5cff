"""What a part's NATS user must be allowed on core NATS, checked once at start.

NATS tells a permission refused only in passing, as an `-ERR` line on the connection (nats-py
hands it to its error callback), never as the answer to a subscribe or a publish: a part
whose user lacks one starts all the same. Two of these are worse than a quiet failure. A
gateway that may not hear `mcpx.lease.*` hears no worker renew its lease and, after one
lease, ends every running run of the cluster as "worker lost" while its worker runs it on;
a worker that may not publish there has every gateway end its runs so. A worker that may
not hear `mcpx.control.*`, or a gateway that may not publish there, loses every `cancel`
and `answer`. So each part subscribes to what it must hear and publishes an empty message
for no run where it must speak, then flushes: by the flush's answer the server has said any
refusal, and the part does not start (`ClusterRefused`), naming the subject.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from ..core.records import Record
from .jet import API_TIMEOUT_S, Jet, tolerating
from .names import control_subject, every, lease_subject

#: The run id of the probes: a subject of the right shape that names no run.
_NO_RUN: Final = "-"


class Verb(enum.StrEnum):
    """What NATS's refusal says was refused (`… for Subscription to "SUBJECT"`)."""

    SUBSCRIBE = "subscription"
    PUBLISH = "publish"


@attrs.frozen(repr=False, eq=False)
class Need(Record):
    verb: Verb
    subject: str
    why: str


#: What each kind of part cannot do without.
NEEDS: Final[dict[str, tuple[Need, ...]]] = {
    "gateway": (
        Need(
            Verb.SUBSCRIBE,
            every(lease_subject(_NO_RUN)),
            "it would hear no worker's lease and end every running run as 'worker lost'",
        ),
        Need(
            Verb.PUBLISH,
            control_subject(_NO_RUN),
            "no cancel or answer of its clients would reach a worker",
        ),
    ),
    "worker": (
        Need(
            Verb.PUBLISH,
            lease_subject(_NO_RUN),
            "the gateways would hear none of its leases and end each of its runs as 'worker lost'",
        ),
        Need(
            Verb.SUBSCRIBE,
            every(control_subject(_NO_RUN)),
            "no cancel or answer would reach its runs",
        ),
    ),
}


async def denied(jet: Jet, needs: tuple[Need, ...]) -> list[Need]:
    """The `needs` the server refuses this connection's user. Runs on the bridge's loop."""
    nc = jet.nc
    assert nc is not None
    subscriptions = []
    jet.probing = True  # the refusals are this check's answer, not news for the log
    try:
        for need in needs:
            if need.verb is Verb.SUBSCRIBE:
                subscriptions.append(await nc.subscribe(need.subject))
            else:
                await nc.publish(need.subject, b"")
        # Twice: nats-py writes a PING at once, before the SUB and PUB its flusher task still
        # holds, so the first PONG may come before the refusals; the second PING follows them.
        for _ in range(2):
            await nc.flush(int(API_TIMEOUT_S))
    finally:
        jet.probing = False
        for subscription in subscriptions:
            with tolerating(f"unsubscribe from {subscription.subject}"):
                await subscription.unsubscribe()
    said = " ".join(jet.denied)
    return [need for need in needs if f'{need.verb} to "{need.subject}"' in said]


def refusal(url: str, part: str, user: str | None, refused: list[Need]) -> str:
    """The one line a part that may not start says."""
    who = f"NATS user {user!r}" if user else "this NATS user"
    what = "; ".join(
        f"{'subscribe to' if n.verb is Verb.SUBSCRIBE else 'publish to'} {every(n.subject)}"
        f" ({n.why})"
        for n in refused
    )
    return (
        f"NATS at {url} does not let {who} {what}: give the {part}'s user the permissions"
        f" docs/cluster.md shows for a {part} (is this the {part}'s --nats-auth-file or"
        " --nats-creds?)"
    )
