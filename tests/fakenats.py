"""A fake NATS server for the tests: a socket on loopback that speaks just enough of the
protocol for a client to connect (its `INFO`, `PONG` to each `PING`), answers nothing else
(no JetStream API: a request to it waits for its bound), and records every byte it is sent.
It refuses a `CONNECT` without a user, as a server with users does, so the parts connect
with their credentials and need no `--nats-insecure`."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import attrs


@attrs.define
class FakeNats:
    port: int
    #: Every byte each connection sent, in order, one entry a connection.
    received: list[bytearray] = attrs.field(factory=list)
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def sent(self) -> bytes:
        with self.lock:
            return b"".join(bytes(r) for r in self.received)


def _serve(fake: FakeNats, conn: socket.socket, info: dict[str, Any]) -> None:
    with fake.lock:
        record = bytearray()
        fake.received.append(record)
    with conn:
        conn.sendall(b"INFO " + json.dumps(info).encode() + b"\r\n")
        pending = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            with fake.lock:
                record += data
            pending += data
            *lines, pending = pending.split(b"\r\n")
            for line in lines:
                if line.startswith(b"CONNECT ") and '"user"' not in line.decode(errors="replace"):
                    conn.sendall(b"-ERR 'Authorization Violation'\r\n")
                    return
                if line == b"PING":
                    conn.sendall(b"PONG\r\n")


@contextmanager
def fake_nats(**info: Any) -> Iterator[FakeNats]:
    """A fake server for the block; `info`: what its `INFO` says besides the usual."""
    listener = socket.create_server(("127.0.0.1", 0))
    fake = FakeNats(listener.getsockname()[1])
    said = {
        "server_id": "FAKE",
        "version": "2.10.0",
        "proto": 1,
        "host": "127.0.0.1",
        "port": fake.port,
        "headers": True,
        "max_payload": 1048576,
        "auth_required": True,
        **info,
    }
    stopping = threading.Event()
    conns: list[socket.socket] = []

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conns.append(conn)
            threading.Thread(target=_serve, args=(fake, conn, said), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield fake
    finally:
        stopping.set()
        with suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # (wakes the accept)
        listener.close()
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        acceptor.join(5)
