"""The C library through ctypes, opened once: the calls the standard library does not wrap
(`prctl`, `unshare`, `setns`, raw `syscall`), this machine's system call numbers, and the
flags those calls take.

Standard library only; never imports the supervisor (which imports it: it is pure apart from
opening libc, and holds the only copy of the flags both sides pass to the kernel). Every call
here returns or raises in the calling thread only: `unshare` and `setns` act on that thread.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from collections.abc import Callable

#: This process's C library; `ctypes.get_errno()` is the errno of its last call.
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# `prctl` options.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

# Namespaces (`unshare`, `setns`, `clone`).
CLONE_NEWTIME = 0x00000080
CLONE_FILES = 0x00000400
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
#: Every namespace flag: what a confined `clone` may not carry (`seccomp.py`).
NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | CLONE_NEWTIME
)

# The new mount API (`open_tree`, `move_mount`, `mount_setattr`).
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x100000


class ConfineError(OSError):
    """A confinement step failed; the message names the mechanism."""


def said(exc: BaseException) -> str:
    """An error in words: a `ConfineError`'s own message (not `[Errno N] …`), else `str`."""
    return exc.strerror if isinstance(exc, ConfineError) and exc.strerror else str(exc)


def tried_apart(name: str, what: str, step: Callable[[], object]) -> str | None:
    """Runs `step` after `no_new_privs` on a thread of its own, which ends with what both
    did to it (a seal tried without sealing this process); "`what` fails (why)", or None."""
    import threading

    failed: list[str] = []

    def attempt() -> None:
        try:
            check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
            step()
        except OSError as exc:
            failed.append(f"{what} fails ({exc.strerror})")

    thread = threading.Thread(target=attempt, name=name)
    thread.start()
    thread.join()
    return failed[0] if failed else None


#: What `threading` raises (`RuntimeError`) when the system refuses to start a thread.
NO_THREAD = "can't start new thread"
#: How `no_thread_said` begins, before the cause.
THREADS_REFUSED = "this system refuses new threads"


def thread_refused() -> str | None:
    """Why this process cannot start a thread (`no_thread_said`), or None: one started and
    ended. Every command that runs anything needs threads (the spawner's for each sandboxed
    child, the supervisor's for its history and name lookups)."""
    import threading

    thread = threading.Thread(target=int, name="mcpx-thread-check")
    try:
        thread.start()
    except RuntimeError as exc:
        if str(exc) != NO_THREAD:
            raise
        return no_thread_said()
    thread.join()
    return None


def no_thread_said() -> str:
    """Why a thread could not be started, in two lines: what is refused, the way out.

    glibc starts a thread with `clone3`, and falls back on `clone` only where `clone3` fails
    with ENOSYS; a seccomp profile written before `clone3` existed (Docker's before 20.10.10,
    some hardened CI runners') refuses it with EPERM, and then no thread starts at all.
    `clone3` with no arguments tells which: EINVAL from the kernel, EPERM from such a filter;
    it never makes a process."""
    syscall(EVERYWHERE["clone3"], None, 0)
    if ctypes.get_errno() == errno.EPERM:
        return (
            f"{THREADS_REFUSED}: clone3 is refused with EPERM, as a seccomp"
            " profile older than clone3 does (Docker before 20.10.10, for one)\n"
            "run mcpx-hooks under a newer container runtime, or with a seccomp profile that answers"
            " clone3 with ENOSYS (docker run --security-opt seccomp=PROFILE.json)"
        )
    return (
        f"{THREADS_REFUSED}: a limit on processes or threads is reached, or the"
        " memory for a thread's stack is lacking\n"
        "see `ulimit -u` and the container's pids limit (docker run --pids-limit)"
    )


def check(result: int, what: str) -> int:
    """`result` of a call that returns -1 on failure; else `ConfineError` naming `what`."""
    if result < 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")
    return result


def failure(what: str) -> str:
    """`what` and the errno of the last failed call, for a message."""
    return f"{what}: {os.strerror(ctypes.get_errno())}"


def prctl(option: int, arg: int) -> None:
    """`prctl(option, arg, 0, 0, 0)`; raises `OSError` with its errno."""
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def unshare(flags: int, what: str) -> None:
    check(libc.unshare(flags), what)


def setns(fd: int, flags: int, what: str) -> None:
    check(libc.setns(fd, flags), what)


def syscall(number: int, *args: int | bytes | ctypes.Array[ctypes.c_char] | None) -> int:
    """`syscall(number, *args)`, every argument passed as a full machine word."""
    return int(syscall_of_arity(len(args))(number, *args))


@functools.cache
def syscall_of_arity(n: int) -> Callable[..., int]:
    """`syscall` with `n` arguments. A prototype of its own per arity: ctypes converts the
    arguments in C (ints, bytes, buffers and None alike, as `void *`), several times faster
    than wrapping each one."""
    proto = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, *[ctypes.c_void_p] * n, use_errno=True)
    return proto(("syscall", libc))


#: The system call numbers the runners need, by name: (x86_64, aarch64), None where that
#: machine has no such call (aarch64 has only the `*at` forms).
# fmt: off
_NUMBERS: dict[str, tuple[int, int | None]] = {
    "setgroups": (116, 159), "setresuid": (117, 147), "setresgid": (119, 149),
    "socket": (41, 198), "clone": (56, 220), "ptrace": (101, 117), "syslog": (103, 116),
    "personality": (135, 92), "pivot_root": (155, 41), "setrlimit": (160, 164),
    "chroot": (161, 51), "acct": (163, 89), "settimeofday": (164, 170), "mount": (165, 40),
    "umount2": (166, 39), "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "iopl": (172, None), "ioperm": (173, None), "init_module": (175, 105),
    "delete_module": (176, 106), "quotactl": (179, 60), "clock_settime": (227, 112),
    "kexec_load": (246, 104), "add_key": (248, 217), "request_key": (249, 218),
    "keyctl": (250, 219), "unshare": (272, 97), "perf_event_open": (298, 241),
    "prlimit64": (302, 261), "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "setns": (308, 268), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "finit_module": (313, 273), "kexec_file_load": (320, 294), "bpf": (321, 280),
    "userfaultfd": (323, 282), "open": (2, None), "creat": (85, None), "chmod": (90, None),
    "fchmod": (91, 52), "mknod": (133, None), "openat": (257, 56), "mknodat": (259, 33),
    "fchmodat": (268, 53), "write": (1, 64), "close": (3, 57), "prctl": (157, 167),
    "capset": (126, 91), "setsid": (112, 157), "rt_sigaction": (13, 134), "chdir": (80, 49),
    "rt_sigprocmask": (14, 135), "dup3": (292, 24), "fcntl": (72, 25), "execve": (59, 221),
    "memfd_create": (319, 279), "shmget": (29, 194), "faccessat": (269, 48),
}
#: Calls numbered alike on every machine: Landlock, io_uring, the new mount API and later ones.
EVERYWHERE: dict[str, int] = {
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "close_range": 436, "mount_setattr": 442,
    "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "openat2": 437,
    "fchmodat2": 452,
}
# fmt: on
#: Per machine: its audit arch (what a seccomp filter checks) and its column in `_NUMBERS`.
_MACHINES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}
#: The audit arch of x86_64, whose x32 numbers a filter must refuse as well.
AUDIT_ARCH_X86_64 = _MACHINES["x86_64"][0]


def _machine_table() -> tuple[int, dict[str, int]] | None:
    found = _MACHINES.get(os.uname().machine)
    if found is None:
        return None
    arch, column = found
    numbers = {name: nrs[column] for name, nrs in _NUMBERS.items()}
    return arch, {**{n: nr for n, nr in numbers.items() if nr is not None}, **EVERYWHERE}


#: This machine's audit arch and system call numbers (None: no table for it).
_TABLE = _machine_table()


def table() -> tuple[int, dict[str, int]] | None:
    """This machine's audit arch and system call numbers by name; None: no table for it."""
    return _TABLE


def nr(name: str) -> int:
    """The number of system call `name` here; `ConfineError` (ENOSYS) on another machine."""
    if _TABLE is None:
        raise ConfineError(errno.ENOSYS, f"no system call table for {os.uname().machine}")
    return _TABLE[1][name]
