"""What the pidns spawner (`pidns.py`) does as a child's tree ends: the child reaped, its
reaper killed and reaped after it (`reapers.py`) or kept alone in its namespace for the next
unsandboxed child, what the loop held of the tree let go, and the exit report sent. Stdlib
only."""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal

from . import memcg, strays, view
from .collect import send_collected
from .libc import CLONE_NEWPID, libc
from .loopback import Spare
from .protocol import exit_report, send
from .reapers import Reaper
from .strays import pidfd_of
from .trees import Held, Tree, UidPool, alone, living

#: How many reapers alone in their namespace are kept for the next unsandboxed children.
IDLE_REAPERS = 4


class TreeEnds:
    """The end of trees, for `PidNsSpawner`, which holds these:"""

    epoll: select.epoll
    trees: dict[int, Tree]  # by pidfd and by control socket fd
    held: Held
    uids: UidPool
    spare: Spare
    #: Reapers alone in their namespace, for the next unsandboxed children (`_keep_reaper`).
    idle: list[Reaper]
    pending: Reaper | None
    #: Trees whose reaper was left alone, to be ended with the rest of a wake-up's (`end_batch`).
    ending: list[Tree]

    armed: bool

    def _at_home(self) -> None:
        raise NotImplementedError

    def _arm(self) -> None:
        raise NotImplementedError

    def _tree_event(self, tree: Tree, fd: int) -> None:
        """`fd`, one of `tree`'s, is ready (`PidNsSpawner.serve`)."""
        if fd == tree.pidfd:
            self._reap(tree)
        elif tree.reaper is not None and fd == tree.reaper.pidfd:
            self._reaped(tree)
        elif tree.ctrl is not None and fd == tree.ctrl.fileno():
            self._obey(tree)
        elif fd in tree.strays:
            self._stray_gone(tree, fd)
        elif tree.cgroup is not None and fd == tree.cgroup.event:
            self._over_memory(tree)
        else:
            self._read_output(tree, fd)

    def _obey(self, tree: Tree) -> None:
        if tree.obey():  # the owner is gone: killed, reaped without a report
            self._forget_ctrl(tree)

    def _reap(self, tree: Tree) -> None:
        """The child exited: reaped, and its reaper killed, the rest said once the whole
        namespace is gone (`_reaped`); at once for a child that was its namespace's init (a
        warm fork), reaped only after everything else in its namespace was gone, and where
        its reaper is alone there (`trees.alone`): kept for the next unsandboxed child
        (`_keep_reaper`), or killed after the report, reaped after it (`_reaped`)."""
        pid, status, usage = os.wait4(tree.pid, os.WNOHANG)
        if pid == 0:
            return
        self.epoll.unregister(tree.pidfd)
        del self.trees[tree.pidfd]
        os.close(tree.pidfd)
        tree.pidfd, tree.exited = -1, (status, usage)
        reaper = tree.reaper
        if reaper is not None:
            if not alone(reaper):
                self._watch_strays(tree, reaper)
                reaper.kill()
                return
            if not self._keepable(tree):
                self.ending.append(tree)  # (with the rest of this wake-up's: `end_batch`)
                return
            if self._watch_strays(tree, reaper):
                reaper.kill()
                return
            self._keep_reaper(tree, reaper)
        self._ended(tree, status, usage)

    def end_batch(self) -> None:
        """The trees of this wake-up whose child left its reaper alone and which are not kept
        (`_reap`): their namespaces searched for processes the child made its siblings in one
        pass (`strays.siblings_of`; a pass for each tree made a thousand ends at once cost a
        thousand passes over two thousand children). A tree with none is said now and its
        reaper killed after; one with any, or whose namespace /proc cannot say of (that tree
        alone: the rest are said or not as theirs found), has them watched and its reaper
        killed, and is said once all is gone (`_reaped`)."""
        if not self.ending:
            return
        ending, self.ending = [t for t in self.ending if t.reaper is not None], []
        seen = {pid for tree in ending for pid in tree.strays.values()}
        seen.update(strays.host_of(r) for r in self._spare_reapers())
        try:
            hosts = [strays.host_of(t.reaper) for t in ending if t.reaper is not None]
            found: dict[int, list[int] | None] | None = strays.siblings_of(
                hosts, seen, self._kept_hosts
            )
        except OSError:
            found = None
        for tree in ending:
            reaper = tree.reaper
            assert reaper is not None and tree.exited is not None
            pids = None if found is None else found.get(strays.host_of(reaper), [])
            if pids is None or pids:
                self._watch(tree, pids or [])
                reaper.kill()
                continue
            status, usage = tree.exited
            tree.exited = None  # (said now: `_reaped` only lets the reaper go)
            self._ended(tree, status, usage)
            reaper.kill()

    def _watch_strays(self, tree: Tree, reaper: Reaper) -> bool:
        """Finds the processes of `reaper`'s namespace that the child made its siblings, and
        watches them, to be reaped here as they die (`strays.py`); whether there are any (or
        /proc could not say: then the namespace is not kept)."""
        try:
            seen = {*tree.strays.values(), *(strays.host_of(r) for r in self._spare_reapers())}
            found = strays.siblings(strays.host_of(reaper), seen, self._kept_hosts)
        except OSError:
            return True
        self._watch(tree, found)
        return bool(found)

    def _watch(self, tree: Tree, found: list[int]) -> None:
        """Watches `found`, processes `tree`'s child made its siblings, to reap them here."""
        for pid in found:
            try:
                pidfd = pidfd_of(pid)
            except OSError:  # (out of fds: the reaper killed, the spawner's close reaps it)
                continue
            tree.strays[pidfd] = pid
            self.trees[pidfd] = tree
            self.epoll.register(pidfd, select.EPOLLIN)

    def _spare_reapers(self) -> list[Reaper]:
        """The reapers no tree holds: kept alone (`idle`), and the one made ahead."""
        return [*self.idle, self.pending] if self.pending is not None else self.idle

    def _kept_hosts(self) -> set[int]:
        """The host pids of every child kept here (and every reaper), not checked one by one
        (`strays.siblings`)."""
        known: set[int] = set()
        for other in self.trees.values():
            if other.pidfd >= 0:  # (a pid reaped may be a stray's by now)
                known.add(other.host)
            if other.reaper is not None:
                known.add(strays.host_of(other.reaper))
        return known

    def _stray_gone(self, tree: Tree, pidfd: int) -> None:
        """A process the child made its sibling died (its namespace's reaper killed): reaped,
        and any it made meanwhile watched in turn, so that the reaper can go."""
        if os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG) is None:
            return
        self.epoll.unregister(pidfd)
        del self.trees[pidfd], tree.strays[pidfd]
        os.close(pidfd)
        if tree.reaper is not None:
            self._watch_strays(tree, tree.reaper)

    def _keepable(self, tree: Tree) -> bool:
        """Whether the reaper of `tree`, alone in its namespace, may be kept (`_keep_reaper`)."""
        return tree.reusable and len(self.idle) < IDLE_REAPERS

    def _keep_reaper(self, tree: Tree, reaper: Reaper) -> None:
        """Keeps the reaper of a reusable tree, alone in its namespace, for the next
        unsandboxed child to join (PID 3, 4, ... there): no namespace to tear down, no reaper
        to start. Only for unsandboxed children, whose owner never had the reaper's pidfd
        (`Tree.given`); a few at most."""
        self.epoll.unregister(reaper.pidfd)
        del self.trees[reaper.pidfd]
        tree.reaper = None
        self.idle.append(reaper)

    def _reaped(self, tree: Tree) -> None:
        """The reaper is gone, so is its namespace (`reapers.py`)."""
        reaper = tree.reaper
        assert reaper is not None
        if os.waitpid(reaper.pid, os.WNOHANG)[0] == 0:
            return
        self.epoll.unregister(reaper.pidfd)
        del self.trees[reaper.pidfd]
        reaper.close()
        tree.reaper = None
        if tree.exited is not None:
            self._ended(tree, *tree.exited)

    def _enter_idle(self) -> Reaper | None:
        """Makes the next process created here join the namespace of a reaper kept alone
        there (`_keep_reaper`), else arms this thread as for any child."""
        while self.idle:
            reaper = self.idle.pop()
            if living(reaper.pidfd) and libc.setns(reaper.pidfd, CLONE_NEWPID) == 0:
                self.armed = True  # (`_disarm` brings this thread home after the spawn)
                return reaper
            reaper.discard()
        self._arm()
        return None

    def _ended(self, tree: Tree, status: int, usage: resource.struct_rusage) -> None:
        """What this loop held of the tree goes before the report (only what the report
        carries after)."""
        self.held.forget(tree)
        if tree.uid is not None:
            self.uids.give(tree.uid)
        self.spare.give(tree.net)  # (kept for the next `egress` child: `loopback.py`)
        if tree.scratch is not None:
            self._at_home()  # (the scratch goes back by its path in the spawner's tree)
            return_scratch(*tree.scratch)
            tree.scratch = None
        over_memory, cgroup = False, tree.cgroup
        if cgroup is not None:  # (removed after the report: not on the owner's way)
            over_memory = cgroup.notified or (status != 0 and cgroup.over())
            self.epoll.unregister(cgroup.event)
            del self.trees[cgroup.event]
            tree.cgroup = None
        for output in tree.outputs:
            if output.pipe >= 0:
                self._read_output(tree, output.pipe, drain=True)
        if tree.ctrl is not None:
            report = exit_report(status, usage, tree.host)
            if over_memory:
                report["overMemory"] = True
            if tree.collect is None:
                send(tree.ctrl, report)
            else:
                send_collected(tree.ctrl, report, tree.outputs, tree.overflow)
            self._forget_ctrl(tree)
        for output in tree.outputs:
            output.close()
        memcg.drop(cgroup)

    def _over_memory(self, tree: Tree) -> None:
        """Its cgroup ran out of memory (OOM notification): all the tree killed, as reported."""
        assert tree.cgroup is not None
        with contextlib.suppress(OSError):
            os.eventfd_read(tree.cgroup.event)
        tree.cgroup.notified = True
        tree.signal(signal.SIGKILL)

    def _read_output(self, tree: Tree, fd: int, *, drain: bool = False) -> None:
        """Moves what `fd` (stdout, stderr) holds to its memfd (`Tree.pump`); forgets it at end."""
        if tree.pump(fd, drain=drain):
            self.epoll.unregister(fd)
            del self.trees[fd]
            os.close(fd)

    def _forget_ctrl(self, tree: Tree) -> None:
        assert tree.ctrl is not None
        fd = tree.ctrl.fileno()
        self.epoll.unregister(fd)
        del self.trees[fd]
        tree.ctrl.close()
        tree.ctrl = None


def return_scratch(scratch_fd: int, host_path: str) -> None:
    """Copies a finished child's scratch tmpfs back to the host's scratch directory (bounded
    by the tmpfs size), then closes it. Errors are the supervisor's to see (missing files)."""
    try:
        with contextlib.suppress(OSError):
            view.copy_tree(scratch_fd, host_path, None)
    finally:
        os.close(scratch_fd)
