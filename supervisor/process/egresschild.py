"""A child's egress by name (a process hook's, a tool server's): its lease on the supervisor's
proxy and what its child is started with for it.

A child with a `network` list under `strict` or `workspace` keeps its empty network: it gets
a network namespace of its own with only `lo` up, where the spawner listens on the loopback
port the proxy variables name and hands the socket to its lease (`runners/loopback.py`,
`Lease.serve`): nothing runs beside the child, and its argv is its own. Under `net` (the
host's network) and `none` the list has nothing to narrow and no lease is taken.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Final

import attrs

from ..core import egress
from ..core.frames import blank
from ..core.hooks import Profile
from .egress import Lease
from .spawner import Spawner
from .spawnspec import ChildSpec

if TYPE_CHECKING:
    from ..core.hookframes import EgressFrame

#: The run's CA certificate in the child's scratch directory (its key is never written).
CA_FILE: Final = "mcpx-egress-ca.pem"
#: The profiles whose empty network a `network` list opens to the proxy.
CONFINED: Final = frozenset({Profile.STRICT, Profile.WORKSPACE})


def open_egress(
    spawner: Spawner, network: tuple[str, ...] | None, profile: Profile
) -> contextlib.AbstractAsyncContextManager[Lease | None]:
    """A child's lease on the proxy while the block runs (None: it takes none). Most
    children take none: for them a context that does nothing, not a generator's."""
    if network is None or profile not in CONFINED:
        return _NO_LEASE
    return _leased(spawner, network)


@contextlib.asynccontextmanager
async def _leased(spawner: Spawner, network: tuple[str, ...]) -> AsyncIterator[Lease]:
    async with spawner.egress.open_lease(network) as lease:
        yield lease


_NO_LEASE: Final = contextlib.nullcontext(None)


def egress_spec(
    spec: ChildSpec, lease: Lease | None, secret_hosts: Mapping[str, tuple[str, ...]]
) -> ChildSpec:
    """`spec` with a loopback of its own whose proxy socket the lease serves, and the proxy
    variables set (run cold: a warm fork has no namespace of its own to listen in); each
    secret with hosts a placeholder, and the run's CA, written in its scratch, the one it
    trusts."""
    if lease is None and not any(name in spec.env for name in secret_hosts):
        return spec  # (most children: nothing to change, no copy of the environment)
    env = dict(spec.env)
    for name, hosts in secret_hosts.items():  # never the value, even where none can swap it
        if name in env:
            value = env[name]
            env[name] = (
                egress.placeholder(name, secrets.token_hex(8))
                if lease is None
                else lease.add_secret(name, value, hosts)
            )
    if lease is None or spec.sandbox is None:
        return attrs.evolve(spec, env=env)
    plan = attrs.evolve(spec.sandbox, egress=True)
    env |= lease.environment()
    if lease.ca is not None:
        ca_file = os.path.join(spec.sandbox.scratch, CA_FILE)
        with open(ca_file, "wb") as out:
            out.write(lease.ca.pem)
        env |= {name: ca_file for name in egress.CA_VARIABLES}
    return attrs.evolve(spec, env=env, sandbox=plan, module=None, on_listener=lease.serve)


def refusals(lease: Lease | None) -> tuple[tuple[str, int], ...]:
    """The hosts (and the first port asked of each) the proxy refused the lease's child."""
    return () if lease is None else tuple(lease.refused.items())


def refusal_frames(lease: Lease | None, run_id: str, said: egress.HostsSaid) -> list[EgressFrame]:
    """The `egress` frames of the hosts the proxy refused a run's script that no frame of the
    run has named yet (`said`, which takes them in, as many as it may)."""
    refused = [(h, p) for h, p in refusals(lease) if said.take(h)]
    said.unsaid += 0 if lease is None else lease.unkept
    if not refused:
        return []
    from ..core.hookframes import EgressFrame  # (a run without refusals never builds it)

    assert lease is not None  # (refused: there is one)
    return [
        blank(EgressFrame, host=h, port=p, run=run_id, why=refusal(h, p, lease, SCRIPT_LIST))
        for h, p in refused
    ]


#: Where a run's script's list is declared, for what its refusals say.
SCRIPT_LIST: Final = "[script] network (or exec --network, a request's network)"


def refusal(host: str, port: int, lease: Lease, declared: str) -> str:
    """What an `egress` frame says of `host`, refused the lease's child (`core/egress.py`)."""
    return egress.refusal(host, port, lease.notes.get(host), declared)
