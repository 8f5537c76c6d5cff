"""A network namespace with only `lo`, up: where a child with a `network` list runs.

Standard library only. Each such child gets one of its own (no other child's forwarder is
reachable from it), made on a throwaway thread by the spawner, whose user namespace owns it
(rootless too: bringing `lo` up needs CAP_NET_ADMIN there, which the hook never has). The
child's forwarder (`egress_forward.py`) listens on its loopback and carries each connection
to the supervisor's proxy over the Unix socket bound into its sandbox; nothing else is there
to reach: no other interface, no route.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable

from . import libc
from .spawnreq import Request
from .start import StartError

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_CLONE_FS = 0x00000200
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
    """An fd of a new network namespace with `lo` up, made on a throwaway thread (this one
    stays where it is: rootless, it could not come back to the host's). Not on an armed
    thread (`Spare`). Raises `OSError` (`ConfineError` where namespaces are refused)."""
    found: list[int | BaseException] = []

    def run() -> None:
        try:
            # Its own filesystem context first: while it shared the spawner thread's, that
            # thread could not enter a mount namespace (`inline.py`), even just after a join.
            libc.unshare(_CLONE_FS, "a filesystem context of its own")
            enter_loopback_net()
            found.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=run, name="mcpx-loopback")
    thread.start()
    thread.join()
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


class Spare:
    """A loopback namespace made ahead for the next `egress` child of a spawner whose thread
    is armed when a request comes (a thread cannot be made then): once one such child came,
    the next is made while the spawner is idle at home (`refill`), off the next one's way."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._wanted = False

    def take(self, req: Request, disarm: Callable[[], None]) -> int | None:
        """For an `egress` request, the spare, else one made now (`disarm` first: at home);
        the taker closes it. Raises `StartError`."""
        if req.sandbox is None or not req.sandbox.egress:
            return None
        self._wanted = True
        ready, self._fd = self._fd, None
        if ready is not None:
            return ready
        disarm()
        try:
            return make_loopback_net()
        except OSError as exc:
            raise StartError(f"sandbox: no network namespace for egress: {exc}") from exc

    def refill(self, armed: bool) -> None:
        """Makes the next spare, if one is wanted and this thread is not `armed`."""
        if self._wanted and self._fd is None and not armed:
            with contextlib.suppress(OSError):  # (else the next one is made on its way)
                self._fd = make_loopback_net()
