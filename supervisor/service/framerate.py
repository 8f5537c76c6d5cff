"""How fast a client may send WebSocket frames: a budget the protocol takes one frame from
as it reads each one, filled again by the connection, which owns the clock.

A frame costs the server about the same to read whatever it holds (wsproto parses it in
Python, ~15 µs for an empty ping, pong or fragment), so a client that sends them as small
and as fast as it can (64 KiB of 6-byte pings is 10,000 frames) holds the service's one
event loop for every read, and every other client waits. No client needs many: a message
comes whole or in a few fragments, pings and pongs come every few seconds. `FRAME_BURST` at
once, then `FRAMES_PER_S` a second: past it the socket is closed with 1008, and what was
read past the budget is never parsed.
"""

from __future__ import annotations

from typing import Final

#: Frames a client may send at once (a message in many fragments, a burst of pings).
FRAME_BURST: Final = 2048
#: Frames a second a client may send after the burst, on average.
FRAMES_PER_S: Final = 100.0
#: The close code for a client past its budget: a policy violation (RFC 6455 §7.4.1).
TOO_FAST: Final = 1008


class FrameRate:
    """A token bucket of frames: `burst` at most, `rate` more a second (`refill`)."""

    def __init__(self, rate: float = FRAMES_PER_S, burst: int = FRAME_BURST) -> None:
        self.rate = rate
        self.burst = burst
        self._left = float(burst)
        self._at: float | None = None

    @property
    def reason(self) -> str:
        """The close reason for a client past the budget."""
        return f"too many frames: at most {self.burst} at once, then {self.rate:g} a second"

    def refill(self, now: float) -> None:
        """What the time since the last refill has added, up to `burst`."""
        if self._at is not None:
            self._left = min(float(self.burst), self._left + (now - self._at) * self.rate)
        self._at = now

    def take(self) -> bool:
        """One frame from the budget; False when none is left."""
        if self._left < 1:
            return False
        self._left -= 1
        return True
