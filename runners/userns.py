"""Rootless: the spawner of an ordinary user runs in a user namespace of its own (`enter`).

Standard library only. A supervisor that is not root starts the spawner with mode `userns`.
That process, P, is the one the supervisor owns (its child, the one it reaps and may SIGKILL);
single-threaded and before anything else it:
1. forks a probe, C, which makes a user namespace (`unshare(CLONE_NEWUSER)`), maps P's uid
   and gid to themselves in it (`setgroups` denied first, as an unprivileged map requires),
   tries `unshare(CLONE_NEWPID)` (what an AppArmor rule or a container's seccomp filter
   refuses even where the namespace itself was made), and sends P an fd of the namespace,
   or why not;
2. enters it (`setns`; P owns it, so it has every capability in it, and none outside it),
   unshares CLONE_NEWPID and forks S, PID 1 of a PID namespace owned by the user namespace;
3. closes its copies of the lifeline, the request socket, the counter and stdout (they are
   S's) and waits for S, then exits with its status.
Where a step is refused, P has not moved and serves in keeper mode; the report says why
(`refusal`: the setting in /proc/sys that refuses user namespaces, and how to allow them).

S serves in pidns mode as a root spawner does (`pidns.py`): per-child PID namespaces, mount
namespaces, the empty network namespace, Landlock, seccomp, resource limits, all made with
the capabilities it holds in its user namespace (they act on what the namespace owns: the
namespaces S makes, never the host's). There is no per-child uid to give (the namespace has
one uid, the caller's), so:
* every child runs as the caller's own uid and gid, which it sees as such: the map is the
  identity, not "root inside", so whatever a child `exec`s has no capability (the kernel's
  rule for a uid other than 0), and a sandboxed child drops them before (`drop_capabilities`:
  a module hook runs in a fork that does not exec);
* a sandboxed child gets a user namespace of its own (`own_namespace`, the same map), made
  before its RLIMIT_NPROC is set: the kernel counts processes per user per namespace, so its
  processes limit counts its own tree, as the per-child uid does for root, not every process
  of the caller's hooks together. A thread cannot make a user namespace: the jail thread
  `clone`s the child into one (`chained.py`), or where that cannot run, forks.
The caller's supplementary groups stay (with `setgroups` denied they cannot be dropped): the
child has what the caller has, within the profile's Landlock rules.

Death. P has PR_SET_PDEATHSIG SIGKILL tied to the supervisor (`spawner.py` sets it first);
S sets its own right after the fork (a fork clears it), tied to P, then checks that P has
not died before that took hold (its end of a pipe from P). SIGKILL of the supervisor kills
P, which kills S, and with S (PID 1) every process in its namespace and in the namespaces
nested in it. End of file on the lifeline reaches S as for a root spawner; SIGKILL of P or
of S alone does the same as SIGKILL of a root spawner. The user namespace goes with its last
process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import select
import signal
import socket
import struct
import sys

from .isolation import HIDE_ENV, hidden
from .libc import (
    AT_FDCWD,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    EVERYWHERE,
    MOUNT_ATTR_RDONLY,
    PR_CAPBSET_DROP,
    PR_SET_PDEATHSIG,
    PR_SET_SECUREBITS,
    failure,
    libc,
    prctl,
    syscall,
)

#: The settings that can refuse unprivileged user namespaces: name, the value that refuses,
#: how to allow them (as root). Those this kernel has are in /proc/sys.
SETTINGS = (
    (
        "kernel.unprivileged_userns_clone",
        "0",
        "sysctl -w kernel.unprivileged_userns_clone=1 (Debian's and older kernels' switch)",
    ),
    (
        "user.max_user_namespaces",
        "0",
        "sysctl -w user.max_user_namespaces=15000",
    ),
    (
        "kernel.apparmor_restrict_unprivileged_userns",
        "1",
        "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu), or an AppArmor "
        "profile for this Python that allows `userns,`",
    ),
)


def settings() -> list[tuple[str, str | None, bool]]:
    """Each setting of `SETTINGS`: its value here (None: not on this kernel), and whether
    that value refuses user namespaces."""
    found: list[tuple[str, str | None, bool]] = []
    for name, refuses, _ in SETTINGS:
        try:
            with open("/proc/sys/" + name.replace(".", "/"), encoding="ascii") as f:
                value: str | None = f.read().strip()
        except OSError:
            value = None
        found.append((name, value, value == refuses))
    return found


def refusal(error: str) -> str:
    """Why unprivileged user namespaces cannot be had here, from `error` (the step that
    failed) and the settings: the one that refuses them and how to allow it, or, where none
    does, what else may (a container's seccomp filter or security module)."""
    head = f"user namespaces are refused to this user ({error})"
    found = settings()
    for (name, value, refuses), (_, _, allow) in zip(found, SETTINGS, strict=True):
        if refuses:
            return f"{head}: {name} = {value} refuses them; to allow them, as root: {allow}"
    present = ", ".join(f"{name} = {value}" for name, value, _ in found if value is not None)
    return (
        f"{head}, and no setting here refuses them ({present or 'none of them is on this kernel'})"
        ": a seccomp filter or security module around this process (a container's) may; "
        "allow user namespaces there, or run the supervisor as root"
    )


#: Set in S once it serves in its user namespace (and so in every fork of it).
entered = False

#: SECBIT_NOROOT (uid 0 gets no capabilities at exec), SECBIT_NO_SETUID_FIXUP,
#: SECBIT_NO_CAP_AMBIENT_RAISE, each locked, and SECBIT_KEEP_CAPS locked off.
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
CAPSET_V3 = 0x20080522


def drop_capabilities() -> None:
    """The calling process gives up every capability it holds in its user namespace (a
    child's own, `own_namespace`), for good: none now, none in its bounding set, none at an
    exec. (Its uid is the caller's, never 0, the only uid mapped there; and under
    `no_new_privs` no file's capabilities count: an exec would give none back anyway.)
    Raises `OSError`."""
    if libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), failure("securebits"))
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    if ctypes.get_errno() != errno.EINVAL or cap == 0:  # EINVAL: past the last capability
        raise OSError(ctypes.get_errno(), failure(f"dropping capability {cap}"))
    header = ctypes.create_string_buffer(struct.pack("=Ii", CAPSET_V3, 0), 8)
    data = ctypes.create_string_buffer(24)  # two zeroed `__user_cap_data_struct`s
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), failure("capset"))


def own_namespace(nproc: list[tuple[int, int, int]]) -> None:
    """A sandboxed child's own user namespace (the same identity map), then its processes
    limit `nproc`: counted there, over its own tree only. For a single-threaded process (a
    fork of S); raises `OSError`."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), failure("the hook's own user namespace"))
    _write("setgroups", "deny")
    _write("uid_map", f"{uid} {uid} 1")
    _write("gid_map", f"{gid} {gid} 1")
    for number, soft, hard in nproc:
        resource.setrlimit(number, (soft, hard))


def writable_proc() -> None:
    """Makes /proc writable again in this (armed, read-only) mount namespace: a child writes
    the maps of its own user namespace there (`own_namespace`). No child reaches /proc
    itself: Landlock grants it no path there. Raises `OSError`."""
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", 0, MOUNT_ATTR_RDONLY, 0, 0), 32)
    if syscall(EVERYWHERE["mount_setattr"], AT_FDCWD, b"/proc", 0, attr, 32) != 0:
        raise OSError(ctypes.get_errno(), failure("a writable /proc"))


def _write(name: str, text: str) -> None:
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _probe(sock: socket.socket) -> None:
    """C: makes the namespace and sends P an fd of it, or why not. Never returns."""
    try:
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER) != 0:
            why = failure("unshare(CLONE_NEWUSER)")
        else:
            why = ""
            for name, text in (
                ("setgroups", "deny"),
                ("uid_map", f"{uid} {uid} 1"),
                ("gid_map", f"{gid} {gid} 1"),
            ):
                try:
                    _write(name, text)
                except OSError as exc:
                    why = f"writing /proc/self/{name}: {exc.strerror}"
                    break
            if not why and libc.unshare(CLONE_NEWPID) != 0:
                why = failure("unshare(CLONE_NEWPID) in a new user namespace")
        if why:
            sock.send(why.encode())
        else:
            fd = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            socket.send_fds(sock, [b"ok"], [fd])
    finally:
        os._exit(0)


def _made() -> tuple[int | None, str]:
    """P: the probe's namespace (an fd), or None and why it cannot be had (`refusal`)."""
    if "userns" in hidden():
        return None, f"hidden by {HIDE_ENV}"
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the probe, which never returns
                mine.close()
                _probe(theirs)
        finally:
            theirs.close()
        try:
            msg, fds, _, _ = socket.recv_fds(mine, 4096, 1)
        finally:
            os.waitpid(pid, 0)
    except OSError as exc:
        return None, f"cannot probe user namespaces: {exc.strerror}"
    finally:
        mine.close()
    if msg == b"ok" and len(fds) == 1:
        return fds[0], ""
    for fd in fds:
        os.close(fd)
    return None, refusal(msg.decode(errors="replace") or "the probe said nothing")


def probe() -> str | None:
    """Why user namespaces cannot be had by this process (`refusal`), or None where they can:
    the probe of step 1 alone (a fork), for a process that is single-threaded."""
    fd, why = _made()
    if fd is None:
        return why
    os.close(fd)
    return None


def enter(parent: int, keep: tuple[int, ...]) -> str | None:
    """Steps 1 to 3 of the module docstring. Returns None in S, the spawner to serve (in pidns
    mode); returns why not in P where user namespaces cannot be had (P is then as it was,
    for keeper mode). In P, past the fork, never returns: it exits with S's status.

    `parent`: the supervisor's pid; `keep`: the fds that are S's (P closes them).
    """
    fd, why = _made()
    if fd is None:
        return why
    try:
        if libc.setns(fd, CLONE_NEWUSER) != 0:
            return refusal(failure("setns(user namespace)"))
    finally:
        os.close(fd)
    # (From here P is in the namespace: a failure is fatal, not a fallback to keepers.)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the supervisor died before that took hold
        os._exit(1)
    if libc.unshare(CLONE_NEWPID) != 0:
        sys.exit(failure("unshare(CLONE_NEWPID)"))
    alive_r, alive_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        poll = select.poll()
        poll.register(alive_r, select.POLLIN)
        if poll.poll(0):  # end of file: P died before the line above took hold
            os._exit(1)
        os.close(alive_r)
        global entered  # noqa: PLW0603 - one fact about this process, set once
        entered = True
        return None
    os.close(alive_r)
    _wait_for(pid, keep)
    raise AssertionError("unreachable")  # pragma: no cover


def _wait_for(pid: int, keep: tuple[int, ...]) -> None:
    """P after the fork: holds nothing of S's, waits for S, exits as it did."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    for fd in keep:
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    os._exit(128 + sig if sig else os.WEXITSTATUS(status))
