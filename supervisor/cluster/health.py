"""`doctor --cluster URL`: whether the NATS server answers (with the `--nats-*` credentials),
lets anyone in without credentials (which gateways and workers refuse unless
`--nats-insecure`), has JetStream on, holds the cluster's streams (each with what it keeps
now), and whether the gateways and workers running now hold one cluster key (`keycheck.py`:
asked without the key, their answers compared with one another)."""

from __future__ import annotations

from typing import Final

import attrs
import trio

from .access import INSECURE_WARNING, NatsAccess
from .jet import ClusterDown
from .keycheck import ask_parts, kinds
from .link import open_cluster, open_refusal
from .names import Stream

#: The whole check gets this long.
CHECK_S: Final = 10.0


async def cluster_report(url: str, access: NatsAccess) -> tuple[str, bool]:
    """The report's text, and whether the cluster is ready for gateways and workers (a
    server that lets anyone in is not, unless `access.insecure`: then a warning)."""
    lines = [f"cluster {url}:"]
    ok = True
    with trio.move_on_after(CHECK_S) as timer:
        try:
            # Connected even to an open server, to say so and what else is wrong.
            looking = attrs.evolve(access, insecure=True)
            async with open_cluster(url, "mcpx-hooks doctor", looking) as cluster:
                lines.append("  ok       server    reachable")
                if not cluster.open_to_anyone:
                    lines.append("  ok       access    credentials required")
                elif access.insecure:
                    lines.append(f"  WARNING  access    {INSECURE_WARNING}")
                else:
                    ok = False
                    lines.append(f"  OPEN     access    {open_refusal(url)}")
                if not await cluster.jetstream_on():
                    lines.append("  MISSING  jetstream not enabled: start nats-server with -js")
                    return "\n".join(lines), False
                lines.append("  ok       jetstream on")
                for stream in Stream:
                    state = await cluster.stream_state(stream)
                    if state is None:
                        ok = False
                        lines.append(
                            f"  MISSING  {stream.value:18} not created yet (the first gateway"
                            " or worker creates it)"
                        )
                    else:
                        count, first, last = state
                        # (An empty stream's first seq is past its last: `seq 3..2`.)
                        held = f"{count} message(s), seq {first}..{last}" if count else "empty"
                        lines.append(f"  ok       {stream.value:18} {held}")
                keys = _keys_line(await ask_parts(cluster))
                ok = ok and not keys.startswith("  KEYS")
                lines.append(keys)
        except ClusterDown as exc:
            lines.append(f"  DOWN     {' '.join(str(exc).split())}")  # one line, whatever it said
            ok = False
    if timer.cancelled_caught:
        lines.append(f"  DOWN     no answer within {CHECK_S:g} s")
        ok = False
    return "\n".join(lines), ok


def _keys_line(groups: list[list[str]]) -> str:
    """What the parts' answers to a key check say (`keycheck.ask_parts`), in one line."""
    answered = [part for group in groups for part in group]
    if not answered:
        return (
            "  ok       parts     none answered the key check (none running, or this NATS"
            " user may not use mcpx.keycheck.>)"
        )
    if len(groups) == 1:
        return f"  ok       parts     {len(answered)} answered ({kinds(answered)}), one cluster key"
    held = "; ".join(f"{len(group)} ({kinds(group)})" for group in groups)
    return (
        f"  KEYS     parts     {len(answered)} answered, holding {len(groups)} different"
        f" cluster keys: {held}; give every part the same --cluster-key-file"
    )
