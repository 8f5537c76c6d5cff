"""Sandbox profiles (SPEC §5): what each one needs, which mechanism enforces it here, and the
plan a child is started with.

Pure apart from reading this interpreter's paths; the spawner (`runners/mechanisms.py`) probes
the mechanisms at its start and `Spawner.mechanisms` holds what it found. `plan()` turns a
profile into a `ChildSpec`'s `rlimits` and `sandbox`, or raises `SandboxUnavailable` naming what
is missing and how to get it: a profile is never run with less than it asks for.

| profile | mechanisms |
| --- | --- |
| `strict` | pidns, mountns, netns, landlock, seccomp, uid (root), rlimits |
| `net` | the same without netns (and Landlock and seccomp let the network be) |
| `none` | rlimits (soft), own session and process group, scrubbed environment |
"""

from __future__ import annotations

import functools
import os
import site
import sys
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from .errors import SandboxUnavailable
from .hooks import Profile
from .limits import DEFAULT_LIMITS, MB, Limits
from .spawn import HIDE_ENV, SandboxPlan, Spawner, runner_path


@attrs.frozen
class Mechanism:
    name: str
    enforces: str
    #: How to get it where the supervisor is root, and where it is an ordinary user.
    as_root: str
    as_user: str

    @property
    def how_to_get(self) -> str:
        """How to get it, for this supervisor: root or an ordinary user."""
        return self.as_root if os.geteuid() == 0 else self.as_user


#: Every isolation mechanism, in the order `doctor` lists them.
MECHANISMS: Final[tuple[Mechanism, ...]] = (
    Mechanism(
        "pidns",
        "own PID namespace per child: its whole tree dies with it and with the supervisor",
        "CAP_SYS_ADMIN and unshare(CLONE_NEWPID), which a container may withhold from root",
        # (`runners/userns.py`: the spawner of an ordinary user makes one of its own)
        "user namespaces for this user (where kernel.unprivileged_userns_clone, user."
        "max_user_namespaces or kernel.apparmor_restrict_unprivileged_userns refuses them, "
        "the reason says which and how to allow them), or a supervisor run as root",
    ),
    Mechanism(
        "mountns",
        "own mount namespace: read-only mount tree, size-limited tmpfs scratch, directories "
        "the hook's user cannot reach covered",
        "Linux >= 5.12 (mount_setattr) and CAP_SYS_ADMIN, with pidns",
        "Linux >= 5.12 (mount_setattr), with pidns",
    ),
    Mechanism(
        "netns",
        "an empty network namespace: no interface, no route (strict only)",
        "a kernel with CONFIG_NET_NS, with pidns",
        "a kernel with CONFIG_NET_NS, with pidns",
    ),
    Mechanism(
        "landlock",
        "filesystem allowlist; no TCP bind/connect (strict, ABI 4+); scoped signals and "
        "abstract Unix sockets (ABI 6+)",
        "Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK and `landlock` in the lsm= boot list",
        "Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK and `landlock` in the lsm= boot list",
    ),
    Mechanism(
        "seccomp",
        "deny list: ptrace, mounts, namespaces, keyrings, bpf, raising limits; sockets "
        "(strict, netlink only)",
        "a kernel with CONFIG_SECCOMP_FILTER, on x86_64 or aarch64",
        "a kernel with CONFIG_SECCOMP_FILTER, on x86_64 or aarch64",
    ),
    Mechanism(
        "uid",
        "a per-child unprivileged uid and gid: RLIMIT_NPROC holds, the host's DAC applies",
        "it is root's to give: if missing, it is hidden (MCPX_HOOKS_HIDE)",
        "nothing: only root has uids to give, and a profile does not ask an ordinary user "
        "for one (hooks run as this user, each in a user namespace of its own)",
    ),
)
_BY_NAME: Final = {m.name: m for m in MECHANISMS}

#: What each profile needs besides resource limits.
NEEDS: Final[Mapping[Profile, tuple[str, ...]]] = {
    Profile.STRICT: ("pidns", "mountns", "netns", "landlock", "seccomp", "uid"),
    Profile.NET: ("pidns", "mountns", "landlock", "seccomp", "uid"),
    Profile.NONE: (),
}

#: Read-only under strict and net: the system (SPEC §5).
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Devices a confined child may open for reading and writing.
DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def hidden() -> frozenset[str]:
    """Mechanisms hidden from detection by `MCPX_HOOKS_HIDE` (read at each call)."""
    return frozenset(n.strip() for n in os.environ.get(HIDE_ENV, "").split(",") if n.strip())


def needs(profile: Profile) -> tuple[str, ...]:
    """What `profile` needs on this machine: `uid` only when the supervisor is root."""
    return tuple(n for n in NEEDS[profile] if n != "uid" or os.geteuid() == 0)


def missing(profile: Profile, spawner: Spawner) -> dict[str, str]:
    """The mechanisms `profile` needs that are not there, with why."""
    wanted = needs(profile)
    if not wanted:  # `none`: not even the environment to read (about 30 us a hook)
        return {}
    hide = hidden()
    found: dict[str, str] = {}
    for name in wanted:
        state = spawner.mechanisms.get(name, "not reported by the spawner")
        if name in hide:
            state = f"hidden by {HIDE_ENV}"
        if state is not True:
            found[name] = str(state)
    return found


def require(profile: Profile, spawner: Spawner) -> None:
    """Returns if `profile` can be enforced here; raises `SandboxUnavailable` saying what is
    missing and how to get it."""
    lacking = missing(profile, spawner)
    if lacking:
        parts = "; ".join(
            f"{name}: {why} (to get it: {_BY_NAME[name].how_to_get})"
            for name, why in lacking.items()
        )
        raise SandboxUnavailable(
            f'sandbox "{profile}" cannot be enforced on this machine: missing {parts}. '
            'Declare sandbox = "none" (in the hook, the run or [defaults]) to run without '
            "isolation; `mcpx-hooks doctor` says more"
        )


def plan(
    profile: Profile,
    spawner: Spawner,
    *,
    scratch: str,
    dirs: Iterable[str],
    limits: Limits = DEFAULT_LIMITS,
    return_scratch: bool = False,
) -> tuple[tuple[tuple[str, int, int], ...], SandboxPlan | None]:
    """The `rlimits` and `sandbox` of a `ChildSpec` under `profile`.

    `dirs`: the declaring directory and working directory, readable under strict and net.
    `return_scratch`: the child's scratch tmpfs is copied back to `scratch` once its tree is
    gone (a run's artifacts). Raises `SandboxUnavailable` (see `require`).
    """
    require(profile, spawner)
    if profile is Profile.NONE:
        return limits.rlimits(hard=False), None
    read = (*SYSTEM_DIRS, *python_dirs(), *(os.path.abspath(d) for d in dirs))
    sandbox = SandboxPlan(
        read=tuple(dict.fromkeys(read)),
        scratch=scratch,
        scratch_bytes=limits.scratch_mb * MB,
        net=profile is Profile.NET,
        devices=DEVICES,
        return_scratch=return_scratch,
        switch_uid=os.geteuid() == 0,
    )
    return limits.rlimits(hard=True), sandbox


@functools.cache
def python_dirs() -> tuple[str, ...]:
    """The Python in use: its prefixes, its site-packages, the runner files, and where the
    interpreter's executable really is."""
    found = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        *site.getsitepackages(),
        os.path.dirname(runner_path("spawner.py")),
        os.path.dirname(os.path.realpath(sys.executable)),
    ]
    return tuple(dict.fromkeys(os.path.realpath(p) for p in found))


def enforced_by(profile: Profile) -> tuple[str, ...]:
    """The mechanisms that enforce `profile` (for `doctor` and docs)."""
    return (*needs(profile), "rlimits")
