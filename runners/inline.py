"""Where the chain runs: a sandboxed child started from the spawner's own thread.

Standard library only. A jail thread (`jail.py`) exists because what seals a child (its uid,
`no_new_privs`, Landlock, seccomp) acts on the calling thread for good: the thread is sealed,
then spawns, then ends. With the chain (`chained.py`), the child seals itself and the thread
is never sealed: what it holds for the child is only namespaces (the mount view, the next
PID namespace) and its working directory, which a thread can enter and leave, and the rest
the child can make itself. So the spawner's own thread takes the steps itself, and comes
back:

1. enters `template` (a mount namespace made once: the tree private, read-only and nosuid,
   /proc writable where a child writes there, as `jail.arm` makes it) and unshares a copy of
   it for this child (ahead, while the last child runs: `arm`, which as root also makes the
   next child's memory cgroup; the thread is armed for a child already, `pidns.py`);
2. `jail.prepare`: as root the pipes given to the per-child uid; the grants, the view (as
   root with its covers and idmapped grants), the working directory;
3. the chain, which starts the child in all of that, and in which the child enters the
   empty network and makes IPC and UTS namespaces of its own, then (rootless) its user
   namespace, or (root) bounds its shared memory or joins its memory cgroup, and later
   becomes the per-child uid;
4. back to its own mount namespace and `/`, whatever happened (a thread that cannot come
   back raises `Broken`: the spawner must not spawn again).
Rootless, its own mount namespace is a copy of the host's, made when the spawner starts (a
thread can only come back to a namespace the spawner's user namespace owns): what the
spawner starts unsandboxed sees the mounts it saw then, and those that propagate from the
host. Root comes back to the host's own.
No thread is made, armed or woken for a child, and no message passes between threads on its
way: measured here about 0.1 ms of each hook's start rootless, and 0.3 ms as root (whose
child also sets its own limits and joins its cgroup, `docs/internals/bench.md`).
"""

from __future__ import annotations

import ctypes
import os

from . import fdslots, jail, libc, memcg, userns, view
from .borrowing import Broken
from .jail import Spawned
from .mechanisms import Mechanisms, made_on_a_thread
from .spawnreq import Request
from .start import StartError, resolve

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
    if userns.entered or memcg.STATE.hierarchy is None:  # (maps, or the shm bound: `arm`)
        userns.writable_proc()


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
        # come back only to one this process owns: rootless, a copy of the host's, made now.
        copy = libc.CLONE_NEWNS if userns.entered else 0
        libc.unshare(_CLONE_FS | copy, "a filesystem context of its own")
        self._empty_net = empty_net
        self._home = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        self._template = made_on_a_thread(_arm_mounts, "mnt")
        #: In a copy of `template` made ahead (`arm`), rather than at home.
        self.armed = False
        #: Root with memory cgroups: the next child's, made ahead (`arm`), or why it is not.
        self.cgroup: memcg.Cgroup | None = None
        self._no_cgroup = ""
        #: The next `egress` child's network namespace (`loopback.Spare`; the caller's).
        self.loopback: int | None = None

    def arm(self) -> None:
        """Step 1 ahead of the next request (while the last child runs): this thread stays
        in the copy until `spawn` uses it or `disarm` (before anything this thread starts
        or writes by path must see the spawner's own tree). Raises `OSError`."""
        if self.armed:
            return
        if memcg.STATE.hierarchy is not None and self.cgroup is None:
            try:  # (at home: its files are opened by path, writable)
                self.cgroup, self._no_cgroup = memcg.STATE.hierarchy.make(), ""
            except OSError as exc:
                self._no_cgroup = f"cannot make the child's memory cgroup: {exc.strerror}"
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

    def discard(self) -> None:
        """Removes the cgroup made ahead for a child that never came (the spawner closes)."""
        memcg.drop(self.cgroup)
        self.cgroup = None

    def spawn(
        self, req: Request, home_pid: int, uid: int | None, slots: fdslots.Slots | None = None
    ) -> Spawned:
        """Starts `req` confined by `req.sandbox` (`uid`: root's per-child uid, else the
        caller's; `slots`: from an fd table of its own; with `egress`, it enters `loopback`, set
        by the caller, who closes it: `loopback.py`); raises `StartError`, or
        `Broken` if this thread could not come back."""
        assert req.sandbox is not None
        cgroup = None
        try:
            self.arm()
            cgroup, self.cgroup = self.cgroup, None
            if memcg.STATE.hierarchy is not None and cgroup is None:
                raise StartError(f"sandbox: {self._no_cgroup or 'no memory cgroup'}")
            if cgroup is not None and req.sandbox.memory_bytes:
                try:
                    cgroup.limit(req.sandbox.memory_bytes)
                except OSError as exc:
                    raise StartError(f"sandbox: cannot bound memory: {exc.strerror}") from exc
            scratch_fd, seal = jail.prepare(
                req,
                req.sandbox,
                uid,
                self._empty_net,
                home=home_pid,
                enter_net=False,
                own_ipc=False,
            )
            try:
                program = resolve(req.argv[0], req.env.get("PATH", os.defpath))
                net = self.loopback if req.sandbox.egress else None
                net = net if net is not None or req.sandbox.net else self._empty_net
                if net is None and not req.sandbox.net:
                    raise StartError("sandbox: no network namespace")
                pid = seal.chained(req, program, net, CHILD_NAMESPACES, cgroup, slots=slots)
                spawned = Spawned(pid, scratch_fd)
                spawned.cgroup, cgroup = cgroup, None  # (the tree's now)
                return spawned
            except BaseException:
                if scratch_fd is not None:
                    os.close(scratch_fd)
                raise
            finally:
                seal.close()  # (the child has its own copies, or exec'd and closed them)
        except OSError as exc:  # (a namespace refused; what else could fail says it itself)
            raise StartError(f"sandbox: {exc}") from exc
        finally:
            self.loopback = None
            try:
                self._come_back()
            finally:  # (at home: it is removed by its path)
                memcg.drop(cgroup)  # (nothing started in it)

    def _come_back(self) -> None:
        if libc.libc.setns(self._home, libc.CLONE_NEWNS) != 0:
            err = ctypes.get_errno()
            raise Broken(f"cannot return to the spawner's mount namespace: {os.strerror(err)}")
        os.chdir("/")
        self.armed = False
