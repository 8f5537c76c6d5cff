"""Sandbox profiles: what each one needs, which mechanism enforces it here, and the
plan a child is started with.

Pure apart from reading paths; the spawner (`runners/mechanisms.py`) probes the mechanisms at
its start and `Spawner.mechanisms` holds what it found. `plan()` turns a profile into a
`ChildSpec`'s `rlimits` and `sandbox`, or raises `SandboxUnavailable` naming what is missing
and how to get it: a profile is never run with less than it asks for. `check_program()` then
refuses a program the plan cannot see (`ProgramHidden`), before the spawner is asked.

| profile | mechanisms |
| --- | --- |
| `strict` | pidns, mountns, netns, landlock, seccomp, uid (root), rlimits |
| `workspace` | as strict; the working directory writable |
| `net` | the same without netns (and Landlock and seccomp let the network be) |
| `none` | rlimits (soft), own session and process group, scrubbed environment |
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import site
import sys
from collections.abc import Iterable, Mapping
from itertools import zip_longest
from typing import TYPE_CHECKING, Final

import attrs

from ..config.statefiles import state_home
from ..core.errors import ProfileUnavailable
from ..core.hooks import Profile, SandboxPaths
from ..core.limits import DEFAULT_LIMITS, MB, Limits
from ..core.records import Record
from .denied import deny_and_protect, hidden_homes
from .rlimits import Rlimits, child_rlimits
from .runnerside import isolation, runner_path
from .scratch import scratch_root
from .spawnspec import SandboxPlan

if TYPE_CHECKING:
    from .spawner import Spawner

NO_PATHS: Final = SandboxPaths()


@attrs.frozen(repr=False, eq=False)
class Mechanism(Record):
    name: str
    enforces: str
    #: How to get it where the supervisor is root, and where it is an ordinary user.
    as_root: str
    as_user: str

    @property
    def how_to_get(self) -> str:
        """How to get it, for this supervisor: root or an ordinary user."""
        return self.as_root if os.geteuid() == 0 else self.as_user


#: How to get Landlock (as root and as an ordinary user alike).
LANDLOCK_HOW: Final = (
    "Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK and `landlock` in the lsm= boot list, and, "
    "in a container, a policy that allows the landlock_* system calls"
)
#: How to get seccomp (as root and as an ordinary user alike).
SECCOMP_HOW: Final = (
    "a kernel with CONFIG_SECCOMP_FILTER, on x86_64 or aarch64, and, in a container, a "
    "policy that lets a process install filters of its own"
)
#: What each isolation mechanism enforces, and how to get it as root and as an ordinary user,
#: by name (`runners/isolation.py` names them, in the order `doctor` lists them).
_ABOUT: Final[Mapping[str, tuple[str, str, str]]] = {
    "pidns": (
        "own PID namespace per child: its whole tree dies with it and with the supervisor",
        "CAP_SYS_ADMIN and unshare(CLONE_NEWPID), which a container may withhold from root",
        # (`runners/userns.py`: the spawner of an ordinary user makes one of its own)
        "user namespaces for this user (where kernel.unprivileged_userns_clone, user."
        "max_user_namespaces or kernel.apparmor_restrict_unprivileged_userns refuses them, "
        "the reason says which and how to allow them), or a supervisor run as root",
    ),
    "mountns": (
        "own mount namespace: read-only mount tree, size-limited tmpfs scratch, directories "
        "the hook's user cannot reach covered",
        "Linux >= 5.12 (mount_setattr) and CAP_SYS_ADMIN, with pidns",
        "Linux >= 5.12 (mount_setattr), with pidns",
    ),
    "netns": (
        "an empty network namespace: no interface, no route (strict only)",
        "a kernel with CONFIG_NET_NS, with pidns",
        "a kernel with CONFIG_NET_NS, with pidns",
    ),
    "landlock": (
        "filesystem allowlist; no TCP bind/connect (strict, ABI 4+); scoped signals and "
        "abstract Unix sockets (ABI 6+)",
        LANDLOCK_HOW,
        LANDLOCK_HOW,
    ),
    "seccomp": (
        "deny list: ptrace, mounts, namespaces, keyrings, bpf, raising limits; sockets "
        "(strict: netlink only; with network: netlink, IPv4, IPv6)",
        SECCOMP_HOW,
        SECCOMP_HOW,
    ),
    "uid": (
        "a per-child unprivileged uid and gid: RLIMIT_NPROC holds, the host's DAC applies",
        "it is root's to give: if missing, it is hidden (MCPX_HOOKS_HIDE)",
        "nothing: only root has uids to give, and a profile does not ask an ordinary user "
        "for one (hooks run as this user, each in a user namespace of its own)",
    ),
}
#: Every isolation mechanism, in the order `doctor` lists them.
MECHANISMS: Final = tuple(Mechanism(name, *_ABOUT[name]) for name in isolation.NAMES)
_BY_NAME: Final = {m.name: m for m in MECHANISMS}

#: What each profile needs besides resource limits.
NEEDS: Final[Mapping[Profile, tuple[str, ...]]] = {
    Profile.STRICT: ("pidns", "mountns", "netns", "landlock", "seccomp", "uid"),
    Profile.WORKSPACE: ("pidns", "mountns", "netns", "landlock", "seccomp", "uid"),
    Profile.NET: ("pidns", "mountns", "landlock", "seccomp", "uid"),
    Profile.NONE: (),
}

#: Read-only under strict and net: the system.
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Devices a confined child may open for reading and writing.
DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def hidden() -> frozenset[str]:
    """Mechanisms hidden from detection by `MCPX_HOOKS_HIDE` (read at each call)."""
    return isolation.hidden()


#: Every name `MCPX_HOOKS_HIDE` may hold (`runners/isolation.py`), and the names in it now
#: that are none of those.
HIDEABLE = isolation.HIDEABLE
unknown_hidden = isolation.unknown_hidden


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
            state = f"hidden by {isolation.HIDE_ENV}"
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
        raise ProfileUnavailable(
            profile.value,
            f'sandbox "{profile}" cannot be enforced on this machine: missing {parts}. '
            'Declare sandbox = "none" (in the hook, the run or [defaults]) to run without '
            "isolation; `mcpx-hooks doctor` says more",
        )


def plan(
    profile: Profile,
    spawner: Spawner,
    *,
    scratch: str,
    dirs: Iterable[str],
    workdir: str | None = None,
    granted: Iterable[str] | None = None,
    paths: SandboxPaths = NO_PATHS,
    limits: Limits = DEFAULT_LIMITS,
    return_scratch: bool = False,
    own: Iterable[tuple[str, bool]] = (),
) -> tuple[tuple[tuple[str, int, int], ...], SandboxPlan | None]:
    """The `rlimits` and `sandbox` of a `ChildSpec` under `profile`.

    `dirs`: the declaring directory and working directory, readable under every profile but
    none; `workdir`: the working directory, writable under workspace; `paths`: the config's
    `[sandbox] read` and `write`. `granted`: those of `dirs` the operator granted (default:
    all), which with `paths` are the grants: where the supervisor is root, each grant's owner
    is mapped onto the hook's user (`mapped`, see `mappable`), so its mode bits do not stop
    the hook; a directory named by someone else (a service client's `cwd`) is read with its
    mode bits only. `return_scratch`: the child's scratch tmpfs is copied back to `scratch`
    once its tree is gone (a run's artifacts). `own`: directories of the supervisor's own
    that it grants itself, (path, writable), inside the state directory no other grant
    reaches (a tool server's package cache, `tools/packages.py`). Raises
    `SandboxUnavailable` (see `require`).
    """
    require(profile, spawner)
    if profile is Profile.NONE:
        return child_rlimits(limits, hard=False), None
    realpath = functools.cache(real_path)  # (each path resolved once per plan)
    real = [realpath(d) for d in dirs]
    write = [realpath(p) for p in paths.write]
    if profile is Profile.WORKSPACE and workdir is not None:
        write.insert(0, realpath(workdir))
    write = list(dict.fromkeys(write))
    extra = [realpath(p) for p in paths.read]
    read = [
        p for p in dict.fromkeys((*system_dirs(), *python_dirs(), *real, *extra)) if p not in write
    ]
    # What is never granted, whatever the grants say (`denied.py`).
    read, write, deny, read_only = deny_and_protect(read, write, paths.deny, realpath)
    own = tuple((realpath(path), writable) for path, writable in own)
    for path, writable in own:  # (granted past the deny: the supervisor's own choice)
        (write if writable else read).append(path)
    switch_uid = os.geteuid() == 0
    vouched = {
        *(real if granted is None else (realpath(d) for d in granted)),
        *extra,
        *(realpath(p) for p in paths.write),
        *(path for path, _ in own),
    }
    mapped: tuple[str, ...] = ()
    if switch_uid:  # (rootless, the hook's uid is the caller's own: nothing to map)
        mine = _supervisor_dirs()
        mapped = tuple(p for p in (*write, *read) if p in vouched and mappable(p, mine) is None)
    memory = limits.memory_mb * MB
    rlimits = child_rlimits(limits, hard=True)
    scratch_bytes = limits.scratch_mb * MB
    if not memory_cgroup(spawner):  # each process, and the scratch tmpfs, within the bound
        rlimits = as_address_space(rlimits)
        scratch_bytes = min(scratch_bytes, memory)
    sandbox = SandboxPlan(
        read=tuple(read),
        write=tuple(write),
        mapped=mapped,
        deny=deny,
        read_only=read_only,
        hide=hidden_homes((*read, *write)),
        scratch=scratch,
        scratch_bytes=scratch_bytes,
        net=profile is Profile.NET,
        devices=DEVICES,
        return_scratch=return_scratch,
        switch_uid=switch_uid,
        memory_bytes=memory,
        # (resolved already, by `deny_and_protect`; a path that is not there holds nothing)
        denied_by=tuple(
            (realpath(p), p, at) for p, at in zip_longest(paths.deny, paths.deny_at, fillvalue="")
        ),
    )
    return rlimits, sandbox


def memory_cgroup(spawner: Spawner) -> bool:
    """Whether the spawner bounds a sandboxed tree's memory with a cgroup of its own (else
    the fallback: `RLIMIT_AS`, a scratch no larger than the bound, shm limits, no memfd;
    `runners/memcg.py`)."""
    return spawner.memory.get("by") == "cgroup"


def memory_bound(spawner: Spawner) -> str:
    """What bounds a sandboxed tree's memory here, and why, for `doctor`."""
    found = spawner.memory
    if found.get("by") == "cgroup":
        return f"a memory cgroup per tree (cgroup v{found.get('version')} at {found.get('path')})"
    why = found.get("why") or "the spawner did not say"
    return (
        "no cgroup (" + str(why) + "): RLIMIT_AS per process, the scratch tmpfs no larger than "
        "memoryMb, the IPC namespace's shmmax/shmall at memoryMb, memfd_create refused"
    )


def as_address_space(rlimits: Rlimits) -> Rlimits:
    """`rlimits` with the memory limit on the address space (`RLIMIT_AS`: shared mappings
    count) rather than the data segment."""
    return tuple(("RLIMIT_AS" if n == "RLIMIT_DATA" else n, s, h) for n, s, h in rlimits)


#: Trees whose owner is never mapped onto a hook's user, and that no grant may hold: the
#: system, the kernel's and the devices' pseudo-filesystems, the running system's state.
UNMAPPED_TREES: Final = (*SYSTEM_DIRS, "/proc", "/sys", "/dev", "/run", "/var/run", "/boot")
#: The same as prefixes (`mappable` asks them all in one call: it runs for every plan).
_UNMAPPED_PREFIXES: Final = tuple(t.rstrip("/") + "/" for t in UNMAPPED_TREES)


def mappable(path: str, mine: list[tuple[str, str]] | None = None) -> str | None:
    """Why the owner of the grant `path` (absolute, real) is not mapped onto the hook's user,
    or None when it is. Not mapped: `/`, a grant that is, holds or lies in one of
    `UNMAPPED_TREES`, one that is or holds the supervisor's home, its state directory (the
    service's token, the trust list) or the scratch root (other hooks' scratch directories).
    Such a grant is still readable (writable), through its mode bits only. `mine`: the
    supervisor's directories, when the caller has them already."""
    if path == "/":
        return "it is the root directory"
    inside = path.rstrip("/") + "/"
    if (path + "/").startswith(_UNMAPPED_PREFIXES) or any(
        t.startswith(inside) for t in UNMAPPED_TREES
    ):
        tree = next(t for t in UNMAPPED_TREES if under(path, [t]) or under(t, [path]))
        return f"it is, holds or lies in the system directory {tree}"
    for what, own in _supervisor_dirs() if mine is None else mine:
        if under(own, [path]):
            return f"it holds the supervisor's {what} {own}"
    return None


def _supervisor_dirs() -> list[tuple[str, str]]:
    """The supervisor's own directories a grant may not hold, by what they are."""
    found = [("scratch root", real_path(scratch_root()))]
    homes = {os.path.expanduser("~")}
    with contextlib.suppress(KeyError):
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    found += [("home", real_path(h)) for h in homes if os.path.isabs(h)]
    state = state_home(os.environ)
    if state is not None:
        found.append(("state directory", real_path(str(state / "mcpx-hooks"))))
    return found


def under(path: str, roots: Iterable[str]) -> bool:
    """Whether `path` is one of `roots` or lies beneath one (normal absolute paths)."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def real_path(path: str) -> str:
    """`os.path.realpath(path)`, asked of the kernel where `path` exists (an `O_PATH` open and
    a readlink of its fd: three system calls, not a `lstat` per component)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        found = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        found = ""
    finally:
        os.close(fd)
    if found.startswith("/") and not found.endswith(" (deleted)"):
        return found
    return os.path.realpath(path)


@functools.cache
def system_dirs() -> tuple[str, ...]:
    """`SYSTEM_DIRS` as a sandboxed child's rules need them: those that exist, but a link
    into another (`/bin` -> `usr/bin` on a merged `/usr`): what a link leads to is read
    already, and Landlock checks the file a path leads to, not the links on the way. Looked
    at once per process: how the system's directories are laid out does not change under
    a running supervisor."""
    kept = [d for d in SYSTEM_DIRS if os.path.isdir(d)]
    return tuple(
        d
        for d in kept
        if not (os.path.islink(d) and under(os.path.realpath(d), [k for k in kept if k != d]))
    )


@functools.cache
def python_dirs() -> tuple[str, ...]:
    """The Python in use: its prefixes, its site-packages, the runner files, and where the
    interpreter's executable really is; but those in a system directory (which every
    sandboxed child reads already) or in another of them: a rule of their own, or a bind in
    a cover, would add nothing."""
    found = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        *site.getsitepackages(),
        os.path.dirname(runner_path("spawner.py")),
        os.path.dirname(os.path.realpath(sys.executable)),
    ]
    real = list(dict.fromkeys(os.path.realpath(p) for p in found))
    return tuple(
        p
        for p in real
        if not under(p, SYSTEM_DIRS) and not any(p != q and under(p, [q]) for q in real)
    )


def enforced_by(profile: Profile) -> tuple[str, ...]:
    """The mechanisms that enforce `profile` (for `doctor` and docs)."""
    return (*needs(profile), "rlimits")
