"""The isolation mechanisms by name, and `MCPX_HOOKS_HIDE`, which hides some from detection:
the one table the spawner (`mechanisms.py`) and the supervisor share.

Standard library only, and pure: the supervisor imports it (`supervisor/process/sandbox.py`
says what each mechanism enforces and how to get it, by these names).
"""

from __future__ import annotations

import os

#: Every mechanism, in the order the spawner's report and `doctor` list them.
NAMES = ("pidns", "mountns", "netns", "landlock", "seccomp", "uid")
#: Comma-separated names hidden from detection, as if the kernel lacked them: a test proves
#: with it that a profile needing one fails rather than running with less. `userns` (not a
#: mechanism of its own) hides user namespaces from a spawner that is not root.
HIDE_ENV = "MCPX_HOOKS_HIDE"


#: What else `HIDE_ENV` may name: parts a machine may lack that are no mechanism of their own,
#: each hidden where it is looked for, and what a machine without it does.
OTHER_PARTS: dict[str, str] = {
    "userns": "an ordinary user's spawner makes no user namespace (keeper mode)",
    "chain": "children are started by a fork of the spawner, as off x86_64",
    "memcg": "no memory cgroup per tree: the memory bound falls back to limits",
    "reaper": "each hook is the first process of its own PID namespace",
}
#: Every name `HIDE_ENV` may hold.
HIDEABLE = (*NAMES, *OTHER_PARTS)


def unknown_hidden() -> list[str]:
    """The names in `HIDE_ENV` that are nothing it can hide (a typo hides nothing)."""
    return sorted(hidden().difference(HIDEABLE))


def hidden() -> frozenset[str]:
    """The names `HIDE_ENV` hides now (read at each call)."""
    return frozenset(n.strip() for n in os.environ.get(HIDE_ENV, "").split(",") if n.strip())
