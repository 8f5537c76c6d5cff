"""The pidns spawner's waiting forks for module requests (`warm.py`): one per kind asked for,
forked while the spawner is idle, or on demand when none waits (`pidns.py`).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from . import jail, memcg, warm
from .mechanisms import Mechanisms
from .reapers import Reaper
from .spawnreq import Request
from .start import StartError

#: What arming for a fresh PID namespace yields: takes the reaper made there (`reapers.py`).
Taker = Callable[[], Reaper | None]


class WarmPool:
    """Waiting forks by kind, and the kinds asked for. `fresh`: a context in which the next
    process this thread creates joins a fresh PID namespace after its reaper, this thread
    armed again after (`PidNsSpawner`)."""

    def __init__(
        self, sandbox: Mechanisms, fresh: Callable[[], AbstractContextManager[Taker]]
    ) -> None:
        self.sandbox = sandbox
        self._fresh = fresh
        #: Waiting forks for module requests (`warm.py`), by kind; and the kinds asked for.
        self.waiting: dict[str, warm.WaitingFork] = {}
        self.kinds: set[str] = set()

    def spawn(self, req: Request, raw: bytes, uid: int | None) -> jail.Spawned:
        """Hands a module request to a waiting fork (`warm.py`), made now if none waits."""
        kind = warm.PLAIN if req.sandbox is None else warm.JAILED
        if req.sandbox is not None:
            missing = self.sandbox.missing_for(req.sandbox)
            if missing:
                raise StartError(f"sandbox: cannot be enforced here: missing {', '.join(missing)}")
            if req.sandbox.return_scratch:
                raise StartError("a warm module run cannot return its scratch directory")
        self.kinds.add(kind)
        for attempt in (1, 2):
            try:
                waiting = self.waiting.pop(kind, None) or self._fork(kind)
            except OSError as exc:
                raise StartError(f"cannot fork the warm runner: {exc.strerror}") from exc
            try:
                waiting.hand_over(raw, req.fds, uid)
            except warm.Lost as exc:
                memcg.drop(waiting.cgroup)
                if attempt == 2:
                    raise StartError(f"the warm runner's fork went away: {exc}") from exc
                continue
            except BaseException:
                memcg.drop(waiting.cgroup)
                raise
            spawned = jail.Spawned(waiting.pid, None)
            spawned.reaper = waiting.reaper
            spawned.cgroup = waiting.cgroup
            return spawned
        raise AssertionError("unreachable")  # pragma: no cover

    def wanted(self) -> bool:
        return len(self.waiting) < len(self.kinds)

    def fork_wanted(self) -> None:
        for kind in self.kinds - set(self.waiting):
            try:
                self.waiting[kind] = self._fork(kind)
            except (OSError, StartError):
                # Out of processes or namespaces for now: the next request of this kind
                # forks on demand and reports why, if it still cannot.
                self.kinds.discard(kind)
            return

    def discard(self) -> None:
        """Ends every waiting fork (the spawner is closing) and removes their cgroups."""
        for waiting in self.waiting.values():
            waiting.discard()
            memcg.drop(waiting.cgroup)

    def _fork(self, kind: str) -> warm.WaitingFork:
        """A waiting fork, in a fresh PID namespace after its reaper; this thread is armed again
        after."""
        cgroup = None
        if kind == warm.JAILED:
            jail.ready_filters()
        if kind == warm.JAILED and memcg.STATE.hierarchy is not None:
            try:
                cgroup = memcg.STATE.hierarchy.make()
            except OSError as exc:
                raise StartError(f"cannot make a memory cgroup: {exc.strerror}") from exc
        with self._fresh() as reaper:
            try:
                waiting = warm.fork_waiting(
                    kind, self.sandbox.empty_net if kind == warm.JAILED else None, cgroup
                )
                waiting.reaper = reaper()
                return waiting
            except BaseException:
                memcg.drop(cgroup)
                raise
