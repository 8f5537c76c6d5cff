"""A `Limits` as the resource limits a child is started with, bounded by this process's own.

`core/limits.py` holds the values; this module asks the kernel for the supervisor's hard
limits, which is why it lives beside the spawner and not in the pure core.
"""

from __future__ import annotations

import functools
import resource

from ..core.limits import LIMIT_KEYS, Limits

#: `(RLIMIT_NAME, soft, hard)`, as a `ChildSpec` carries them to the spawner.
Rlimits = tuple[tuple[str, int, int], ...]


def child_rlimits(limits: Limits, *, hard: bool) -> Rlimits:
    """`(RLIMIT_NAME, soft, hard)` for each limit that is a resource limit, and no core dumps.

    A value above this process's own hard limit is lowered to it (a child cannot be given
    more). `hard=False` keeps this process's hard limits (the `none` profile: nothing then
    stops the hook from raising them back)."""
    out = []
    for _key, attr, name, unit in LIMIT_KEYS:
        if name is None:
            continue
        value = getattr(limits, attr) * unit
        own = _own_hard_limit(name)
        soft = value if own == resource.RLIM_INFINITY else min(value, own)
        out.append((name, soft, soft if hard else own))
    out.append(("RLIMIT_CORE", 0, 0 if hard else _own_hard_limit("RLIMIT_CORE")))
    return tuple(out)


@functools.cache
def _own_hard_limit(name: str) -> int:
    """This process's hard limit `name`, read once: the supervisor never changes its hard
    limits (`launch.raise_open_files_limit` raises a soft one), so each hook need not ask."""
    return resource.getrlimit(getattr(resource, name))[1]
