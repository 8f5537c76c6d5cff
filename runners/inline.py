"""Rootless, where the chain runs: a sandboxed child started from the spawner's own thread.

Standard library only. A jail thread (`jail.py`) exists because what seals a child (its uid,
`no_new_privs`, Landlock, seccomp) acts on the calling thread for good: root's thread is
sealed, then spawns, then ends. Rootless with the chain (`chained.py`), the child seals
itself and the thread is never sealed: what it holds for the child is only namespaces (the
mount view, the next PID namespace) and its working directory, which a thread can enter and
leave, and the rest the child can make itself. So the spawner's own thread takes the steps
itself, and comes back:

1. enters `template` (a mount namespace made once: the tree private, read-only and nosuid,
   /proc writable, as `jail.arm` makes it) and unshares a copy of it for this child (ahead,
   while the last child runs: `arm`; the thread is armed for a PID 1 already, `pidns.py`);
2. `jail.prepare`: the grants, the view, the working directory;
3. the chain, which starts the child in all of that, and in which the child enters the
   empty network and makes IPC and UTS namespaces of its own before its user namespace;
4. back to its own mount namespace and `/`, whatever happened (a thread that cannot come
   back raises `Broken`: the spawner must not spawn again).
Its own mount namespace is a copy of the host's, made when the spawner starts (a thread can
only come back to a namespace the spawner's user namespace owns): what the spawner starts
unsandboxed sees the mounts it saw then, and those that propagate from the host.
No thread is made, armed or woken for a child, and no message passes between threads on its
way: measured here about 0.1 ms of each hook's start.
"""

from __future__ import annotations

import ctypes
import os

from . import jail, libc, view
from .borrowing import Broken
from .jail import Spawned
from .mechanisms import Mechanisms, made_on_a_thread
from .spawnreq import Request
from .start import StartError, resolve
from .userns import writable_proc

_CLONE_FS = 0x00000200
#: What the child makes itself, before its user namespace: IPC and UTS namespaces of its own.
#: (The thread's own stay the host's, for what the spawner starts unsandboxed.)
CHILD_NAMESPACES = libc.CLONE_NEWIPC | libc.CLONE_NEWUTS


def _arm_mounts() -> None:
    """A mount namespace as an armed jail thread has it (`jail.arm`, but the other
    namespaces: the child makes its own)."""
    libc.unshare(libc.CLONE_NEWNS, "mount namespace")
    view.mount(None, "/", None, view.MS_REC | view.MS_PRIVATE, "")
    view.read_only_tree()
    writable_proc()


def made(sandbox: Mechanisms) -> InlineJail | None:
    """An `InlineJail` on this thread where the mechanisms it needs are here, else None (the
    spawner then keeps its jail threads)."""
    if "pidns" in sandbox.missing or "mountns" in sandbox.missing:
        return None
    try:
        return InlineJail(sandbox.empty_net)
    except OSError:
        return None


class InlineJail:
    """Steps 1 to 4 of the module docstring, on the thread that makes it (the spawner's
    main thread, which must stay the one that calls `spawn`)."""

    def __init__(self, empty_net: int | None) -> None:
        # A thread may enter a mount namespace only with a filesystem context of its own, and
        # come back only to one this process owns: a copy of the host's, made now.
        libc.unshare(_CLONE_FS | libc.CLONE_NEWNS, "a mount namespace of its own")
        self._empty_net = empty_net
        self._home = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        self._template = made_on_a_thread(_arm_mounts, "mnt")
        #: In a copy of `template` made ahead (`arm`), rather than at home.
        self.armed = False

    def arm(self) -> None:
        """Step 1 ahead of the next request (while the last child runs): this thread stays
        in the copy until `spawn` uses it or `disarm` (before anything this thread starts
        or writes by path must see the spawner's own tree). Raises `OSError`."""
        if self.armed:
            return
        try:
            libc.setns(self._template, libc.CLONE_NEWNS, "the armed mount namespace")
            libc.unshare(libc.CLONE_NEWNS, "a mount namespace")
        except BaseException:
            self._come_back()
            raise
        self.armed = True

    def disarm(self) -> None:
        """Back home (`Broken` if it cannot), having left a copy unused, if armed."""
        if self.armed:
            self._come_back()

    def spawn(self, req: Request, home_pid: int) -> Spawned:
        """Starts `req` confined by `req.sandbox`, its uid the caller's; raises
        `StartError`, or `Broken` if this thread could not come back."""
        assert req.sandbox is not None
        try:
            self.arm()
            scratch_fd, seal = jail.prepare(
                req,
                req.sandbox,
                None,
                self._empty_net,
                home=home_pid,
                enter_net=False,
                own_ipc=False,
            )
            try:
                program = resolve(req.argv[0], req.env.get("PATH", os.defpath))
                net = None if req.sandbox.net else self._empty_net
                if net is None and not req.sandbox.net:
                    raise StartError("sandbox: no network namespace")
                pid = seal.chained(req, program, net, CHILD_NAMESPACES)
                return Spawned(pid, scratch_fd)
            except BaseException:
                if scratch_fd is not None:
                    os.close(scratch_fd)
                raise
            finally:
                seal.close()  # (the child has its own copies, or exec'd and closed them)
        except OSError as exc:  # (a namespace refused; what else could fail says it itself)
            raise StartError(f"sandbox: {exc}") from exc
        finally:
            self._come_back()

    def _come_back(self) -> None:
        if libc.libc.setns(self._home, libc.CLONE_NEWNS) != 0:
            err = ctypes.get_errno()
            raise Broken(f"cannot return to the spawner's mount namespace: {os.strerror(err)}")
        os.chdir("/")
        self.armed = False
