"""The child's side of egress by name: a forwarder inside the child's network namespace.

Standard library only. Started as the child's program (`python -I -S -B egress_forward.py
SOCKET PORT ARGV...`) in a network namespace of its own with only `lo` up (`loopback.py`):
it listens on 127.0.0.1:PORT, then forks; the fork carries each connection made there to
the supervisor's proxy over SOCKET, the Unix socket bound into the sandbox, while this
process becomes the hook (`execvp` of ARGV), PID 1 of its PID namespace as before, so its
exit status and signals are the hook's own. The fork dies with the namespace when the hook
ends. The proxy, not this, decides what may pass: this only carries bytes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

_CHUNK = 64 * 1024


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copies `src` to `dst` until end of file, then half-closes `dst`."""
    with contextlib.suppress(OSError):
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _carry(conn: socket.socket, path: str) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (a TLS handshake's small writes)
    with conn:
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(path)
        except OSError:
            return
        with upstream:
            back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
            back.start()
            _pump(conn, upstream)
            back.join()


def serve(listener: socket.socket, path: str) -> None:
    """Accepts on `listener` for ever, each connection carried on a thread of its own."""
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_carry, args=(conn, path), daemon=True).start()


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[1].isdigit():
        sys.stderr.write("usage: egress_forward.py SOCKET PORT ARGV...\n")
        os._exit(2)
    path, port, command = argv[0], int(argv[1]), argv[2:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    if os.fork() == 0:  # the forwarder: no stdio of the hook's kept open
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            serve(listener, path)
        finally:
            os._exit(0)
    listener.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
