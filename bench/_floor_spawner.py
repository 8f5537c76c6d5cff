"""The least a spawner process can do: the floor under `spawn_overhead.py`'s rows.

    python -I -S bench/_floor_spawner.py FD pidns|keeper

Standard library only, started like the real spawner (`python -I -S`). It serves one-byte
requests on the socket FD it inherits: for each, it starts /bin/true in a session of its own
and answers with the wait status, nothing else: no request to read or check, no pipes, no
control socket, no "started", no limits, no environment. What it does do is what each mode
of the real spawner cannot do without:

- `pidns`: /bin/true is PID 1 of a fresh PID namespace, made ahead of the request (after each
  child, back to its own namespace and a new one armed), as the real spawner arms its next.
- `keeper`: /bin/true is started by a keeper, a child subreaper forked ahead of the request
  (two wait, as in the real spawner) and waiting on the request socket itself; the keeper
  that takes a request says so on a pipe, starts the child, waits, answers the requester
  and exits, and this process forks the next keeper while the child runs.

Timing `send` + `recv` of one such request from Trio, against the bare spawn in the same
rounds, is the floor a real request of that mode cannot go under; `spawn_overhead.py` states
its goals against it. Not a benchmark itself (`run_all.py` skips files starting with `_`).
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys

TRUE = "/bin/true"
CLONE_NEWPID = 0x20000000
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


def _spawn_true() -> int:
    """/bin/true, waited for; its wait status."""
    pid = os.posix_spawn(TRUE, [TRUE], {}, setsid=True)
    return os.waitpid(pid, 0)[1]


def _answer(sock: socket.socket, status: int) -> None:
    sock.send(status.to_bytes(4, "little"))


def _arm() -> None:
    if _libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "cannot create a PID namespace")


def serve_pidns(sock: socket.socket) -> None:
    home = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    _arm()
    while sock.recv(16):
        _answer(sock, _spawn_true())
        if _libc.setns(home, CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "cannot return to the home PID namespace")
        _arm()


def _fork_keeper(sock: socket.socket, said: int) -> None:
    """A keeper waiting on the request socket; it says on `said` when it took a request
    ("k") or found the socket closed ("e")."""
    if os.fork() == 0:
        try:
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            if sock.recv(16):
                os.write(said, b"k")
                _answer(sock, _spawn_true())
            else:
                os.write(said, b"e")
        finally:
            os._exit(0)


def _reap_done() -> None:
    """Reaps the keepers that have exited (none may be left: at the end, the one just forked
    finds the socket closed at once)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] != 0:
            pass
    except ChildProcessError:
        return


def serve_keeper(sock: socket.socket) -> None:
    said_r, said_w = os.pipe()
    idle = 2
    for _ in range(idle):
        _fork_keeper(sock, said_w)
    while idle:
        if os.read(said_r, 1) == b"k":
            _fork_keeper(sock, said_w)
            _reap_done()
        else:
            idle -= 1
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    {"pidns": serve_pidns, "keeper": serve_keeper}[sys.argv[2]](sock)


if __name__ == "__main__":
    main()
