"""Landlock: the filesystem allowlist of a confined hook, and its network and scope rights.

Standard library only (ctypes over libc, `libc.py`). A ruleset is filled, then enforced on
the calling thread (`Ruleset.restrict`), which passes it to what it starts: the spawner's
thread or fork that starts the hook, never the spawner itself. What each profile allows is
said in `confine.py`.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
import struct
from collections.abc import Iterable

from .libc import (
    EVERYWHERE,
    ConfineError,
    check,
    nr,
    syscall,
    syscall_of_arity,
    tried_apart,
)

_LL_CREATE = EVERYWHERE["landlock_create_ruleset"]
_LL_ADD_RULE = EVERYWHERE["landlock_add_rule"]
_LL_RESTRICT = EVERYWHERE["landlock_restrict_self"]

LL_EXECUTE = 1 << 0
LL_WRITE_FILE = 1 << 1
LL_READ_FILE = 1 << 2
LL_READ_DIR = 1 << 3
LL_TRUNCATE = 1 << 14
LL_IOCTL_DEV = 1 << 15
#: Access rights that exist per ABI version (index = ABI).
_LL_FS_BY_ABI = (0, (1 << 13) - 1, (1 << 14) - 1, (1 << 15) - 1, (1 << 15) - 1, (1 << 16) - 1)
_LL_NET_BIND_TCP = 1 << 0
_LL_NET_CONNECT_TCP = 1 << 1
_LL_SCOPE_ABSTRACT_UNIX = 1 << 0
_LL_SCOPE_SIGNAL = 1 << 1
_LL_RULE_PATH_BENEATH = 1
_LL_CREATE_RULESET_VERSION = 1
_READ = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV
#: What a rule grants beneath its path (`Ruleset.add`): read and execute, everything (as
#: far as the kernel's ABI goes), or read and write on a device file.
READ_BENEATH = _READ
ALL_BENEATH = (1 << 64) - 1
DEVICE = _FILE_RIGHTS


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it is absent or disabled (asked once)."""
    try:
        number = nr("landlock_create_ruleset")
    except ConfineError:
        return 0
    abi = syscall(number, None, 0, _LL_CREATE_RULESET_VERSION)
    return max(abi, 0)


def landlock_missing() -> str | None:
    """Why a sandboxed child could not have its ruleset here, or None. The kernel's answer to
    the ABI question says why it has none; where it answers, a ruleset is made and enforced
    on a throwaway thread (`no_new_privs` first), which ends with it, since a system-call
    filter around this process (a container's) may refuse `landlock_restrict_self` alone."""
    try:
        number = nr("landlock_create_ruleset")
    except ConfineError:
        return f"no system call table for {os.uname().machine}"
    if syscall(number, None, 0, _LL_CREATE_RULESET_VERSION) < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            return "the kernel has no Landlock (CONFIG_SECURITY_LANDLOCK)"
        if err == errno.EOPNOTSUPP:
            return "the kernel has Landlock, but it is off (`landlock` is not in the lsm= list)"
        return (
            f"landlock_create_ruleset: {os.strerror(err)} (a system-call filter around this"
            " process, a container's, may refuse it)"
        )
    return tried_apart(
        "mcpx-landlock", "enforcing a ruleset", lambda: Ruleset(no_tcp=True).restrict()
    )


@functools.cache
def _ruleset_attr(abi: int, no_tcp: bool) -> tuple[bytes, int]:
    """`struct landlock_ruleset_attr` for this ABI, and the filesystem rights it handles."""
    fs = _LL_FS_BY_ABI[min(abi, len(_LL_FS_BY_ABI) - 1)]
    net = (_LL_NET_BIND_TCP | _LL_NET_CONNECT_TCP) if no_tcp and abi >= 4 else 0
    scoped = (_LL_SCOPE_ABSTRACT_UNIX | _LL_SCOPE_SIGNAL) if abi >= 6 else 0
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    return struct.pack("=QQQ", fs, net, scoped)[:size], fs


def open_path(path: str) -> int | None:
    """An `O_PATH` fd naming `path` for a rule, or None where it does not exist."""
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


class Ruleset:
    """A Landlock ruleset: filled (`add`), enforced once on the calling thread (`restrict`,
    which then applies to what it starts), closed. One per confined child, never reused: a
    domain holds exactly the rules of its ruleset, and rules cannot be taken out of one.

    `no_tcp` handles TCP bind and connect with no rule, so both are denied (ABI 4+). From
    ABI 6 abstract Unix sockets and signals are scoped to the domain.
    """

    def __init__(self, *, no_tcp: bool) -> None:
        abi = landlock_abi()
        if abi < 1:
            raise ConfineError(errno.EOPNOTSUPP, "landlock: not available")
        attr, self._fs = _ruleset_attr(abi, no_tcp)
        self.fd: int | None = check(syscall(_LL_CREATE, attr, len(attr), 0), "landlock ruleset")

    def add(self, rules: Iterable[tuple[int, int]]) -> None:
        """Adds `rules`: each an fd naming a file or directory (`open_path`; the caller
        closes it) and what it grants beneath (`READ_BENEATH`, `ALL_BENEATH`, `DEVICE`; a
        file gets only file rights)."""
        assert self.fd is not None
        add_rule = syscall_of_arity(4)
        for fd, beneath in rules:
            rights = beneath & self._fs
            # Rights fit for a directory; a file refuses them (EINVAL) and gets its own.
            if add_rule(_LL_ADD_RULE, self.fd, _LL_RULE_PATH_BENEATH, _rule(rights, fd), 0) < 0:
                err = ctypes.get_errno()
                if err == errno.EINVAL and not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rule = _rule(rights & _FILE_RIGHTS, fd)
                    if add_rule(_LL_ADD_RULE, self.fd, _LL_RULE_PATH_BENEATH, rule, 0) >= 0:
                        continue
                    err = ctypes.get_errno()
                raise ConfineError(err, f"landlock rule on {_fd_path(fd)}: {os.strerror(err)}")

    def restrict(self) -> None:
        """Enforces the rules on the calling thread. Needs `no_new_privs` (or CAP_SYS_ADMIN)
        on it. Once only."""
        assert self.fd is not None
        try:
            check(syscall(_LL_RESTRICT, self.fd, 0), "landlock restrict")
        finally:
            self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def _rule(rights: int, fd: int) -> bytes:
    """`struct landlock_path_beneath_attr` (packed)."""
    return struct.pack("=Qi", rights, fd)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"
