"""A child started without a fork of the spawner: a sandboxed child's seal as a `Chain`.

Standard library only. A sandboxed child's seal (its uid or its own user namespace,
`no_new_privs`, Landlock, seccomp) acts on the calling thread for good, so the spawner either
gives each child a thread of its own (`jail.py`) or lets the child seal itself. Here the
child is `clone`d sharing the spawner's memory (`chain.py`), a process of its own, and makes,
as raw system calls, what a fork or a jail thread made in Python, in the same order:

0. where asked, the empty network namespace and IPC and UTS namespaces of its own
   (`enter_net`, `unshare`: it can while it still has the spawner's capabilities, which its
   own user namespace or its uid then leaves behind);
1. rootless: its own user namespace and its maps (`setgroups` denied, the caller's uid and
   gid to themselves), through the writable /proc of the jail's mount namespace (a thread
   of a process with others cannot make one: `unshare` refuses it; so that its processes
   limit counts its own tree, `userns.py`). Root (`Root`): SysV shared memory bounded in
   its IPC namespace where no memory cgroup does it (`memcg.SHM_LIMITS`, through that
   writable /proc), then its memory cgroup joined (one write of "0" to its `tasks`);
2. its own session; the signals of `DEFAULT_SIGNALS` and every one this process handles
   back to the default;
3. its fds at their numbers;
4. every resource limit, soft and hard (rootless, `RLIMIT_NPROC` counted in its own
   namespace);
5. rootless: no capability left in its namespace (`userns.drop_capabilities`); root: the
   per-child uid and gid, no supplementary groups (every capability goes with uid 0), and
   the check that this uid can read its working directory; then `no_new_privs`, its
   Landlock ruleset, the seccomp filter;
6. an empty signal mask, then `execve`.
The isolation is the fork's or the jail thread's, step for step; only who carries it out
differs.

An unsandboxed child whose limits the spawner cannot lend it (`borrowing.py`: rootless, a
hard limit cannot be lent back) takes steps 2, 3, 4 and 6 the same way, from the spawner's
own thread.
"""

from __future__ import annotations

import functools
import os
import signal
import struct
from typing import TYPE_CHECKING, NamedTuple

from . import memcg, seccomp
from .chain import ARG0_SAVED, MAY_FAIL, SAVE, Chain, ChainError
from .libc import (
    AT_FDCWD,
    CLONE_FILES,
    CLONE_NEWNET,
    CLONE_NEWUSER,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_SECCOMP,
    PR_SET_SECUREBITS,
    nr,
)
from .start import DEFAULT_SIGNALS, StartError, quoted, start_failed
from .userns import CAPSET_V3, SECUREBITS

if TYPE_CHECKING:
    from .spawnreq import Request

_F_SETFD = 2
#: `close_range` to the last fd there can be, giving the child a table of its own first.
_EVERY_FD = 0xFFFFFFFF
_CLOSE_RANGE_UNSHARE = 0x2
_SIG_SETMASK = 2
_SIGSET_BYTES = 8
#: `struct sigaction` as the kernel reads it, all zero: SIG_DFL, no flags, an empty mask.
_DEFAULT_ACTION = bytes(32)


def _last_capability() -> int | None:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


#: The highest capability this kernel has (None: unknown, every one up to 63 is tried).
LAST_CAPABILITY = _last_capability()
#: The `what` of step 5's check that the hook's uid can read its working directory.
CWD_CHECK = "working directory"


class Root(NamedTuple):
    """Root's part of a child's seal (steps 1 and 5): `uid` (its gid too), `cwd` (the working
    directory it must be able to read), `tasks` (an fd of its memory cgroup's `tasks`, or
    None), `shm_bytes` (SysV shared memory bound of its IPC namespace, 0 for none)."""

    uid: int
    cwd: str
    tasks: int | None = None
    shm_bytes: int = 0


def start(
    req: Request,
    program: str,
    *,
    limits: list[tuple[int, int, int]],
    ruleset_fd: int | None = None,
    sockets: str = "net",
    enter_net: int | None = None,
    unshare: int = 0,
    no_memfd: bool = False,
    root: Root | None = None,
    small: tuple[int, list[tuple[int, int]]] | None = None,
) -> int:
    """Starts `program` for `req` with `limits` (soft and hard); its pid. With `ruleset_fd`
    a sandboxed child: its Landlock ruleset `ruleset_fd`, the seccomp filter of `sockets`;
    first, `enter_net`, a network namespace the child enters, and `unshare`, namespaces it
    makes, which it can only while it has this process's capabilities; `no_memfd`, memory
    bounded without a cgroup: the filter refuses `memfd_create` (and rootless, creating
    SysV shared memory), `memcg.py`; `root`: root's per-child uid and the rest of `Root`,
    else (rootless) its own user namespace. Without `ruleset_fd`, steps 2, 3, 4 and 6 only:
    an unsandboxed child whose limits this process cannot lend it (`borrowing.py`), without
    a fork either. Raises `StartError`; a working directory the hook's uid cannot read
    raises `ChainError` (`what` `CWD_CHECK`), for the caller to say why. `small`: the
    child shares this process's fd table (`CLONE_FILES`), keeps of it only the fds below
    the bound given (`fdslots.py`) once its namespaces and cgroup are its own, and takes its
    fds from the pairs given, not `req.pairs` (`ruleset_fd` must then be below the bound)."""
    chain = Chain()
    if enter_net is not None:
        chain.call(nr("setns"), enter_net, CLONE_NEWNET, what="network namespace")
    if unshare:
        chain.call(nr("unshare"), unshare, what="namespaces (ipc, uts)")
    if root is not None:
        _bound_and_join(chain, root)
    elif ruleset_fd is not None:
        chain.extend(_own_namespace(os.getuid(), os.getgid()))
    chain.extend(_session())
    pairs, files = req.pairs, 0
    if small is not None:  # (what came before touched no fd but to open and close it again)
        (bound, pairs), files = small, CLONE_FILES
        chain.call(nr("close_range"), bound, _EVERY_FD, _CLOSE_RANGE_UNSHARE, what="fd table")
    for source, target in pairs:
        if source == target:
            chain.call(nr("fcntl"), target, _F_SETFD, 0, what=f"fd {target}")
        else:
            chain.call(nr("dup3"), source, target, 0, what=f"fd {target}")
    if limits:
        chain.extend(_limits(tuple(limits), tuple(req.limit_names[n] for n, _, _ in limits)))
    if root is not None:
        _become(chain, root)
    elif ruleset_fd is not None:
        chain.extend(_powerless())
    if ruleset_fd is not None:
        chain.call(nr("landlock_restrict_self"), ruleset_fd, 0, what="landlock restrict")
        chain.extend(_filtered(sockets, no_memfd, no_shm=no_memfd and root is None))
    chain.extend(_unmasked())
    chain.call(
        nr("execve"),
        chain.pointer(os.fsencode(program)),
        chain.strings([os.fsencode(a) for a in req.argv]),
        chain.strings([os.fsencode(k) + b"=" + os.fsencode(v) for k, v in req.env.items()]),
        what="exec",
    )
    try:
        return chain.spawn(files)
    except ChainError as exc:
        if exc.what == CWD_CHECK:
            raise
        if exc.what == "exec":
            raise start_failed(program, exc, req) from exc
        if exc.what.startswith("set "):
            raise StartError(f"cannot {exc.what}: {exc}") from exc
        raise StartError(f"cannot start {quoted(program)}: {exc.what}: {exc.strerror}") from exc
    except OSError as exc:
        raise start_failed(program, exc, req) from exc


_WORD = (1 << 64) - 1


@functools.cache
def _own_namespace(uid: int, gid: int) -> Chain:
    """Step 1 (the steps built once are alike for every child of this process)."""
    chain = Chain()
    own = "the hook's own user namespace"
    # (`unshare` of a user namespace refuses a thread of a process with others; the child is
    # a process of its own, sharing only memory, so it may.)
    chain.call(nr("unshare"), CLONE_NEWUSER, what=own)
    for name, text in (
        ("setgroups", b"deny"),
        ("uid_map", b"%d %d 1" % (uid, uid)),
        ("gid_map", b"%d %d 1" % (gid, gid)),
    ):
        path = b"/proc/self/" + name.encode()
        chain.call(nr("openat"), AT_FDCWD, path, os.O_WRONLY | os.O_CLOEXEC, what=own, flags=SAVE)
        chain.call(nr("write"), None, text, len(text), what=own, flags=ARG0_SAVED)
        chain.call(nr("close"), None, what=own, flags=ARG0_SAVED)
    return chain


@functools.lru_cache(maxsize=64)
def _limits(limits: tuple[tuple[int, int, int], ...], names: tuple[str, ...]) -> Chain:
    """Step 4, built once per set of limits (and their names, for the message): the chain
    holds only these values, nothing read from the system, so a copy is the same chain."""
    chain = Chain()
    for (number, soft, hard), name in zip(limits, names, strict=True):
        limit = struct.pack("=QQ", soft & _WORD, hard & _WORD)
        chain.call(nr("prlimit64"), 0, number, limit, None, what=f"set {name}")
    return chain


def _bound_and_join(chain: Chain, root: Root) -> None:
    """Root's step 1: the shm bound of its own IPC namespace, then its memory cgroup."""
    if root.shm_bytes:
        what, flags = "bounding shared memory", os.O_WRONLY | os.O_CLOEXEC
        for name, unit in memcg.SHM_LIMITS:
            path = b"/proc/sys/kernel/" + name.encode()
            text = b"%d" % max(1, root.shm_bytes // unit)
            chain.call(nr("openat"), AT_FDCWD, path, flags, what=what, flags=SAVE)
            chain.call(nr("write"), None, text, len(text), what=what, flags=ARG0_SAVED)
            chain.call(nr("close"), None, what=what, flags=ARG0_SAVED)
    if root.tasks is not None:  # ("0": the writer itself; it starts nothing before it is in)
        chain.call(nr("write"), root.tasks, b"0", 1, what="joining its memory cgroup")


def _become(chain: Chain, root: Root) -> None:
    """Root's step 5 up to its Landlock ruleset: `confine.become`, then the check, then
    `no_new_privs`."""
    uid = root.uid
    chain.call(nr("setgroups"), 0, None, what="the hook's uid (setgroups)")
    chain.call(nr("setresgid"), uid, uid, uid, what="the hook's uid (setresgid)")
    chain.call(nr("setresuid"), uid, uid, uid, what="the hook's uid (setresuid)")
    cwd = os.fsencode(root.cwd)
    chain.call(nr("faccessat"), AT_FDCWD, cwd, os.R_OK | os.X_OK, 0, what=CWD_CHECK)
    chain.call(nr("prctl"), PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, what="no_new_privs")


@functools.cache
def _session() -> Chain:
    """Step 2 (built once: the spawner's signal handlers are set before it serves)."""
    chain = Chain()
    chain.call(nr("setsid"), what="setsid")
    handled = {s for s in signal.valid_signals() if callable(signal.getsignal(s))}
    for sig in sorted(handled.union(DEFAULT_SIGNALS)):
        chain.call(nr("rt_sigaction"), sig, _DEFAULT_ACTION, None, _SIGSET_BYTES, what="signals")
    return chain


@functools.cache
def _powerless() -> Chain:
    """`userns.drop_capabilities` as steps, then `no_new_privs`."""
    chain = Chain()
    what = "dropping capabilities"
    chain.call(nr("prctl"), PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0, what=what)
    if LAST_CAPABILITY is None:
        for cap in range(64):
            chain.call(nr("prctl"), PR_CAPBSET_DROP, cap, 0, 0, 0, what=what, flags=MAY_FAIL)
    else:
        for cap in range(LAST_CAPABILITY + 1):
            chain.call(nr("prctl"), PR_CAPBSET_DROP, cap, 0, 0, 0, what=what)
    header = struct.pack("=Ii", CAPSET_V3, 0)
    chain.call(nr("capset"), header, bytes(24), what=what)
    chain.call(nr("prctl"), PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, what="no_new_privs")
    return chain


@functools.cache
def _filtered(sockets: str, no_memfd: bool = False, *, no_shm: bool = False) -> Chain:
    """The seccomp filter of `sockets` (`seccomp.SOCKET_FAMILIES`; and refusing
    `memfd_create`, creating SysV shared memory, or not)."""
    chain = Chain()
    filt = seccomp.seccomp_program(sockets, no_memfd, no_shm=no_shm)
    fprog = struct.pack("=HxxxxxxQ", len(filt) // 8, chain.pointer(filt))
    chain.call(nr("prctl"), PR_SET_SECCOMP, seccomp.SECCOMP_MODE_FILTER, fprog, what="seccomp")
    return chain


@functools.cache
def _unmasked() -> Chain:
    """The empty signal mask the program starts with."""
    chain = Chain()
    chain.call(nr("rt_sigprocmask"), _SIG_SETMASK, bytes(8), None, _SIGSET_BYTES, what="signals")
    return chain
