"""pidns mode: every child has a PID namespace of its own, whose init is its reaper (see
`spawner.py`, `reapers.py`). Stdlib only."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import socket
from collections.abc import Callable, Iterator

from . import chain, chained, fdslots, inline, jail, loopback, memcg, reapers, warm
from .borrowing import (
    CAP_SYS_RESOURCE,
    Broken,
    borrowable,
    borrowed,
    full_uid_map,
    has_capability,
    open_files_after,
    seal_limits,
    soft_only,
)
from .collect import Output
from .libc import CLONE_NEWPID, libc
from .mechanisms import Mechanisms
from .protocol import LIFELINE_FD, TakenCounter, control, fail, recv_request
from .spawnreq import Request
from .start import BAD_INPUT, StartError, fork_exec, resolve, start_failed
from .treeends import TreeEnds
from .trees import Held, Tree, UidPool, alone, host_pid
from .warmpool import WarmPool


class PidNsSpawner(TreeEnds):
    """The pidns-mode loop: one epoll over requests, the lifeline, pidfds and control sockets."""

    def __init__(self, requests: socket.socket, sandbox: Mechanisms, taken: TakenCounter) -> None:
        self.requests = requests
        self.taken = taken
        self.sandbox = sandbox
        self.uids = UidPool()
        self.jail = sandbox.new_jail()
        self.home = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.root = os.getuid() == 0 and full_uid_map()
        # Raising a hard limit takes CAP_SYS_RESOURCE in the host's user namespace: the one
        # a rootless spawner holds in its own (`userns.py`) does not count.
        self.raise_hard = full_uid_map() and has_capability(CAP_SYS_RESOURCE)
        self.epoll = select.epoll()
        self.trees: dict[int, Tree] = {}  # by pidfd and by control socket fd
        self.held = Held()
        self.slots = fdslots.made()
        requests.setblocking(False)
        self.epoll.register(requests.fileno(), select.EPOLLIN)
        self.epoll.register(LIFELINE_FD, select.EPOLLIN)
        os.chdir("/")  # keep no directory busy
        self.armed = False
        #: The init made for the namespace armed here, for the next child (`reapers.py`), and
        #: whether the last one could be made (if not, this loop does not try when idle).
        self.pending: reapers.Reaper | None = None
        self.idle: list[reapers.Reaper] = []
        self.ending: list[Tree] = []
        self.reaping = True
        self.spare = loopback.Spare()  # (for `egress` children)
        #: Whether the last request was a sandboxed `run` child (only then is the inline jail
        #: armed ahead: an unsandboxed child would pay ~0.07 ms to come back from it).
        self.jailed_last = True
        #: Where the chain runs, sandboxed children start from this thread (`inline.py`).
        self.inline: inline.InlineJail | None = None
        if chain.available() and self.jail is not None:
            self.inline = inline.made(sandbox)
            if self.inline is not None:
                self.jail.release()
                memcg.drop(self.jail.cgroup)
                self.jail = None
        self._arm(quietly=True)
        warm.ready_spawner()
        self.warm = WarmPool(sandbox, self._fresh_pid_ns)

    def serve(self) -> None:
        """Returns at end of file on the lifeline, having killed and reaped every tree."""
        try:
            while True:
                self.held.announce_due()
                cgroups = memcg.STATE.hierarchy
                pending = cgroups is not None and cgroups.pending
                try:
                    # Idle (nothing ready at once): fork what waits for module requests, and
                    # remove finished trees' cgroups (not on a request's way; soon, idle).
                    wanted = self.warm.wanted() or self._reaper_wanted()
                    wait = 0 if wanted else memcg.SWEEP_AFTER_S if pending else -1
                    events = self.epoll.poll(self.held.wait(wait))
                except InterruptedError:
                    continue
                if cgroups is not None and (not events or cgroups.overdue()):
                    cgroups.sweep()
                if not events:
                    if self._reaper_wanted():
                        self._arm(quietly=True)
                    else:
                        self.warm.fork_wanted()
                    continue
                for fd, _ in events:
                    if fd == self.requests.fileno():
                        self.end_batch()  # (said before a spawn, not after it)
                        self._accept()
                    elif fd == LIFELINE_FD:
                        if not os.read(LIFELINE_FD, 64):
                            return
                    elif (tree := self.trees.get(fd)) is not None:
                        self._tree_event(tree, fd)
                self.end_batch()
        finally:
            if self.jail is not None:
                self.jail.release()
                memcg.drop(self.jail.cgroup)
            if self.inline is not None:  # (removed by its name: from wherever this thread is)
                self.inline.discard()
            self.warm.discard()
            for reaper in (*self.idle, self.pending):
                if reaper is not None:
                    reaper.discard()
            for tree in set(self.trees.values()):
                tree.signal(signal.SIGKILL)
            for tree in set(self.trees.values()):
                tree.wait()
                memcg.drop(tree.cgroup)
            if memcg.STATE.hierarchy is not None:
                memcg.STATE.hierarchy.finish()

    def _accept(self) -> None:
        while True:
            try:
                got = recv_request(self.requests)
            except (BlockingIOError, InterruptedError):
                return
            if got is None:  # the supervisor closed its end; the lifeline says when to go
                self.epoll.unregister(self.requests.fileno())
                return
            # Counted before anything can start it, even one dropped (`protocol.TakenCounter`).
            self.taken.count()
            msg, fds = got
            if fds and (ctrl := control(fds)) is not None:  # else dropped, fds closed
                self._start(msg, ctrl, fds[1:])

    def _start(self, msg: bytes, ctrl: socket.socket, fds: list[int]) -> None:
        """Starts the child of one request and keeps it; a request it cannot carry out is
        failed on `ctrl` alone, with whatever it held closed."""
        spawned: jail.Spawned | None = None
        reaper: reapers.Reaper | None = None
        uid: int | None = None
        req: Request | None = None
        try:
            req = Request(msg, fds)
            self.jailed_last = req.sandbox is not None and req.module is None
            try:
                if req.module is not None:
                    if req.sandbox is not None and req.sandbox.switch_uid:
                        uid = self.uids.take()
                    spawned = self.warm.spawn(req, msg, uid)
                    pid, reaper = spawned.pid, spawned.reaper
                elif req.sandbox is None:
                    pid, reaper = self._spawn(req)
                else:
                    uid = self.uids.take() if req.sandbox.switch_uid else None
                    spawned = self._spawn_jailed(req, uid)
                    pid, reaper = spawned.pid, spawned.reaper
            finally:
                req.close()
        except (StartError, *BAD_INPUT) as exc:
            if uid is not None:
                self.uids.give(uid)
            if req is not None:
                req.drop_outputs()
            fail(ctrl, str(exc) if isinstance(exc, StartError) else f"cannot start: {exc}")
            ctrl.close()
            self._rearm()
            return
        try:
            pidfd = os.pidfd_open(pid)
            try:
                host = host_pid(pidfd)
            except OSError:
                os.close(pidfd)
                raise
        except OSError as exc:  # out of fds: do not keep what cannot be watched
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if reaper is not None:
                reaper.discard()
            if spawned is not None:
                spawned.close()
                memcg.drop(spawned.cgroup)
            req.drop_outputs()
            fail(ctrl, f"cannot watch the child: {exc.strerror}")
            ctrl.close()
            self._rearm()
            return
        tree = Tree(pid, pidfd, host, ctrl)
        tree.uid = uid
        tree.reusable = req.sandbox is None and req.module is None
        if reaper is not None:
            tree.reaper = reaper
            self.trees[reaper.pidfd] = tree
            self.epoll.register(reaper.pidfd, select.EPOLLIN)
        if req.outputs is not None:
            assert req.collect is not None
            tree.collect = req.collect
            for fd, ring in zip(req.outputs, (0, req.collect.stderr), strict=True):
                os.set_blocking(fd, False)
                tree.outputs.append(Output(fd, ring))
                self.trees[fd] = tree
                self.epoll.register(fd, select.EPOLLIN)
        if spawned is not None and spawned.scratch_fd is not None:
            assert req.sandbox is not None
            tree.scratch = (spawned.scratch_fd, req.sandbox.scratch)
        if spawned is not None and spawned.cgroup is not None:
            tree.cgroup = spawned.cgroup  # (its OOM notifications kill the tree)
            self.trees[tree.cgroup.event] = tree
            self.epoll.register(tree.cgroup.event, select.EPOLLIN)
        tree.net = loopback.hand_over(ctrl, spawned)  # (an `egress` child's, before "started")
        self.held.started(tree, held=req.collect is not None)
        self.trees[pidfd] = self.trees[ctrl.fileno()] = tree
        self.epoll.register(pidfd, select.EPOLLIN)
        self.epoll.register(ctrl.fileno(), select.EPOLLIN)
        self._rearm()

    def _spawn(self, req: Request) -> tuple[int, reapers.Reaper | None]:
        """Starts an unsandboxed child in a namespace whose reaper is alone (`idle`), or in the
        one armed here; returns its pid and that reaper."""
        self._at_home()
        req.chdir()
        try:
            program = resolve(req.argv[0], req.env.get("PATH", os.defpath))
            reaper = self._enter_idle()
            try:
                pid = self._spawn_here(req, program)
            except BaseException:
                if reaper is not None and alone(reaper):
                    self.idle.append(reaper)
                elif reaper is not None:
                    reaper.discard()
                raise
            return pid, reaper if reaper is not None else self._take_reaper()
        finally:
            os.chdir("/")

    def _spawn_here(self, req: Request, program: str) -> int:
        try:
            if (pid := self.slots.start(req, program, self.trees)) is not None:
                return pid
            if not req.limits:
                return req.posix_spawn(program)
            lend, after = open_files_after(req.limits, self._highest_fd(req))
            if not borrowable(lend, self.root, self.raise_hard):
                if chain.available():  # (raises StartError itself)
                    return chained.start(req, program, limits=req.limits)
                return fork_exec(req, program)
            with borrowed(req, lend):
                pid = req.posix_spawn(program)
            for number, soft, hard in after:
                try:
                    resource.prlimit(pid, number, (soft, hard))
                except (OSError, ValueError) as exc:  # ValueError: soft above hard
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    raise StartError(f"cannot set {req.limit_names[number]}: {exc}") from exc
            return pid
        except OSError as exc:
            raise start_failed(program, exc, req) from exc
        finally:
            self._disarm()  # a namespace whose init came and went takes no process

    def _spawn_jailed(self, req: Request, uid: int | None) -> jail.Spawned:
        """Starts a sandboxed child from this thread (it seals itself, `inline.py`) or the armed
        jail thread (`jail.py`; soft limits lent for the spawn, hard ones set after)."""
        assert req.sandbox is not None
        if missing := self.sandbox.missing_for(req.sandbox):
            raise StartError(f"sandbox: cannot be enforced here: missing {', '.join(missing)}")
        with self.spare.take(req, self._disarm) as egress:  # (before arming: `loopback.py`)
            if self.inline is None:
                return egress.keep(self._spawn_in(req, uid, egress.net))
            self.inline.loopback = egress.net
            self._arm()
            try:
                slots = self.slots.ready(req, self.trees, 1)
                spawned = egress.keep(self.inline.spawn(req, self.home, uid, slots))
                spawned.reaper = self._take_reaper()
                return spawned
            finally:
                self._disarm()

    def _spawn_in(self, req: Request, uid: int | None, net: int | None) -> jail.Spawned:
        current, self.jail = self.jail, None
        assert current is not None
        current.egress_net = net
        try:
            if self.sandbox.userns:  # rootless: by fork, for the child's own user namespace
                return current.spawn(req, uid, borrowed=False)
            # (`seal_limits` sets every limit, open files included, right after.)
            soft, _ = open_files_after(soft_only(req.limits), self._highest_fd(req))
            if not borrowable(soft, self.root, self.raise_hard):
                return current.spawn(req, uid, borrowed=False)
            with borrowed(req, soft):
                spawned = current.spawn(req, uid, borrowed=True)
            try:
                seal_limits(spawned.pid, uid, req.limits, req.limit_names)
            except StartError:
                os.kill(spawned.pid, signal.SIGKILL)
                os.waitpid(spawned.pid, 0)
                spawned.close()
                raise
            return spawned
        except BaseException:
            memcg.drop(current.cgroup)  # (nothing started in it)
            raise
        finally:
            self._disarm()  # (`_rearm` makes the next jail thread)

    @contextlib.contextmanager
    def _fresh_pid_ns(self) -> Iterator[Callable[[], reapers.Reaper | None]]:
        """The next process this thread creates joins a fresh PID namespace (a waiting
        fork, `warmpool.py`); this thread is armed again after."""
        self._at_home()
        self._arm()
        try:
            yield self._take_reaper
        finally:
            self._disarm()
            self._arm(quietly=True, reaper=False)

    def _reaper_wanted(self) -> bool:
        return self.armed and self.pending is None and self.reaping

    def _take_reaper(self) -> reapers.Reaper | None:
        """The reaper of the namespace armed here, for the child just made in it."""
        reaper, self.pending = self.pending, None
        return reaper

    def _highest_fd(self, req: Request) -> int:
        """The highest fd open here: the trees' and the request's (the rest are few, low)."""
        return max((*self.trees, *req.fds, *req.moved, self.requests.fileno()))

    def _arm(self, *, quietly: bool = False, reaper: bool = True) -> None:
        """Makes the next process created here PID 2 of a fresh PID namespace, after its
        reaper (`reapers.py`; with `reaper`, else the namespace only, its reaper made when
        this loop is idle or the next request needs it), or of the one a request left
        unused. Done ahead of the request, so that neither is on its way."""
        if not self.armed:
            if self.pending is not None:  # (a request it could not start left it unused)
                if libc.setns(self.pending.pidfd, CLONE_NEWPID) == 0:
                    self.armed = True
                    return
                self.pending.discard()
                self.pending = None
            if libc.unshare(CLONE_NEWPID) != 0:
                if quietly:
                    return
                raise StartError(
                    f"cannot create a PID namespace: {os.strerror(ctypes.get_errno())}"
                )
            self.armed = True
        if reaper and self.pending is None:
            self.pending = reapers.made()
            self.reaping = self.pending is not None
            if not self.reaping:  # (one that started and failed took the namespace with it)
                self._disarm()
                self._arm(quietly=quietly, reaper=False)

    def _rearm(self) -> None:
        """Ready for the next request, once this child's owner heard it started: the next jail
        thread (made only while this thread is not armed), then this thread armed."""
        if self.jail is None and self.inline is None:
            self.jail = self.sandbox.new_jail()
        self._arm(quietly=True, reaper=False)
        if self.inline is not None and self.jailed_last:  # (if it cannot: its request says)
            with contextlib.suppress(OSError):
                self.inline.arm()

    def _at_home(self) -> None:
        if self.inline is not None:
            self.inline.disarm()

    def _disarm(self) -> None:
        if self.armed:
            if libc.setns(self.home, CLONE_NEWPID) != 0:
                raise Broken("cannot return to the spawner's PID namespace")
            self.armed = False
