"""The pings a connection has sent and not yet seen answered (`connection.py`)."""

from __future__ import annotations

import os

import trio


class Pings:
    """In-flight pings by payload, oldest first: a pong answers its ping and older ones (a
    client may answer only the last of several, RFC 6455 §5.5.3)."""

    def __init__(self) -> None:
        self._waiting: dict[bytes, trio.Event] = {}

    def new(self) -> tuple[bytes, trio.Event]:
        """A payload no ping in flight has, and the event its pong sets."""
        payload = os.urandom(4)
        while payload in self._waiting:
            payload = os.urandom(4)
        answered = self._waiting[payload] = trio.Event()
        return payload, answered

    def pong(self, payload: bytes) -> None:
        """A pong: its ping and every older one are answered; one for no ping is ignored."""
        if payload in self._waiting:
            while self._waiting:
                oldest = next(iter(self._waiting))
                self._waiting.pop(oldest).set()
                if oldest == payload:
                    break
