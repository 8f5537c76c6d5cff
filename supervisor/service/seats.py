"""The service's budgets for admitted sockets: `max_connections` in all (WebSockets and plain
HTTP requests being answered), `max_idle` of them carrying no run (`/v1/events`,
`/v1/hooks`).

A socket's seat is taken in the same step that decides it is admitted, before its 101 is
written: writing the 101 awaits the socket, and handshakes that overlap must not all pass a
check made before any of them counts. The seat is given back whatever way the socket ends
(`Seat.give_back`, idempotent); the part that counts against `max_idle` as soon as its
endpoint is done (`Seat.leave_idle`).
"""

from __future__ import annotations

from typing import Final

from .access import Refusal
from .targets import Endpoint

#: Endpoints whose sockets carry no run: `max_idle`. (An exec socket waits at most
#: `request_s` for its request, then carries its run.)
IDLE: Final = frozenset({Endpoint.EVENTS, Endpoint.HOOKS})

_RETRY: Final = ((b"Retry-After", b"1"),)


class Seats:
    """How many sockets are admitted, and how many of them carry no run."""

    def __init__(self, max_connections: int, max_idle: int) -> None:
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.admitted = 0
        self.idle = 0

    def take(self, endpoint: Endpoint | None) -> Seat | Refusal:
        """A seat for a socket of `endpoint` (None: a plain HTTP request), counted at once;
        or the 503 past a cap."""
        if self.admitted >= self.max_connections:
            return Refusal(503, f"too many connections (the cap is {self.max_connections})", _RETRY)
        idle = endpoint in IDLE
        if idle and self.idle >= self.max_idle:
            return Refusal(
                503,
                f"too many sockets that carry no run (events, hooks; the cap is {self.max_idle})",
                _RETRY,
            )
        self.admitted += 1
        self.idle += idle
        return Seat(self, idle=idle)


class Seat:
    """One admitted socket's place in `Seats`."""

    def __init__(self, seats: Seats, *, idle: bool) -> None:
        self._seats = seats
        self.idle = idle
        self._held = True

    def leave_idle(self) -> None:
        """No longer counts against `max_idle` (its endpoint is done)."""
        if self.idle:
            self.idle = False
            self._seats.idle -= 1

    def give_back(self) -> None:
        """No longer counts at all. Idempotent."""
        self.leave_idle()
        if self._held:
            self._held = False
            self._seats.admitted -= 1
