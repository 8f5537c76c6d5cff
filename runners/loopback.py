"""A network namespace with only `lo`, up: where a child with a `network` list runs.

Standard library only. Each such child gets one of its own (no other child's forwarder is
reachable from it), made on a throwaway thread by the spawner, whose user namespace owns it
(rootless too: bringing `lo` up needs CAP_NET_ADMIN there, which the hook never has). The
child's forwarder (`egress_forward.py`) listens on its loopback and carries each connection
to the supervisor's proxy over the Unix socket bound into its sandbox; nothing else is there
to reach: no other interface, no route.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

from . import libc

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH14x"


def loopback_up() -> None:
    """Brings `lo` up in this thread's network namespace. Raises `OSError`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        got = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, got)[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def enter_loopback_net() -> None:
    """Moves this thread (or single-threaded process) into a new network namespace with `lo`
    up. Raises `OSError`."""
    libc.unshare(libc.CLONE_NEWNET, "network namespace")
    loopback_up()


def make_loopback_net() -> int:
    """An fd of a new network namespace with `lo` up, made on this thread, which then goes
    back to its own (no thread is made: the spawner's own limits may be lent to a child
    while it spawns). Raises `OSError` (`ConfineError` where namespaces are refused)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc.unshare(libc.CLONE_NEWNET, "network namespace")
        try:
            loopback_up()
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            libc.setns(home, libc.CLONE_NEWNET, "the spawner's network namespace")
    finally:
        os.close(home)
