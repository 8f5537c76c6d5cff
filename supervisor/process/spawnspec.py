"""What a child is started with (`ChildSpec`, its `SandboxPlan` and `ModuleCall`), and the
spawn request the spawner gets for one (`spawn_request`).

Pure data: no trio, no I/O. The spawner's side of the request is `runners/spawnreq.py`, which
checks every field of it; `runners/spawner.py` has the protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..core.records import Record


@attrs.frozen(repr=False, eq=False)
class SandboxPlan(Record):
    """How the spawner confines a child (profiles strict and net; `sandbox.py` makes these).

    `read`: paths readable (and executable) beneath; `write`: paths readable and writable
    beneath (the workspace, `[sandbox] write`); `mapped`: those of `read` and `write` whose
    owner's access the hook gets whatever their mode bits say (an idmapped mount, see
    docs/sandbox.md); `devices`: device files readable and writable; `scratch`: a writable
    directory, a tmpfs of `scratch_bytes` in the child's view, seeded with what the directory
    holds; `return_scratch`: copied back to it once the tree is gone (a script's artifacts);
    `net`: keep the host network; `switch_uid`: run as a per-child unprivileged user (the
    supervisor is root); `memory_bytes`: the bound on all the memory the child's tree may
    pin (`runners/memcg.py`; 0: none).
    """

    read: tuple[str, ...]
    scratch: str
    scratch_bytes: int
    net: bool = False
    devices: tuple[str, ...] = ()
    return_scratch: bool = False
    switch_uid: bool = True
    write: tuple[str, ...] = ()
    mapped: tuple[str, ...] = ()
    #: Paths covered in the view (never granted: `denied.py`), and paths in a writable grant
    #: bound read-only over themselves.
    deny: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    #: The supervisor's homes that hold a grant: each covered in the view, showing only
    #: what is granted in it (`denied.hidden_homes`).
    hide: tuple[str, ...] = ()
    memory_bytes: int = 0
    #: A network namespace of its own with only `lo` up, where the spawner opens the proxy's
    #: listening socket for it (`process/egress.py`); sockets allowed as under `net`.
    egress: bool = False
    #: The supervisor's alone, never sent: each `[sandbox] deny` path that exists, as
    #: (real path, as named, where declared), for what a refusal says (`programs.py`).
    denied_by: tuple[tuple[str, str, str], ...] = ()


#: The plan's fields the supervisor keeps to itself: never in a spawn request.
NOT_SENT: Final = frozenset({"denied_by"})


def sandbox_fields(plan: SandboxPlan) -> dict[str, Any]:
    """A plan as the spawn request carries it: every key, always (the runner's request
    checks them against its own table, `runners/spawnreq.py`'s `FIELDS`). The spawn
    protocol is the runners' and stays out of the service's converter: the runner side
    reads it with the standard library."""
    return {
        "net": plan.net,
        "read": list(plan.read),
        "devices": list(plan.devices),
        "scratch": plan.scratch,
        "scratchBytes": plan.scratch_bytes,
        "returnScratch": plan.return_scratch,
        "uid": plan.switch_uid,
        "write": list(plan.write),
        "mapped": list(plan.mapped),
        "deny": list(plan.deny),
        "readOnly": list(plan.read_only),
        "hide": list(plan.hide),
        "memoryBytes": plan.memory_bytes,
        "egress": plan.egress,
    }


@attrs.frozen(repr=False, eq=False)
class ModuleCall(Record):
    """A `module` hook to run in a fork of the warm spawner (`runners/warm.py`) rather than
    by starting `ChildSpec.argv`: `spec` is the module runner's MODULE, `path` what it adds to
    `sys.path`."""

    spec: str
    path: tuple[str, ...] = ()


@attrs.frozen(repr=False, eq=False)
class ChildSpec(Record):
    """What to start. `rlimits` are `(RLIMIT_NAME, soft, hard)` applied in the child;
    `sandbox`, when given, confines it (else it runs as the supervisor's user, unconfined).
    `module`, when given, runs warm (`Spawner.warm`); `argv` is then the same hook started
    cold, used where warm runs are turned off."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    rlimits: tuple[tuple[str, int, int], ...] = ()
    sandbox: SandboxPlan | None = None
    module: ModuleCall | None = None
    #: Fds the child reads, each a pipe whose write end is one of `Child.extra`, after
    #: those of `open_child`'s `extra_fds` (a script's calls channel).
    input_fds: tuple[int, ...] = ()
    #: With a sandbox's `egress`: takes the fd of the socket the spawner opened in the
    #: child's network namespace, listening where its proxy variables point, as soon as it
    #: comes (before "started"; `process/egress.py`). Never part of the request.
    on_listener: Callable[[int], None] | None = None


def spawn_request(
    spec: ChildSpec,
    targets: Sequence[int],
    *,
    collect: tuple[int, int] | None = None,
    env_fd: int | None = None,
) -> dict[str, Any]:
    """The JSON request for `spec`: the child's fds go to `targets`, in the order they are
    attached; `collect` (stdout cap, stderr tail) has the spawner collect its output; `env_fd`
    (one of `targets`, the memfd holding `spec.env`) runs its `module` warm, the environment
    going to the child only, never through the spawner."""
    request: dict[str, Any] = {
        "argv": list(spec.argv),
        "cwd": spec.cwd,
        "env": dict(spec.env),
        "rlimits": [list(r) for r in spec.rlimits],
        "fds": list(targets),
        "sandbox": sandbox_fields(spec.sandbox) if spec.sandbox else None,
    }
    if collect:
        request["collect"] = {"stdout": collect[0], "stderr": collect[1]}
    if spec.module is not None and env_fd is not None:
        request["env"] = {}
        request["module"] = {
            "spec": spec.module.spec,
            "path": list(spec.module.path),
            "envFd": env_fd,
        }
    return request
