"""Which isolation mechanisms this spawner has, probed once at its start, and said to the owner.

Standard library only. Each is really tried where trying is cheap and harmless (a namespace
made on a throwaway thread, the mount tree armed on the first jail thread), else asked of the
kernel (Landlock's ABI version, seccomp in /proc). `MCPX_HOOKS_HIDE=landlock,seccomp,...`
(`isolation.HIDE_ENV`) hides mechanisms from detection, as if the kernel lacked them: a test
proves with it that a profile needing one fails rather than running with less.

The report is one JSON line on the spawner's stdout, then stdout is closed:
`{"mode": "pidns"|"keeper", "userns": bool, "pid": P, "mechanisms": {NAME: true | "why it is
missing"}, "landlockAbi": n}`, in pidns mode `"reaper"` (`reapers.said`), and for an ordinary
user `"usernsSettings"`, the settings that
can refuse user namespaces and their values here (`userns.SETTINGS`). `userns`: the spawner
runs in a user namespace of its own (rootless); `pid`: its host pid.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable

from . import jail, libc, memcg
from .isolation import HIDE_ENV, NAMES, hidden
from .landlock import landlock_abi, landlock_missing
from .seccomp import seccomp_missing
from .spawnreq import Sandbox


def made_on_a_thread(make: Callable[[], None], ns: str) -> int:
    """An fd of namespace `ns` (its /proc name) of a throwaway thread once `make` has run on
    it (this thread stays where it is); raises what `make` raised (`OSError`)."""
    found: list[int | BaseException] = []

    def run() -> None:
        try:
            make()
            found.append(os.open(f"/proc/thread-self/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=run, name=f"mcpx-{ns}")
    thread.start()
    thread.join()
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def make_empty_net() -> int:
    """An fd of a new network namespace with nothing in it (loopback down); raises
    `ConfineError` where network namespaces cannot be made."""
    return made_on_a_thread(lambda: libc.unshare(libc.CLONE_NEWNET, "network namespace"), "net")


class Mechanisms:
    """What this spawner can apply; `missing[name]` says why one is not there."""

    def __init__(
        self,
        mode: str,
        home_pid: int | None,
        *,
        userns: bool = False,
        keeper_why: str = "",
        settings: list[tuple[str, str | None, bool]] | None = None,
    ) -> None:
        self.mode = mode
        self.home_pid = home_pid
        #: Whether this spawner runs in a user namespace of its own (rootless, `userns.py`).
        self.userns = userns
        #: For an ordinary user: the settings that can refuse user namespaces, as read before
        #: entering one (`userns.settings`; inside, they are the namespace's own).
        self.settings = settings
        self.hidden = set(hidden())
        self.missing: dict[str, str] = {}
        self.empty_net: int | None = None
        self.probed = False
        self.landlock_abi = landlock_abi()
        if mode != "pidns":
            self._lack("pidns", f"the spawner runs in keeper mode: {keeper_why or 'why unsaid'}")
            for name in ("mountns", "netns"):  # made only in pidns mode
                self._lack(name, "none in keeper mode (see pidns)")
        if "landlock" not in self.hidden and (why := landlock_missing()) is not None:
            self._lack("landlock", why)
        if "seccomp" not in self.hidden and (why := seccomp_missing()) is not None:
            self._lack("seccomp", why)
        if os.geteuid() != 0 or userns:  # (uid 0 in a user namespace is the caller's uid)
            self._lack("uid", "the supervisor is not root: hooks run as its own user")
        if mode == "pidns" and "netns" not in self.hidden:
            try:
                self.empty_net = make_empty_net()
            except OSError as exc:
                self._lack("netns", libc.said(exc))
        for name in self.hidden:
            if name in NAMES:
                self.missing[name] = f"hidden by {HIDE_ENV}"
        # What bounds a sandboxed tree's memory: a cgroup of its own, or the fallback.
        memcg.detect(hidden=memcg.HIDE_NAME in self.hidden, rootless=userns)

    def _lack(self, name: str, why: str) -> None:
        self.missing.setdefault(name, why)

    def new_jail(self) -> jail.Jail | None:
        """An armed jail thread (pidns mode), or None where jails cannot be had."""
        if "pidns" in self.missing or "mountns" in self.hidden:
            return None
        cgroup, why = None, None
        if memcg.STATE.hierarchy is not None:
            try:
                cgroup = memcg.STATE.hierarchy.make()
            except OSError as exc:
                why = f"cannot make the child's memory cgroup: {exc.strerror}"
        armed = jail.Jail(self.empty_net, self.home_pid, cgroup, why)
        if not self.probed:  # the first one tells whether jails can be had at all
            self.probed = True
            if armed.wait_armed() is not None:
                self.missing.setdefault("mountns", str(armed.broken))
        return armed

    def missing_for(self, sandbox: Sandbox) -> list[str]:
        needed = ["pidns", "mountns", "landlock", "seccomp"]
        if not sandbox.net:
            needed.append("netns")
        if sandbox.switch_uid:
            needed.append("uid")
        return [f"{n} ({self.missing[n]})" for n in needed if n in self.missing]

    def report(self, *, reaper: str | None = None) -> None:
        """Writes the report line on stdout and closes it (fd 1 then points to /dev/null);
        `reaper`: how a pidns spawner's reapers are made (`reapers.said`)."""
        line: dict[str, object] = {
            "mode": self.mode,
            "userns": self.userns,
            # /proc is the host's: the host pid of this process, which the owner signals.
            "pid": int(os.readlink("/proc/self")),
            "mechanisms": {n: self.missing.get(n, True) for n in NAMES},
            "landlockAbi": self.landlock_abi,
            "memory": memcg.report(),
        }
        if self.settings is not None:
            line["usernsSettings"] = self.settings
        if reaper is not None:
            line["reaper"] = reaper
        try:
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
        except OSError:
            pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
