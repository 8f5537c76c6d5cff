"""A network namespace with only `lo`, up: where a child with a `network` list runs.

Standard library only. Each such child gets one of its own (no other child's proxy port is
reachable from it), made ahead on a thread of the spawner's (`Maker`), whose user namespace
owns it
(rootless too: bringing `lo` up needs CAP_NET_ADMIN there, which the hook never has). On the
same thread, inside the new namespace, the spawner opens the listening TCP socket at
127.0.0.1:`PROXY_PORT` the child's proxy variables name; a socket keeps the namespace it was
made in, so the supervisor, handed its fd ("listening", `protocol.send_listener`), accepts
the child's connections from its own namespace and serves them (`process/egress.py`). No
process of ours runs beside the child; nothing else is there to reach: no other interface,
no route.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import libc
from .protocol import send_listener
from .spawnreq import Request
from .start import StartError

if TYPE_CHECKING:
    from .jail import Spawned

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_CLONE_FS = 0x00000200
_IFREQ = "16sH14x"
#: The port the proxy listens on in each such namespace (the supervisor's `LOOPBACK_PORT`).
PROXY_PORT = 3128


def loopback_up() -> None:
    """Brings `lo` up in this thread's network namespace. Raises `OSError`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        got = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, got)[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def proxy_listener() -> int:
    """The fd of a TCP socket listening at 127.0.0.1:`PROXY_PORT` in this thread's network
    namespace (close-on-exec: no child inherits it). In a namespace used before, it binds
    only once its last child's listening socket is closed everywhere (a port has one
    listener; the connections the proxy closed, in TIME_WAIT, do not count). Raises
    `OSError`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", PROXY_PORT))
        sock.listen(128)
        return sock.detach()


def loopback_net_here(net: int | None) -> tuple[int, int]:
    """Moves this thread into a new network namespace with `lo` up, or into `net`, one made
    so before; returns an fd of it and of the proxy's socket listening in it
    (`proxy_listener`). Raises `OSError`."""
    if net is not None:
        libc.setns(net, libc.CLONE_NEWNET, "a network namespace made before")
        return net, proxy_listener()
    libc.unshare(libc.CLONE_NEWNET, "network namespace")
    loopback_up()
    listener = proxy_listener()
    try:
        return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC), listener
    except OSError:
        os.close(listener)
        raise


class Maker:
    """A thread of the spawner's own for `loopback_net_here`, so that a new namespace (~1 ms
    of the kernel's) can be made while the spawner serves. It never comes back to the host's
    network (rootless, it could not) and starts no process; made at home, not on an armed
    thread (a thread made there would be refused). A bare `_thread` with two locks, as
    `jail.Jail`; never joined."""

    def __init__(self) -> None:
        self._go = _thread.allocate_lock()
        self._done = _thread.allocate_lock()
        self._go.acquire()
        self._done.acquire()
        self._net: int | None = None
        self._made: tuple[int, int] | OSError | None = None
        #: Whether a job was started and not yet waited for.
        self.busy = False
        #: Why no thread could be started (a pids limit reached): each job fails with it.
        self._refused: libc.ConfineError | None = None
        try:
            _thread.start_new_thread(self._run, ())
        except RuntimeError:
            said = libc.no_thread_said().replace("\n", "; ")
            self._refused = libc.ConfineError(errno.EAGAIN, said)

    def _run(self) -> None:
        try:
            # Its own filesystem context first: while it shared the spawner thread's, that
            # thread could not enter a mount namespace (`inline.py`).
            libc.unshare(_CLONE_FS, "a filesystem context of its own")
            broken = None
        except OSError as exc:
            broken = exc
        while True:
            self._go.acquire()
            try:
                self._made = broken or loopback_net_here(self._net)
            except OSError as exc:
                self._made = exc
            self._done.release()

    def start(self, net: int | None = None) -> None:
        """Starts `loopback_net_here(net)`."""
        self._net, self.busy = net, True
        if self._refused is not None:  # (no thread to do it: it fails at once)
            self._made = self._refused
            self._done.release()
            return
        self._go.release()

    @property
    def job(self) -> int | None:
        """The namespace the job started last listens in (None: a new one)."""
        return self._net

    def wait(self) -> tuple[int, int]:
        """What the job started last made, once made (the caller closes both fds). Raises
        `OSError` (`ConfineError` where namespaces are refused)."""
        self._done.acquire()
        made, self._made, self.busy = self._made, None, False
        if isinstance(made, OSError):
            raise made
        assert made is not None
        return made


class Taken:
    """What `Spare.take` gives one request: an `egress` child's namespace (`net`) and proxy
    socket (`listener`), both None for any other child; leaving the block closes those that
    `keep` did not give to the child's `Spawned`."""

    def __init__(self, made: tuple[int, int] | None) -> None:
        self.net: int | None = None if made is None else made[0]
        self.listener: int | None = None if made is None else made[1]

    def keep(self, spawned: Spawned) -> Spawned:
        spawned.net, spawned.listener = self.net, self.listener
        self.net = self.listener = None
        return spawned

    def __enter__(self) -> Taken:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in (self.net, self.listener):
            if fd is not None:
                os.close(fd)
        self.net = self.listener = None


def hand_over(ctrl: socket.socket, spawned: Spawned | None) -> tuple[int, int] | None:
    """Sends a started `egress` child's proxy socket to its owner; its namespace's fd and
    the socket's, for `Spare.give` once its tree is gone."""
    if spawned is None or spawned.listener is None or spawned.net is None:
        return None
    send_listener(ctrl, spawned.listener)
    made, spawned.listener, spawned.net = (spawned.net, spawned.listener), None, None
    return made


class Spare:
    """The network namespaces of a spawner's `egress` children. When a child's tree is gone
    (reaped: nothing of it runs), its namespace is kept (`give`): its listening socket is
    shut down (its owner's copy too: it is the same socket, which then accepts nothing more,
    and what waited in its backlog is reset) and closed, and the `Maker` opens a new one in
    the namespace at once, off the next request's way, for the next such child: as many
    namespaces are made as children run at once, not one per child. While none is kept, a
    new one is made, and the next one ahead."""

    #: The most namespaces kept for the next children.
    KEPT = 4

    def __init__(self) -> None:
        self._maker: Maker | None = None
        self._kept: list[int] = []  # (no socket in them yet)
        self._ready: list[tuple[int, int]] = []

    def give(self, made: tuple[int, int] | None) -> None:
        """Keeps the namespace of a child whose tree is gone and reaped (`hand_over`)."""
        if made is None:
            return
        net, listener = made
        with socket.socket(fileno=listener) as sock, contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # (leaves LISTEN for every holder)
        maker = self._maker
        busy = maker is not None and maker.busy
        if len(self._kept) + len(self._ready) + busy >= self.KEPT or maker is None:
            os.close(net)
        elif busy:
            self._kept.append(net)
        else:
            maker.start(net)

    def _collect(self, maker: Maker) -> None:
        """What the maker made last, in `_ready`, waiting for it if it is at work (a
        namespace it could not listen in again is dropped)."""
        if maker.busy:
            net = maker.job
            try:
                self._ready.append(maker.wait())
            except OSError:
                if net is not None:
                    os.close(net)

    def take(self, req: Request, disarm: Callable[[], None]) -> Taken:
        """For an `egress` request, a namespace listening already, else one kept, else a new
        one made now (the first: `disarm` first, at home); for any other, nothing (a `Taken`
        of None). Raises `StartError`."""
        if req.sandbox is None or not req.sandbox.egress:
            return Taken(None)
        if self._maker is None:
            disarm()
            self._maker = Maker()
        maker = self._maker
        self._collect(maker)
        while not self._ready and self._kept:
            maker.start(self._kept.pop())
            self._collect(maker)
        dry = not self._ready
        if dry:
            maker.start()
            try:
                self._ready.append(maker.wait())
            except OSError as exc:
                said = libc.said(exc)
                raise StartError(f"sandbox: no network namespace for egress: {said}") from exc
        made = self._ready.pop()
        if self._kept:
            maker.start(self._kept.pop())
        elif dry:
            maker.start()  # (the next one ahead, while this one's child runs)
        return Taken(made)
