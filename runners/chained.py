"""A child started without a fork of the spawner: a rootless sandboxed child's seal as a `Chain`.

Standard library only. Rootless, a sandboxed child needs a user namespace of its own (so
that its processes limit counts its own tree: `userns.py`), which a thread of a process with
others cannot make (`unshare` refuses it); the spawner used to fork itself for it. Here the
child is `clone`d sharing the spawner's memory (`chain.py`), a process of its own that may
make one, and makes, as raw system calls, what the fork made in Python, in the same order:

0. where asked, the empty network namespace and IPC and UTS namespaces of its own
   (`enter_net`, `unshare`: it can while it still has the spawner's capabilities, which its
   own user namespace then leaves behind);
1. its own user namespace and its maps (`setgroups` denied, the caller's uid and gid to
   themselves), through the writable /proc of the jail's mount namespace;
2. its own session; the signals of `DEFAULT_SIGNALS` and every one this process handles
   back to the default;
3. its fds at their numbers;
4. every resource limit, soft and hard (`RLIMIT_NPROC` counted in its own namespace);
5. no capability left in its namespace (`userns.drop_capabilities`), `no_new_privs`, its
   Landlock ruleset, the seccomp filter;
6. an empty signal mask, then `execve`.
The isolation is the fork's, step for step; only who carries it out differs.

An unsandboxed child whose limits the spawner cannot lend it (`borrowing.py`: rootless, a
hard limit cannot be lent back) takes steps 2, 3, 4 and 6 the same way, from the spawner's
own thread.
"""

from __future__ import annotations

import functools
import os
import signal
import struct
from typing import TYPE_CHECKING

from . import seccomp
from .chain import ARG0_SAVED, MAY_FAIL, SAVE, Chain, ChainError
from .libc import (
    AT_FDCWD,
    CLONE_NEWNET,
    CLONE_NEWUSER,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_SECCOMP,
    PR_SET_SECUREBITS,
    nr,
)
from .start import DEFAULT_SIGNALS, StartError, start_failed
from .userns import CAPSET_V3, SECUREBITS

if TYPE_CHECKING:
    from .spawnreq import Request

_F_SETFD = 2
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


def start(
    req: Request,
    program: str,
    *,
    limits: list[tuple[int, int, int]],
    ruleset_fd: int | None = None,
    net: bool = False,
    enter_net: int | None = None,
    unshare: int = 0,
    no_memfd: bool = False,
) -> int:
    """Starts `program` for `req` with `limits` (soft and hard); its pid. With `ruleset_fd`
    a rootless sandboxed child (its own user namespace, its Landlock ruleset `ruleset_fd`,
    the seccomp filter of `net` or not; first, `enter_net`, a network namespace the child
    enters, and `unshare`, namespaces it makes, which it can only while it has this
    process's capabilities; `no_memfd`, memory bounded without a cgroup: the filter refuses
    `memfd_create` and creating SysV shared memory, `memcg.py`);
    without, steps 2,
    3, 4 and 6 only: an unsandboxed child whose limits this process cannot lend it
    (`borrowing.py`), without a fork either. Raises `StartError`."""
    chain = Chain()
    if enter_net is not None:
        chain.call(nr("setns"), enter_net, CLONE_NEWNET, what="network namespace")
    if unshare:
        chain.call(nr("unshare"), unshare, what="namespaces (ipc, uts)")
    if ruleset_fd is not None:
        chain.extend(_own_namespace(os.getuid(), os.getgid()))
    chain.extend(_session())
    for source, target in req.pairs:
        if source == target:
            chain.call(nr("fcntl"), target, _F_SETFD, 0, what=f"fd {target}")
        else:
            chain.call(nr("dup3"), source, target, 0, what=f"fd {target}")
    for number, soft, hard in limits:
        limit = struct.pack("=QQ", soft & _WORD, hard & _WORD)
        chain.call(nr("prlimit64"), 0, number, limit, None, what=f"set {req.limit_names[number]}")
    if ruleset_fd is not None:
        chain.extend(_powerless())
        chain.call(nr("landlock_restrict_self"), ruleset_fd, 0, what="landlock restrict")
        chain.extend(_filtered(net, no_memfd))
    chain.extend(_unmasked())
    chain.call(
        nr("execve"),
        chain.pointer(os.fsencode(program)),
        chain.strings([os.fsencode(a) for a in req.argv]),
        chain.strings([os.fsencode(k) + b"=" + os.fsencode(v) for k, v in req.env.items()]),
        what="exec",
    )
    try:
        return chain.spawn()
    except ChainError as exc:
        if exc.what == "exec":
            raise start_failed(program, exc) from exc
        if exc.what.startswith("set "):
            raise StartError(f"cannot {exc.what}: {exc}") from exc
        raise StartError(f"cannot start {program!r}: {exc.what}: {exc.strerror}") from exc
    except OSError as exc:
        raise start_failed(program, exc) from exc


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
def _filtered(net: bool, no_memfd: bool = False) -> Chain:
    """The seccomp filter of `net` or not (and refusing `memfd_create` or not)."""
    chain = Chain()
    filt = seccomp.seccomp_program(not net, no_memfd, no_shm=no_memfd)
    fprog = struct.pack("=HxxxxxxQ", len(filt) // 8, chain.pointer(filt))
    chain.call(nr("prctl"), PR_SET_SECCOMP, seccomp.SECCOMP_MODE_FILTER, fprog, what="seccomp")
    return chain


@functools.cache
def _unmasked() -> Chain:
    """The empty signal mask the program starts with."""
    chain = Chain()
    chain.call(nr("rt_sigprocmask"), _SIG_SETMASK, bytes(8), None, _SIGSET_BYTES, what="signals")
    return chain
