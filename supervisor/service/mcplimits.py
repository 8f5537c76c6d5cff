"""The limits on MCP clients' calls (`[servers.x] callsPerMinute`, `maxConcurrent`, and the
same keys per tool under `[servers.x.tools."name"]`): a call past one is answered at once
with why, never queued. A server's limits count all its tools' calls together; a tool's,
its own.

`callsPerMinute` counts the calls let through in the last 60 seconds (at most that many
times are kept); `maxConcurrent` the calls let through and not yet answered.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator
from typing import Final

from ..core.servers import NO_CALL_LIMITS, CallLimits, ServerSpec

#: The window `callsPerMinute` counts in, in seconds.
WINDOW_S: Final = 60.0


def unlimited(spec: ServerSpec, tool: str) -> bool:
    """Whether neither `spec`'s server nor its `tool` has a limit on calls."""
    own = spec.tool_limits.get(tool, NO_CALL_LIMITS)
    return all(
        limit.calls_per_minute is None and limit.max_concurrent is None
        for limit in (spec.call_limits, own)
    )


class CallLimiter:
    """The calls let through so far, by server and by tool."""

    def __init__(self) -> None:
        self._recent: dict[tuple[str, ...], deque[float]] = {}
        self._running: dict[tuple[str, ...], int] = {}

    def _limits(self, spec: ServerSpec, tool: str) -> list[tuple[tuple[str, ...], CallLimits]]:
        own = spec.tool_limits.get(tool, NO_CALL_LIMITS)
        return [((spec.name,), spec.call_limits), ((spec.name, tool), own)]

    @contextlib.contextmanager
    def take(self, spec: ServerSpec, tool: str, shown: str, now: float) -> Iterator[str | None]:
        """Within the block, the call to `tool` (`shown` as the client names it) counts
        against the limits; the block gets None, or why the call is past one (then it does
        not count, and must not be made)."""
        limits = self._limits(spec, tool)
        for key, limit in limits:
            recent = self._recent.get(key)
            while recent and recent[0] <= now - WINDOW_S:
                recent.popleft()
            # A server's limit is said as its own: named by the tool called, it read as the
            # tool's, which may have had no call yet.
            whose = shown if len(key) > 1 else f"server {spec.name}, all its tools together"
            per_minute, at_once = limit.calls_per_minute, limit.max_concurrent
            if per_minute is not None and recent is not None and len(recent) >= per_minute:
                yield f"rate limit: {per_minute} calls per minute for {whose}"
                return
            if at_once is not None and self._running.get(key, 0) >= at_once:
                yield f"concurrency limit: {at_once} calls at once for {whose}"
                return
        for key, limit in limits:
            if limit.calls_per_minute is not None:
                self._recent.setdefault(key, deque(maxlen=limit.calls_per_minute)).append(now)
            self._running[key] = self._running.get(key, 0) + 1
        try:
            yield None
        finally:
            for key, _ in limits:
                self._running[key] -= 1
