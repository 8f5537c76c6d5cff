"""A sandboxed spawn (profiles strict and net): a disposable, pre-armed thread of the spawner.

Standard library only. The pidns spawner keeps one `Jail` armed: a thread that has already
left the spawner's PID, mount, IPC and UTS namespaces (`unshare` of those acts on the calling
thread only), made its mount tree private, read-only and nosuid, and waits. A request then
costs only what depends on it, on the thread (`confine.py` says why all of it stays there):
0. the paths Landlock will allow (read and write paths, devices) are opened, once
   (`grants.py`): they are the covers' bind sources, the grants' mount sources and the
   Landlock rules alike;
1. mounts in its namespace (`view.py`): the scratch directory becomes a size-limited tmpfs,
   each writable or mapped grant is attached as a copy of its tree (idmapped: its owner the
   hook's user, `idmap.py`), and where the hook's user could not reach a path it needs, a
   small tmpfs covers that ancestor with only the needed paths bound into it;
2. its working directory; for strict, the spawner's empty network namespace (made once at
   start, shared: with no TCP, no UDP and no Unix socket allowed, there is nothing in it to
   reach, and nothing a hook can change);
3. the hook's uid and gid (rootless instead: a user namespace of its own, no capability in
   it, `userns.py`), `no_new_privs`, Landlock (a ruleset of its own), seccomp;
4. `posix_spawn`: the child is PID 2 of a fresh PID namespace, after its reaper (`reapers.py`),
   with all of the above (where
   the chain runs, root's child or a rootless one does step 3 itself, `chained.py`, and the
   spawner's own thread does the rest, `inline.py`: this thread is for where it does not).
   The thread answers, closes the fds of step 0 and ends; the spawner arms the next one
   while the child runs. Resource limits are per process: the spawner lends
   its soft limits for the spawn and sets the hard ones right after (`borrowing.py`);
   where they cannot be lent, the thread forks and the fork sets them itself.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import resource
from collections.abc import Callable

from . import chain, chained, confine, fdslots, landlock, libc, memcg, seccomp, userns, view
from .grants import Grants, open_path
from .reapers import Reaper
from .spawnreq import Request, Sandbox
from .start import StartError, fork_exec, resolve, start_failed

_ARM_FLAGS = libc.CLONE_NEWPID | libc.CLONE_NEWNS | libc.CLONE_NEWIPC | libc.CLONE_NEWUTS


class Spawned:
    """A jailed spawn's pid, and its scratch tmpfs when it is returned; `cgroup`: the memory
    cgroup it started in (`memcg.py`), set by the jail that started it; `listener`: an
    `egress` child's proxy socket (till sent) and network namespace (`loopback.py`)."""

    def __init__(self, pid: int, scratch_fd: int | None) -> None:
        self.pid = pid
        self.scratch_fd = scratch_fd
        self.cgroup: memcg.Cgroup | None = None
        self.listener: int | None = None
        self.net: int | None = None
        self.reaper: Reaper | None = None  # (the init of its namespace)

    def close(self) -> None:
        """Closes the fds held for a child that was killed and reaped before it was kept."""
        for fd in (self.scratch_fd, self.listener, self.net):
            if fd is not None:
                os.close(fd)
        self.scratch_fd = self.listener = self.net = None


class Jail:
    """One armed thread; `spawn` uses it up. See the module docstring.

    A bare `_thread` with three locks rather than a `threading.Thread`: the spawner makes one
    per sandboxed child, and the thread is never joined (it ends right after its spawn; the
    child holds what it needs of it).
    """

    def __init__(
        self,
        empty_net: int | None,
        home_pid: int | None,
        cgroup: memcg.Cgroup | None = None,
        no_cgroup: str | None = None,
    ) -> None:
        self._empty_net = empty_net
        self.egress_net: int | None = None
        self._home_pid = home_pid
        #: The memory cgroup the thread joins before it arms, so that its child starts there
        #: (`no_cgroup`: why the one it needed could not be made; it then serves no request).
        self.cgroup = cgroup
        self._no_cgroup = no_cgroup
        self._armed = _thread.allocate_lock()
        self._go = _thread.allocate_lock()
        self._done = _thread.allocate_lock()
        for lock in (self._armed, self._go, self._done):
            lock.acquire()
        self._work: Callable[[list[Grants]], Spawned] | None = None
        self._result: Spawned | BaseException | None = None
        #: Why this thread could not arm (namespaces, mounts), or None.
        self.broken: str | None = None
        self.reaper: Reaper | None = None  # (made once armed)
        try:
            _thread.start_new_thread(self._run, ())
        except RuntimeError:  # (threads refused since the spawner started: a pids limit)
            self.broken = libc.no_thread_said().replace("\n", "; ")
            self._result = StartError(f"sandbox: {self.broken}")
            self._armed.release()
            self._done.release()  # (`spawn` takes the refusal at once)

    def wait_armed(self) -> str | None:
        with self._armed:
            return self.broken

    def _run(self) -> None:
        try:
            if self._home_pid is not None:  # the creating thread may be armed for a child
                libc.setns(self._home_pid, libc.CLONE_NEWPID, "own PID namespace")
            if self._no_cgroup is not None:
                raise StartError(self._no_cgroup)
            if self.cgroup is not None:  # (before the mount tree is read-only)
                self.cgroup.join()
            arm(pid=True)
            self.reaper = Reaper.made()
        except (OSError, StartError) as exc:
            self.broken = libc.said(exc)
        self._armed.release()
        self._go.acquire()
        later: list[Grants] = []
        try:
            if self.broken is not None:
                raise StartError(f"sandbox: {self.broken}")
            assert self._work is not None
            self._result = self._work(later)
        except BaseException as exc:
            self._result = exc
        self._done.release()
        for grants in later:  # after the reply: the child does not wait for fds to close
            grants.close()

    def release(self) -> None:
        """Lets an unused thread end (the spawner is closing)."""
        self._unused()
        self._work = None
        self.broken = self.broken or "closed"
        self._go.release()

    def spawn(self, req: Request, uid: int | None, borrowed: bool) -> Spawned:
        """Starts `req` from the thread, confined by `req.sandbox`; raises `StartError`.

        `borrowed`: this process carries the child's soft limits for the spawn; else the
        thread forks and the fork sets the limits. An `egress` child's network namespace is
        `egress_net`, set by the caller (`loopback.Spare`).
        """
        assert req.sandbox is not None
        sandbox = req.sandbox
        if self.cgroup is not None and sandbox.memory_bytes:
            try:
                self.cgroup.limit(sandbox.memory_bytes)
            except OSError as exc:
                raise StartError(f"sandbox: cannot bound memory: {exc.strerror}") from exc
        self._work = lambda later: _jailed(
            req,
            sandbox,
            uid,
            self.egress_net if sandbox.egress else self._empty_net,
            borrowed=borrowed,
            later=later,
            home=self._home_pid,
        )
        self._go.release()
        self._done.acquire()
        result = self._result
        if isinstance(result, BaseException):
            self._unused()
            if isinstance(result, StartError):
                raise result
            raise StartError(f"sandbox: {result}") from result
        assert result is not None
        result.cgroup = self.cgroup
        result.reaper = self.reaper
        return result

    def _unused(self) -> None:
        """Its reaper, which no child joined, killed and reaped: here, not by the thread,
        which may have taken a hook's uid."""
        self.wait_armed()
        if self.reaper is not None:
            self.reaper.discard()
            self.reaper = None


def _jailed(
    req: Request,
    sandbox: Sandbox,
    uid: int | None,
    empty_net: int | None,
    *,
    borrowed: bool,
    later: list[Grants],
    home: int | None,
) -> Spawned:
    """Runs on the armed thread: steps 0 to 4 of the module docstring. `later`: what to
    close once the spawner has its answer (the grants' fds)."""
    scratch_fd, seal = prepare(req, sandbox, uid, empty_net, home=home)
    later.append(seal.grants)
    try:
        program = resolve(req.argv[0], req.env.get("PATH", os.defpath))
        if not borrowed and userns.entered and chain.available():
            return Spawned(seal.chained(req, program), scratch_fd)
        if not borrowed:
            return Spawned(fork_exec(req, program, seal), scratch_fd)
        seal.apply()
        try:
            return Spawned(req.posix_spawn(program), scratch_fd)
        except OSError as exc:
            raise start_failed(program, exc, req) from exc
    except BaseException:
        if scratch_fd is not None:
            os.close(scratch_fd)
        raise


class Seal:
    """Step 3 of the module docstring, to call last in the thread or process that then starts
    the child (`prepare` makes it): the hook's uid and gid, `no_new_privs`, Landlock (its
    `grants` and the scratch), seccomp. Calling it applies all that and closes the grants'
    fds; `close` (idempotent) closes them where it is never called."""

    def __init__(
        self,
        grants: Grants,
        uid: int | None,
        cwd: str,
        sandbox: Sandbox,
        notes: dict[str, str] | None = None,
    ) -> None:
        self.grants = grants
        self._uid = uid
        self._cwd = cwd
        self._sockets = sandbox.families
        #: Why a grant is not mapped (`view.build`), for the message when it cannot be read.
        self._notes = notes or {}
        #: Rootless: the processes limit, set in the child's own user namespace (`prepare`).
        self.nproc: list[tuple[int, int, int]] = []
        #: Memory bounded without a cgroup (`memcg.py`): `memfd_create` refused, and
        #: rootless, creating SysV shm (the IPC namespace's limits are its root's to write).
        self.no_memfd = bool(sandbox.memory_bytes) and memcg.STATE.hierarchy is None
        #: Root, where the child makes its own IPC namespace (`chained`): the SysV shared
        #: memory bound it writes there without a cgroup (0: none, or written already).
        self.shm_bytes = 0

    def __call__(self) -> None:
        try:
            self.apply()
        finally:
            self.close()

    def apply(self) -> None:
        """What calling does, but the grants' fds stay open (cheaper closed after the spawn;
        they are close-on-exec)."""
        if self._uid is not None:
            confine.become(self._uid, self._uid)
            confine.check_reachable(self._cwd, "working directory", self._notes)
        elif userns.entered:  # rootless: its own user namespace, and no capability in it
            userns.own_namespace(self.nproc)
            userns.drop_capabilities()
        confine.no_new_privs()
        assert self.grants.ruleset is not None
        self.grants.ruleset.restrict()
        no_shm = self.no_memfd and userns.entered
        seccomp.install(self._sockets, no_memfd=self.no_memfd, no_shm=no_shm)

    def chained(
        self,
        req: Request,
        program: str,
        net: int | None = None,
        new: int = 0,
        cgroup: memcg.Cgroup | None = None,
        *,
        slots: fdslots.Slots | None = None,
    ) -> int:
        """Starts `req`, the child carrying out this seal itself (entering `net`, unsharing
        `new` first; root: joining `cgroup`, then its uid), without a fork of the spawner
        (`chained.py`); with `slots`, from an fd table of its own (`fdslots.py`)."""
        assert self.grants.ruleset is not None and self.grants.ruleset.fd is not None
        limits, fd = [*req.limits, *self.nproc], self.grants.ruleset.fd
        root = None
        if self._uid is not None:
            tasks = cgroup.tasks if cgroup is not None else None
            root = chained.Root(self._uid, self._cwd, tasks, self.shm_bytes)
        try:
            with contextlib.ExitStack() as stack:
                small = None
                if slots is not None:
                    small, (fd,) = stack.enter_context(slots.holding(req, [fd]))
                return chained.start(
                    req,
                    program,
                    limits=limits,
                    ruleset_fd=fd,
                    sockets=self._sockets,
                    enter_net=net,
                    unshare=new,
                    no_memfd=self.no_memfd,
                    root=root,
                    small=small,
                )
        except chain.ChainError as exc:  # (only its working directory's check comes here)
            assert self._uid is not None
            raise confine.unreachable(
                self._cwd, "working directory", self._notes, self._uid
            ) from exc

    def close(self) -> None:
        self.grants.close()


def ready_filters() -> None:
    """Builds (cached) every seccomp filter a `Seal` may install here, for the forks made
    after: a warm fork builds none on its request's way (`warmpool.py`). Arguments by
    position, as `seccomp.install` passes them (the cache's key)."""
    for no_memfd in {False, memcg.STATE.hierarchy is None}:
        for sockets in seccomp.SOCKET_FAMILIES:
            seccomp.seccomp_program(sockets, no_memfd, no_memfd and userns.entered)


def prepare(
    req: Request,
    sandbox: Sandbox,
    uid: int | None,
    empty_net: int | None,
    *,
    home: int | None = None,
    enter_net: bool = True,
    own_ipc: bool = True,
) -> tuple[int | None, Seal]:
    """Steps 0 to 2 of the module docstring on an armed thread or process (`arm`): the
    grants, the view (`view.py`), the working directory, the network. Returns the scratch fd
    to copy back (or None) and step 3, `seal`, to call last, in the thread or process that
    then runs the child. `home`: an fd of the spawner's own PID namespace, for the helper
    child of an idmapped grant (`idmap.userns`; None in a fork, whose children may be made
    as it is); not `enter_net`: the child enters `empty_net` itself (`inline.py`); not
    `own_ipc`: this thread is in the spawner's IPC namespace, and the child makes its own
    (`inline.py`; else, without a memory cgroup, the thread's gets the shm limits here).
    """
    ids = (uid, uid) if uid is not None else (os.getuid(), os.getgid())
    if uid is not None:
        confine.give_pipes(req, uid)
    no_cgroup = sandbox.memory_bytes and memcg.STATE.hierarchy is None
    if own_ipc and no_cgroup and not userns.entered:
        try:  # (the IPC namespace `arm` made: no memory cgroup, so its shm is bounded)
            memcg.write_shm_limits(sandbox.memory_bytes)
        except OSError as exc:
            raise StartError(f"sandbox: cannot bound shared memory: {exc.strerror}") from exc
    grants = Grants(sandbox.read, sandbox.devices, net=sandbox.sockets, write=sandbox.write)
    try:
        # Only a per-child uid owns nothing: rootless, the hook's uid is the caller's own.
        scratch_fd, notes = view.build(sandbox, ids, grants.read, mapped=uid is not None, home=home)
        try:
            scratch = open_path(sandbox.scratch)
            if scratch is None:
                raise StartError(f"sandbox: scratch {sandbox.scratch} is gone")
            try:
                assert grants.ruleset is not None
                grants.ruleset.add([(scratch, landlock.ALL_BENEATH)])
            finally:
                os.close(scratch)
            req.chdir()
            if not sandbox.net and enter_net:  # (`egress`: its own, `loopback.Spare`)
                if empty_net is None:
                    raise StartError("sandbox: no network namespace")
                libc.setns(empty_net, libc.CLONE_NEWNET, "network namespace")
        except BaseException:
            if scratch_fd is not None:
                os.close(scratch_fd)
            raise
    except BaseException:
        grants.close()
        raise
    seal = Seal(grants, uid, req.cwd, sandbox, notes)
    if uid is not None and not own_ipc and no_cgroup:
        seal.shm_bytes = sandbox.memory_bytes
    if userns.entered:  # rootless: RLIMIT_NPROC waits for the child's own user namespace
        seal.nproc = [lim for lim in req.limits if lim[0] == resource.RLIMIT_NPROC]
        req.limits = [lim for lim in req.limits if lim[0] != resource.RLIMIT_NPROC]
    return scratch_fd, seal


def arm(*, pid: bool) -> None:
    """Leaves the mount, IPC and UTS namespaces (and with `pid`, makes the next child the init
    of a new PID namespace) and makes the mount tree private, read-only and nosuid: what a
    thread or a single-threaded process does before a request needs it. Raises `OSError` or
    `StartError`."""
    flags = _ARM_FLAGS if pid else _ARM_FLAGS & ~libc.CLONE_NEWPID
    libc.unshare(flags, "namespaces (pid, mount, ipc, uts)" if pid else "namespaces")
    view.mount(None, "/", None, view.MS_REC | view.MS_PRIVATE, "")
    view.read_only_tree()
    # Rootless: a child writes the maps of its own user namespace there; root without a
    # memory cgroup: `prepare` writes the new IPC namespace's shm limits there (rootless
    # they are the namespace's root's to write, which no hook maps: `shmget` is refused).
    if userns.entered or memcg.STATE.hierarchy is None:
        userns.writable_proc()
