"""The least a spawner process can do: the floor under `spawn_overhead.py`'s rows.

    python -I -S bench/_floor_spawner.py FD pidns|keeper

Standard library only, started like the real spawner (`python -I -S`). It serves one-byte
requests on the socket FD it inherits: for each, it starts /bin/true in a session of its own
and answers with the wait status, nothing else: no request to read or check, no pipes, no
control socket, no "started", no limits, no environment. What it does do is what each mode
of the real spawner cannot do without:

- `pidns`: /bin/true is in a PID namespace whose init is a reaper (`cat` with SIGCHLD
  ignored, as `runners/reapers.py` has it: without one a child is the init, whose orphans
  pile up as zombies and whose `kill $$` is dropped), made ahead of the first request. As the
  real spawner does for an unsandboxed child that left nothing behind, the namespace is kept
  once /bin/true is reaped and the reaper is found alone there (it has no child, and this
  process has none but it), and the next /bin/true joins it (PID 3, 4, ...); were it not
  alone, the reaper would be SIGKILLed and reaped before the answer and a fresh namespace
  armed.
- `keeper`: /bin/true is started by a keeper, a child subreaper forked once and waiting on
  the request socket itself, which keeps one child after another (as the real spawner's
  keepers do back to back: one of them serves every request, and none is forked).

Timing `send` + `recv` of one such request from Trio, against the bare spawn in the same
rounds, is the floor a real request of that mode cannot go under; `spawn_overhead.py` states
its goals against it. Not a benchmark itself (`run_all.py` skips files starting with `_`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

TRUE = "/bin/true"
CAT = "/bin/cat"
CLONE_NEWPID = 0x20000000
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


def _spawn_true() -> int:
    """/bin/true, waited for; its wait status."""
    pid = os.posix_spawn(TRUE, [TRUE], {}, setsid=True)
    return os.waitpid(pid, 0)[1]


def _answer(sock: socket.socket, status: int) -> None:
    sock.send(status.to_bytes(4, "little"))


def _arm(sink: int) -> int:
    """A fresh PID namespace and its reaper; the reaper's pid. (This process is single-threaded
    and has no other child then: SIGCHLD is ignored only while the reaper is spawned.)"""
    if _libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "cannot create a PID namespace")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        return os.posix_spawn(CAT, [CAT], {}, file_actions=[(os.POSIX_SPAWN_DUP2, sink, 0)])
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def serve_pidns(sock: socket.socket) -> None:
    home = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    sink, _ = os.pipe()
    reaper = _arm(sink)
    while sock.recv(16):
        status = _spawn_true()
        if _alone(reaper):  # (the namespace kept: the next /bin/true is PID 3, 4, ...)
            _answer(sock, status)
            continue
        os.kill(reaper, signal.SIGKILL)
        os.waitpid(reaper, 0)
        _answer(sock, status)
        if _libc.setns(home, CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "cannot return to the home PID namespace")
        reaper = _arm(sink)


def _alone(reaper: int) -> bool:
    """Whether the reaper is all that is left in its namespace: it has no child, and this
    process none but it (one read each, as the spawner's check on its way: `runners/trees.py`
    `alone` and `runners/strays.py`)."""
    with open(f"/proc/{reaper}/task/{reaper}/children", "rb") as f:
        if f.read(1):
            return False
    with open(f"/proc/self/task/{os.getpid()}/children", "rb") as f:
        return f.read().split() == [str(reaper).encode()]


def serve_keeper(sock: socket.socket) -> None:
    """One keeper, forked once, keeping one child after another."""
    pid = os.fork()
    if pid == 0:
        try:
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            while sock.recv(16):
                _answer(sock, _spawn_true())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    {"pidns": serve_pidns, "keeper": serve_keeper}[sys.argv[2]](sock)


if __name__ == "__main__":
    main()
