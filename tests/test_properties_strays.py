"""Properties (Hypothesis) of the spawner's search for the processes children made their
siblings (`runners/strays.py`), against a model: any table of processes (the spawner's
children, read twice or gone meanwhile, reapers gone, two reading one namespace, namespaces
whose parent is themselves, or in a cycle, or a chain deeper than the kernel allows, huge
tables) gets exactly the strays the model says, never raises, never walks a namespace chain
further than the kernel's nesting, reads the set of known processes at most once (never
where every child is a reaper or seen) and names no process outside the reach of the
namespaces ended. Then once on real processes: a reaper gone leaves the rest of the batch
searched as if it were not there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Container, Generator, Hashable
from typing import TYPE_CHECKING

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpx_hooks.runners import strays
from mcpx_hooks.runners.strays import NS_DEPTH, sort_out

if TYPE_CHECKING:
    from conftest import Marker


@attrs.define
class World:
    """What /proc says: each live process's PID namespace (by pid: gone when not there),
    each namespace's parent (none at the top), the spawner's children as read (in order,
    a pid twice or a gone one possible), the reapers of the batch, those seen and known."""

    ns: dict[int, int]
    parent: dict[int, int]
    kids: list[int]
    reapers: list[int]
    seen: frozenset[int]
    known: frozenset[int]


PIDS = st.integers(1, 12)  # (few: reapers, children, seen and known overlap)
NSS = st.integers(0, 6)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    return World(
        ns=draw(st.dictionaries(PIDS, NSS, min_size=4)),
        parent=draw(st.dictionaries(NSS, NSS)),  # (a namespace its own parent, cycles)
        kids=draw(st.lists(PIDS, max_size=20)),
        reapers=draw(st.lists(PIDS, max_size=6)),
        seen=draw(st.frozensets(PIDS, max_size=3)),
        known=draw(st.frozensets(PIDS, max_size=3)),
    )


@st.composite
def huge_worlds(draw: st.DrawFn) -> World:
    """Thousands of children, a namespace chain deeper than the kernel's, or a cycle."""
    n = draw(st.integers(1000, 5000))
    depth = draw(st.integers(1, 3 * NS_DEPTH))
    cyclic = draw(st.booleans())
    parent = {level: level + 1 for level in range(depth)}
    if cyclic:
        parent[depth] = 0
    ns = {pid: pid % (depth + 1) for pid in range(1, n + 1)}
    reapers = draw(st.lists(st.integers(1, n), max_size=40))
    return World(ns, parent, list(range(1, n + 1)), reapers, frozenset(), frozenset())


@attrs.define
class Probe:
    """`sort_out`'s readings of a world, counted: how many times `known()` was made, how far
    each chain was walked, and whether each walk was closed."""

    world: World
    known_made: int = 0
    steps: dict[int, int] = attrs.Factory(dict)
    open_walks: int = 0

    def known(self) -> Container[int]:
        self.known_made += 1
        return self.world.known

    def ns_of(self, pid: int) -> Hashable:
        if pid not in self.world.ns:
            raise ProcessLookupError(pid)
        return self.world.ns[pid]

    def chain(self, pid: int) -> Generator[Hashable, None, None]:
        self.steps.setdefault(pid, 0)
        self.open_walks += 1
        try:
            ns = self.world.ns.get(pid)
            while ns is not None:
                self.steps[pid] += 1
                yield ns
                ns = self.world.parent.get(ns)
        finally:
            self.open_walks -= 1

    def run(self) -> dict[int, list[int] | None]:
        w = self.world
        return sort_out(w.kids, w.reapers, w.seen, self.known, ns_of=self.ns_of, chain=self.chain)


def walk(world: World, pid: int) -> list[int]:
    """The first `NS_DEPTH` namespaces of `pid`'s chain (the kernel nests no deeper)."""
    path: list[int] = []
    ns = world.ns.get(pid)
    while ns is not None and len(path) < NS_DEPTH:
        path.append(ns)
        ns = world.parent.get(ns)
    return path


def model(world: World) -> dict[int, list[int] | None]:
    """The strays of each reaper: the spawner's children that are no reaper of the batch,
    not seen nor known, each once, under the reaper whose namespace is the nearest of theirs;
    a reaper gone, or whose namespace another reaper reads too, cannot be told (None), and
    holds none; nothing at all where no child is left to check."""
    batch = set(world.reapers)
    left = [p for p in dict.fromkeys(world.kids) if p not in batch | world.seen | world.known]
    if not left:
        return {}
    readable = {r: world.ns[r] for r in batch if r in world.ns}
    told = {r for r, ns in readable.items() if list(readable.values()).count(ns) == 1}
    out: dict[int, list[int] | None] = {r: None for r in batch - told}
    owner = {readable[r]: r for r in told}
    for pid in left:
        hits = [owner[ns] for ns in walk(world, pid) if ns in owner]
        if hits:
            found = out.setdefault(hits[0], [])
            assert found is not None
            found.append(pid)
    return out


@settings(max_examples=200)  # (no process: a few ms in all)
@given(worlds())
def test_the_strays_are_the_models(world: World) -> None:
    assert Probe(world).run() == model(world)


@given(worlds() | huge_worlds())
def test_a_search_ends_names_only_what_the_ended_namespaces_reach_and_reads_known_once(
    world: World,
) -> None:
    probe = Probe(world)
    found = probe.run()
    batch = set(world.reapers)
    assert set(found) <= batch
    named = [pid for pids in found.values() for pid in pids or ()]
    assert len(named) == len(set(named))  # (each once: two pidfds of one would reap it twice)
    for reaper, pids in found.items():
        for pid in pids or ():
            assert pid in world.kids and pid not in batch | world.seen | world.known
            assert world.ns[reaper] in walk(world, pid)
        if pids is None:  # (gone, or its namespace read by another reaper too)
            twins = [r for r in batch if world.ns.get(r, -1) == world.ns.get(reaper)]
            assert reaper not in world.ns or len(twins) > 1
    assert all(steps <= NS_DEPTH for steps in probe.steps.values())
    assert probe.open_walks == 0
    assert probe.known_made <= 1
    if all(pid in batch or pid in world.seen for pid in world.kids):
        assert probe.known_made == 0 and found == {}


@given(worlds(), PIDS)
def test_a_reaper_gone_leaves_the_others_as_they_were(world: World, gone: int) -> None:
    """One reaper of the batch gone (its namespace unreadable) is None, and changes nothing
    of what the others get."""
    world.ns.pop(gone, None)
    world.kids = [pid for pid in world.kids if pid != gone]
    alone = Probe(world).run()
    world.reapers.append(gone)
    with_gone = Probe(world).run()
    assert {r: v for r, v in with_gone.items() if r != gone} == {
        r: v for r, v in alone.items() if r != gone
    }
    assert with_gone.get(gone, None) is None and (gone in with_gone) == bool(with_gone)


#: Plays the spawner on real processes: two PID namespaces with a reaper each (the init, a
#: sleeper), a process made its sibling in the first (its parent this process, as a child's
#: `clone(CLONE_PARENT)` makes it), and a reaper gone; prints what `siblings_of` says of
#: them, by name, and takes everything down. As an ordinary user, in a user namespace.
PLAYS_THE_SPAWNER = """
    import ctypes, json, os, signal, sys
    from mcpx_hooks.runners import strays
    libc = ctypes.CDLL(None, use_errno=True)
    clone = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    NEWPID, NEWUSER, PARENT = 0x20000000, 0x10000000, 0x8000
    if os.getuid() != 0:
        assert libc.unshare(NEWUSER) == 0, ctypes.get_errno()
    def sleeper():
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c",
                 "import time; time.sleep(1000)", sys.argv[1]])
    def cloned(flags):
        pid = libc.syscall(clone, flags | signal.SIGCHLD, 0, 0, 0, 0)
        assert pid >= 0, ctypes.get_errno()
        if pid == 0:
            sleeper()
        return pid
    first, second = cloned(NEWPID), cloned(NEWPID)
    fd = os.pidfd_open(first)
    assert libc.setns(fd, NEWPID) == 0, ctypes.get_errno()
    os.close(fd)
    child = os.fork()  # (in the first namespace)
    if child == 0:
        cloned(PARENT)
        os._exit(0)
    os.waitpid(child, 0)
    kids = {int(p) for t in os.listdir("/proc/self/task")
            for p in open(f"/proc/self/task/{t}/children").read().split()}
    (sibling,) = kids - {first, second}
    gone = os.fork()
    if gone == 0:
        os._exit(0)
    os.waitpid(gone, 0)
    try:
        found = strays.siblings_of([first, gone, second], (), frozenset)
    except OSError as exc:
        found = repr(exc)
    names = {first: "first", second: "second", gone: "gone", sibling: "sibling"}
    if isinstance(found, dict):
        found = {names[r]: v and [names[p] for p in v] for r, v in found.items()}
    for pid in (sibling, first, second):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    print(json.dumps(found))
"""


def test_a_reaper_gone_leaves_the_rest_of_the_batch_searched(marker: Marker) -> None:
    """A reaper of the batch whose namespace is gone is the one not searched (None: its tree
    alone waits for its reaper's end); the sibling in another namespace is found, and the
    third namespace, empty, said empty (its tree reported at once)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PLAYS_THE_SPAWNER), marker],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) == {"first": ["sibling"], "gone": None}


def test_the_namespace_walk_of_this_process_ends() -> None:
    """On this machine's /proc: this process's namespace chain is short and closes its fds."""
    before = len(os.listdir("/proc/self/fd"))
    chain = list(strays._ns_chain(os.getpid()))
    assert 1 <= len(chain) <= NS_DEPTH
    assert chain[0] == strays._pid_ns(os.getpid())
    assert len(os.listdir("/proc/self/fd")) == before
    assert list(strays._ns_chain(-1)) == []
