"""seccomp: the system calls a confined hook may not make, as one cBPF filter.

Standard library only (ctypes over libc, `libc.py`). The filter is installed on the calling
thread (`seccomp`), after `no_new_privs`, and passes to what it starts; what it refuses is
`seccomp_program`'s to say, and `confine.py` says why each profile gets it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct

from .libc import (
    AUDIT_ARCH_X86_64,
    NAMESPACE_FLAGS,
    PR_SET_SECCOMP,
    ConfineError,
    check,
    libc,
    table,
    tried_apart,
)

SECCOMP_MODE_FILTER = 2

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_JGE_K = 0x35
_RET_K = 0x06
_X32_BIT = 0x40000000
_AF_INET, _AF_INET6, _AF_NETLINK = 2, 10, 16
#: The families `socket()` may make, by what the child's sandbox gives it of the network
#: (`Sandbox.sockets`): nothing (netlink alone), a loopback of its own (`egress`: IPv4 and
#: IPv6 too, to reach the proxy there; not Unix sockets, which a network namespace does not
#: bound: any listening socket the child can see would be a way out, nor vsock or packet), or
#: the host's network (`net`: every family). `socketpair` is never judged.
SOCKET_FAMILIES: dict[str, tuple[int, ...] | None] = {
    "none": (_AF_NETLINK,),
    "egress": (_AF_NETLINK, _AF_INET, _AF_INET6),
    "net": None,
}
_IPC_CREAT = 0o1000
#: Denied with EPERM under every confined profile.
# fmt: off
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "setrlimit", "acct", "settimeofday", "clock_settime",
    "quotactl", "iopl", "ioperm", "syslog", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "open_by_handle_at", "name_to_handle_at", "unshare",
    "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr",
)
# fmt: on
#: Refused with ENOSYS, so that a program falls back on the calls the filter can judge:
#: io_uring performs opens, sockets and the rest with no system call seccomp sees; the
#: flags and mode of `openat2` are in a struct a filter cannot read.
UNJUDGED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "openat2")
#: The mode bits no confined process may set on a file (EPERM): set-user-ID and set-group-ID.
#: Through a writable idmapped grant (`idmap.py`) the hook's files are owned on disk by the
#: grant's owner, root perhaps; such a bit would make a program that runs as that owner.
SETID_BITS = 0o6000
#: The calls that create a file or change its mode, and which argument holds the mode (for
#: `open`/`openat`: the flags' argument first, the mode counts with O_CREAT or O_TMPFILE).
MODE_ARGUMENT = {
    "chmod": 1,
    "fchmod": 1,
    "creat": 1,
    "mknod": 1,
    "fchmodat": 2,
    "fchmodat2": 2,
    "mknodat": 2,
}
OPEN_ARGUMENTS = {"open": (1, 2), "openat": (2, 3)}
#: O_CREAT and the bit of O_TMPFILE that is not O_DIRECTORY (the same on x86_64 and aarch64).
_CREATES = 0o100 | 0o20000000


#: A test of the syscall number is a leaf of the search tree below this many numbers.
_LEAF = 3
#: Where a cBPF jump may go (8-bit offsets, forward only).
_MAX_JUMP = 255


class _Program:
    """A cBPF program with named jump targets, assembled to `struct sock_filter` bytes."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, int, str | None, str | None]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        """One instruction; `jt`/`jf` name a label (None: the next instruction)."""
        self.ops.append((code, k, jt, jf))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def assemble(self) -> bytes:
        out = []
        for i, (code, k, jt, jf) in enumerate(self.ops):
            offsets = [0 if t is None else self.labels[t] - i - 1 for t in (jt, jf)]
            if not all(0 <= o <= _MAX_JUMP for o in offsets):  # pragma: no cover - by design
                raise AssertionError(f"seccomp: jump out of range at {i}")
            out.append(struct.pack("=HBBI", code, offsets[0], offsets[1], k))
        return b"".join(out)


def _search(prog: _Program, cases: list[tuple[int, str]], name: str = "t") -> None:
    """Jumps to the label of the syscall number in the accumulator (`cases`, sorted), or to
    `allow`: a binary search, so that the kernel's per-number cache of constant results
    (computed by emulating the filter for every number, at each install) and every call's
    evaluation take a few comparisons rather than one per listed call."""
    if len(cases) <= _LEAF:
        for i, (nr, target) in enumerate(cases):
            prog.op(_JEQ_K, nr, target, "allow" if i == len(cases) - 1 else None)
        return
    mid = len(cases) // 2
    prog.op(_JGE_K, cases[mid][0], f"{name}r", None)
    _search(prog, cases[:mid], f"{name}l")
    prog.label(f"{name}r")
    _search(prog, cases[mid:], f"{name}r")


@functools.cache
def seccomp_program(sockets: str, no_memfd: bool = False, no_shm: bool = False) -> bytes:
    """The filter, as `struct sock_filter` bytes: the deny list; `prlimit64` only to read;
    `clone` without namespace flags and `clone3` refused with ENOSYS (its flags cannot be
    inspected; libc then falls back to `clone`), as are the `UNJUDGED` calls; a mode with a
    `SETID_BITS` bit refused (EPERM) to the calls of `MODE_ARGUMENT` and, when they create,
    `OPEN_ARGUMENTS`; `socket()` only for the `SOCKET_FAMILIES` of `sockets`; with `no_memfd`,
    `memfd_create` refused with ENOMEM (memory bounded without a cgroup, `memcg.py`: a memfd
    filled with `write()` is counted by nothing else, so any is over the bound); with
    `no_shm`, `shmget` creating a segment refused with ENOSPC (as an IPC namespace's
    `shmall` of 0 would: where its limits cannot be written, rootless). Anything else is
    allowed. Another architecture than this machine's (and, on x86_64, the x32 numbers) is
    refused."""
    found = table()
    if found is None:
        raise ConfineError(errno.ENOSYS, f"seccomp: no system call table for {os.uname().machine}")
    arch, nrs = found
    cases = {nrs[name]: "eperm" for name in DENIED if name in nrs}
    cases |= {nrs[name]: "enosys" for name in UNJUDGED}
    cases |= {nrs[name]: f"mode{arg}" for name, arg in MODE_ARGUMENT.items() if name in nrs}
    cases |= {nrs[name]: f"open{arg}" for name, (arg, _) in OPEN_ARGUMENTS.items() if name in nrs}
    cases |= {nrs["clone3"]: "enosys", nrs["clone"]: "clone", nrs["prlimit64"]: "prlimit"}
    families = SOCKET_FAMILIES[sockets]
    if families is not None:
        cases[nrs["socket"]] = "socket"
    if no_memfd:
        cases[nrs["memfd_create"]] = "enomem"
    if no_shm:
        cases[nrs["shmget"]] = "shmget"
    prog = _Program()
    prog.op(_LD_W_ABS, 4)  # arch
    prog.op(_JEQ_K, arch, None, "eperm")
    prog.op(_LD_W_ABS, 0)  # nr
    if arch == AUDIT_ARCH_X86_64:
        prog.op(_JGE_K, _X32_BIT, "eperm", None)
    _search(prog, sorted(cases.items()))
    # clone: namespace flags in the low half of args[0] (offset 16).
    prog.label("clone")
    prog.op(_LD_W_ABS, 16)
    prog.op(_JSET_K, NAMESPACE_FLAGS, "eperm", "allow")
    # prlimit64(pid, resource, new, old): allowed only with new == NULL (args[2], offset 32).
    prog.label("prlimit")
    prog.op(_LD_W_ABS, 32)
    prog.op(_JEQ_K, 0, None, "eperm")
    prog.op(_LD_W_ABS, 36)
    prog.op(_JEQ_K, 0, "allow", "eperm")
    if no_shm:  # shmget(key, size, flags): creating (IPC_CREAT in args[2]) refused.
        prog.label("shmget")
        prog.op(_LD_W_ABS, _arg(2))
        prog.op(_JSET_K, _IPC_CREAT, "enospc", "allow")
    if families is not None:  # socket(domain, ...): those families only (args[0]).
        prog.label("socket")
        prog.op(_LD_W_ABS, 16)
        for i, family in enumerate(families):
            prog.op(_JEQ_K, family, "allow", "eacces" if i == len(families) - 1 else None)
    # open(path, flags, mode), openat(dirfd, path, flags, mode): the mode counts when creating.
    for flags, mode in sorted(set(OPEN_ARGUMENTS.values())):
        prog.label(f"open{flags}")
        prog.op(_LD_W_ABS, _arg(flags))
        prog.op(_JSET_K, _CREATES, f"mode{mode}", "allow")
    # The mode's low half (the high one is not read by the kernel: a mode is 32 bits).
    for arg in sorted({*MODE_ARGUMENT.values(), *(m for _, m in OPEN_ARGUMENTS.values())}):
        prog.label(f"mode{arg}")
        prog.op(_LD_W_ABS, _arg(arg))
        prog.op(_JSET_K, SETID_BITS, "eperm", "allow")
    for label, action in (
        ("allow", _RET_ALLOW),
        ("eperm", _RET_ERRNO | errno.EPERM),
        ("enosys", _RET_ERRNO | errno.ENOSYS),
        ("eacces", _RET_ERRNO | errno.EACCES),
        ("enomem", _RET_ERRNO | errno.ENOMEM),
        ("enospc", _RET_ERRNO | errno.ENOSPC),
    ):
        prog.label(label)
        prog.op(_RET_K, action)
    return prog.assemble()


def _arg(n: int) -> int:
    """The offset of the low 32 bits of argument `n` in `struct seccomp_data`."""
    return 16 + 8 * n


def seccomp_available() -> bool:
    """Whether this kernel takes seccomp filters and we have a table for this machine."""
    if table() is None:
        return False
    try:
        with open("/proc/self/status", "rb") as f:
            return any(line.startswith(b"Seccomp:") for line in f)
    except OSError:
        return False


def seccomp_missing() -> str | None:
    """Why a sandboxed child could not get its filter here, or None. Tried, since /proc says
    too little (a kernel without CONFIG_SECCOMP_FILTER, or a filter around this process that
    refuses new ones, still shows `Seccomp:`): `no_new_privs` and the longest filter a child
    gets, installed on a throwaway thread, which ends with both."""
    if not seccomp_available():
        return "no seccomp filters on this kernel or machine"
    return tried_apart(
        "mcpx-seccomp",
        "installing a filter",
        lambda: install("egress", no_memfd=True, no_shm=True),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))


def install(sockets: str, no_memfd: bool = False, no_shm: bool = False) -> None:
    """Installs the filter on the calling thread. Needs `no_new_privs` first."""
    prog = seccomp_program(sockets, no_memfd, no_shm)
    fprog = _SockFprog(len(prog) // 8, prog)
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")
