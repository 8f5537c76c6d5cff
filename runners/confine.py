"""The sandbox helper: what the spawner applies to a hook before it runs (strict and net).

Standard library only (ctypes over libc); never imports the supervisor. Everything here acts on
the *calling thread*: the spawner confines a disposable thread and `posix_spawn`s the hook from
it, so the hook inherits the thread's confinement and the spawner itself stays as it was.
Per-thread are: namespaces entered with `unshare`/`setns` (not a user namespace), the working
directory (after `unshare(CLONE_FS)`), credentials changed by the raw system calls (glibc's
`setresuid` would change every thread), `no_new_privs`, a Landlock domain and a seccomp filter
(both installed without their "all threads" flag).

Mechanisms (what the spawner finds of them at its start is `mechanisms.py`):
* `landlock`: the filesystem allowlist (read-only system, Python, declaring dir, cwd and
  `[sandbox] read`; read-write scratch, the write paths and a few devices), no TCP
  bind/connect (ABI 4+, strict), no abstract Unix sockets or signals outside the hook's own
  domain (ABI 6+).
* `seccomp`: a small deny list (ptrace, mounts, namespaces, kernel keyrings, bpf, raising
  resource limits, set-user-ID and set-group-ID modes, io_uring, ...) and, under strict,
  `socket()` for anything but netlink.
* `uid`: a per-hook unprivileged uid and gid (the supervisor is root), no supplementary groups,
  so `RLIMIT_NPROC` holds and the host's DAC applies.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import stat
import struct
from collections.abc import Callable, Iterable, Sequence

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWTIME = 0x00000080
_NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | CLONE_NEWTIME
)


class ConfineError(OSError):
    """A confinement step failed; the message names the mechanism."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")
    return result


def _syscall(number: int, *args: int | bytes | ctypes.Array[ctypes.c_char] | None) -> int:
    """`syscall(number, *args)`, every argument passed as a full machine word."""
    return int(_syscall_of_arity(len(args))(number, *args))


@functools.cache
def _syscall_of_arity(n: int) -> Callable[..., int]:
    # A prototype of its own per arity: ctypes converts the arguments in C (ints, bytes,
    # buffers and None alike, as `void *`), several times faster than wrapping each one.
    proto = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, *[ctypes.c_void_p] * n, use_errno=True)
    return proto(("syscall", _libc))


# --------------------------------------------------------------------------- syscall tables

#: Per architecture: the audit arch, then the numbers this module needs. Landlock and the new
#: mount API have the same numbers everywhere.
# fmt: off
_TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "setgroups": 116, "setresuid": 117, "setresgid": 119, "socket": 41, "clone": 56,
            "ptrace": 101, "syslog": 103, "personality": 135, "pivot_root": 155,
            "setrlimit": 160, "chroot": 161, "acct": 163, "settimeofday": 164,
            "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
            "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
            "quotactl": 179, "clock_settime": 227, "kexec_load": 246, "add_key": 248,
            "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
            "prlimit64": 302, "name_to_handle_at": 303, "open_by_handle_at": 304,
            "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
            "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
            "open": 2, "creat": 85, "chmod": 90, "fchmod": 91, "mknod": 133, "openat": 257,
            "mknodat": 259, "fchmodat": 268,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "setgroups": 159, "setresuid": 147, "setresgid": 149, "socket": 198, "clone": 220,
            "ptrace": 117, "syslog": 116, "personality": 92, "pivot_root": 41,
            "setrlimit": 164, "chroot": 51, "acct": 89, "settimeofday": 170,
            "mount": 40, "umount2": 39, "swapon": 224, "swapoff": 225, "reboot": 142,
            "init_module": 105, "delete_module": 106, "quotactl": 60, "clock_settime": 112,
            "kexec_load": 104, "add_key": 217, "request_key": 218, "keyctl": 219,
            "unshare": 97, "perf_event_open": 241, "prlimit64": 261,
            "name_to_handle_at": 264, "open_by_handle_at": 265, "setns": 268,
            "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273,
            "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282,
            "mknodat": 33, "fchmod": 52, "fchmodat": 53, "openat": 56,
        },
    ),
}
_COMMON = {
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "mount_setattr": 442,
    "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "openat2": 437,
    "fchmodat2": 452,
}
# fmt: on
_LL_CREATE = _COMMON["landlock_create_ruleset"]
_LL_ADD_RULE = _COMMON["landlock_add_rule"]
_LL_RESTRICT = _COMMON["landlock_restrict_self"]


def _machine_table() -> tuple[int, dict[str, int]] | None:
    found = _TABLES.get(platform.machine())
    return None if found is None else (found[0], {**found[1], **_COMMON})


#: This machine's audit arch and system call numbers (None: no table for it).
_TABLE = _machine_table()


def _table() -> tuple[int, dict[str, int]] | None:
    return _TABLE


def _nr(name: str) -> int:
    if _TABLE is None:
        raise ConfineError(errno.ENOSYS, f"no system call table for {platform.machine()}")
    return _TABLE[1][name]


# --------------------------------------------------------------------------- landlock

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
        nr = _nr("landlock_create_ruleset")
    except ConfineError:
        return 0
    abi = _syscall(nr, None, 0, _LL_CREATE_RULESET_VERSION)
    return max(abi, 0)


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
        self.fd: int | None = _check(_syscall(_LL_CREATE, attr, len(attr), 0), "landlock ruleset")

    def add(self, rules: Iterable[tuple[int, int]]) -> None:
        """Adds `rules`: each an fd naming a file or directory (`open_path`; the caller
        closes it) and what it grants beneath (`READ_BENEATH`, `ALL_BENEATH`, `DEVICE`; a
        file gets only file rights)."""
        assert self.fd is not None
        add_rule = _syscall_of_arity(4)
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
            _check(_syscall(_LL_RESTRICT, self.fd, 0), "landlock restrict")
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


# --------------------------------------------------------------------------- seccomp

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_JGE_K = 0x35
_RET_K = 0x06
_X32_BIT = 0x40000000
_AF_NETLINK = 16
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
def seccomp_program(no_sockets: bool) -> bytes:
    """The filter, as `struct sock_filter` bytes: the deny list; `prlimit64` only to read;
    `clone` without namespace flags and `clone3` refused with ENOSYS (its flags cannot be
    inspected; libc then falls back to `clone`), as are the `UNJUDGED` calls; a mode with a
    `SETID_BITS` bit refused (EPERM) to the calls of `MODE_ARGUMENT` and, when they create,
    `OPEN_ARGUMENTS`; with `no_sockets`, `socket()` only for netlink. Anything else is
    allowed. Another architecture than this machine's (and, on x86_64, the x32 numbers) is
    refused."""
    table = _table()
    if table is None:
        raise ConfineError(errno.ENOSYS, f"seccomp: no system call table for {platform.machine()}")
    arch, nrs = table
    cases = {nrs[name]: "eperm" for name in DENIED if name in nrs}
    cases |= {nrs[name]: "enosys" for name in UNJUDGED}
    cases |= {nrs[name]: f"mode{arg}" for name, arg in MODE_ARGUMENT.items() if name in nrs}
    cases |= {nrs[name]: f"open{arg}" for name, (arg, _) in OPEN_ARGUMENTS.items() if name in nrs}
    cases |= {nrs["clone3"]: "enosys", nrs["clone"]: "clone", nrs["prlimit64"]: "prlimit"}
    if no_sockets:
        cases[nrs["socket"]] = "socket"
    prog = _Program()
    prog.op(_LD_W_ABS, 4)  # arch
    prog.op(_JEQ_K, arch, None, "eperm")
    prog.op(_LD_W_ABS, 0)  # nr
    if arch == 0xC000003E:
        prog.op(_JGE_K, _X32_BIT, "eperm", None)
    _search(prog, sorted(cases.items()))
    # clone: namespace flags in the low half of args[0] (offset 16).
    prog.label("clone")
    prog.op(_LD_W_ABS, 16)
    prog.op(_JSET_K, _NAMESPACE_FLAGS, "eperm", "allow")
    # prlimit64(pid, resource, new, old): allowed only with new == NULL (args[2], offset 32).
    prog.label("prlimit")
    prog.op(_LD_W_ABS, 32)
    prog.op(_JEQ_K, 0, None, "eperm")
    prog.op(_LD_W_ABS, 36)
    prog.op(_JEQ_K, 0, "allow", "eperm")
    if no_sockets:  # socket(domain, ...): netlink only (args[0]).
        prog.label("socket")
        prog.op(_LD_W_ABS, 16)
        prog.op(_JEQ_K, _AF_NETLINK, "allow", "eacces")
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
    ):
        prog.label(label)
        prog.op(_RET_K, action)
    return prog.assemble()


def _arg(n: int) -> int:
    """The offset of the low 32 bits of argument `n` in `struct seccomp_data`."""
    return 16 + 8 * n


def seccomp_available() -> bool:
    """Whether this kernel takes seccomp filters and we have a table for this machine."""
    if _table() is None:
        return False
    try:
        with open("/proc/self/status", "rb") as f:
            return any(line.startswith(b"Seccomp:") for line in f)
    except OSError:
        return False


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))


def seccomp(no_sockets: bool) -> None:
    """Installs the filter on the calling thread. Needs `no_new_privs` first."""
    prog = seccomp_program(no_sockets)
    fprog = _SockFprog(len(prog) // 8, prog)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


# --------------------------------------------------------------------------- credentials


def no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def become(uid: int, gid: int) -> None:
    """This thread only: no supplementary groups, real/effective/saved gid and uid set; the
    thread loses every capability with its uid 0."""
    _check(_syscall(_nr("setgroups"), 0, None), "setgroups")
    _check(_syscall(_nr("setresgid"), gid, gid, gid), "setresgid")
    _check(_syscall(_nr("setresuid"), uid, uid, uid), "setresuid")


def unshare(flags: int, what: str) -> None:
    _check(_libc.unshare(flags), what)


def setns(fd: int, flags: int, what: str) -> None:
    _check(_libc.setns(fd, flags), what)


def traversable(
    path: str,
    uid: int,
    gid: int,
    seen: dict[str, bool | None] | None = None,
    *,
    start: str = "",
    owner: tuple[int, int] | None = None,
) -> str | None:
    """The first ancestor of `path` (or `path` itself) that `uid`/`gid` cannot search, or None.

    Approximates the kernel's check from the mode bits (ACLs are not read): owner, group (the
    hook's own gid only: it has no supplementary groups), others. `seen`: what was found for
    each directory already looked at, shared between calls for the same ids (and `owner`):
    one `stat` per directory rather than per path through it. `start`: a directory above
    `path` the walk starts below (it is not looked at). `owner`: below `start` the files
    are seen through an idmapped mount (`idmap.py`) that makes this uid and gid the hook's:
    a directory they own is searched with its owner's (group's) bits.
    """
    seen = {} if seen is None else seen
    current = start.rstrip("/")
    for part in os.path.normpath(path)[len(current) :].split("/"):
        if not part:
            continue
        current = f"{current}/{part}"
        if current not in seen:
            seen[current] = _searchable(current, uid, gid, owner)
        found = seen[current]
        if found is None:  # not there, or not a directory
            return None
        if not found:
            return current
    return None


def _searchable(path: str, uid: int, gid: int, owner: tuple[int, int] | None = None) -> bool | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    if info.st_uid == (uid if owner is None else owner[0]):
        bit = 0o100
    elif info.st_gid == (gid if owner is None else owner[1]):
        bit = 0o010
    else:
        bit = 0o001
    return bool(info.st_mode & bit)


def under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
