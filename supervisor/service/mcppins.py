"""The pins of a gateway's servers (`tools/pins.py`) as one MCP session holds them: each
server's verdict, decided once for the tools it lists and the trust state as it is, and
decided again when either changes, so that a `trust --servers` in another process takes
effect in a running `serve` (each of its sessions) and `mcpx-hooks mcp`.

A server whose tools were pinned anew after this process listed them (`trust --servers`
pins what a fresh start lists: a new version of the server on disk, say) no longer lists
what is trusted, though it did: the tools of the old version, still running here. That
life is ended once none of its calls is in flight, and the server started afresh, to be
held to the new pin (the clients are told its tools changed). A server whose listing
differs from a pin taken before it listed (it changed since: on disk, or while it ran) is
quarantined, as it was.
"""

from __future__ import annotations

import os

import trio

from ..config.statefiles import state_path
from ..config.trust import tools_sha256
from ..core.servers import ServerSpec
from ..tools.pins import PinVerdict, key_of, listing, state_stamp, verdict
from ..tools.serverentry import ServerEntry, ServerFailing
from ..tools.servers import ServerManager

#: How long a server retired for a new pin is waited for to end, and start again, before its
#: call (or the listing) is answered with its quarantine.
RESTART_WAIT_S = 30.0


class SessionPins:
    """The verdicts of one session's servers against their pins."""

    def __init__(self) -> None:
        self._verdicts: dict[tuple[str, str], PinVerdict] = {}  # (pin key, tools' SHA-256)
        #: Each server's (tools as last listed, their verdict's key): a call looks its
        #: verdict up without the canonical JSON and hash of the whole list, until the list
        #: changes (a new life of the server lists its tools again).
        self._pin_keys: dict[str, tuple[object, tuple[str, str]]] = {}
        #: The trust state file (found once: the environment is the process's) and the
        #: state the verdicts were decided on (`state_stamp`, a stat of it at each use).
        self._state = state_path(os.environ)
        self._stamp: tuple[int, int, int] | None = None

    async def decide(
        self, manager: ServerManager | None, spec: ServerSpec, entry: ServerEntry, run_id: str
    ) -> PinVerdict:
        """`spec`'s server (`entry`, running) against its pin; pinned now at its first use.
        One whose tools were pinned anew since it listed them is started afresh first
        (`manager`), when it can be within `RESTART_WAIT_S`."""
        decided = await self._decide(spec, entry)
        if decided.pinned_at is None or decided.pinned_at <= entry.listed_at or manager is None:
            return decided
        entry.retire()  # (its life ends once its calls in flight have)
        with trio.move_on_after(RESTART_WAIT_S):
            await entry.ended.wait()
            try:
                await manager.open(spec, run_id=run_id)
            except ServerFailing:
                return decided
            if entry.on_relisted is not None:
                entry.on_relisted("tools")  # (every client lists anew)
            return await self._decide(spec, entry)
        return decided

    async def _decide(self, spec: ServerSpec, entry: ServerEntry) -> PinVerdict:
        # (a stat of one small file, here: a worker thread's hop would cost a call ten times it)
        stamp = state_stamp(self._state)
        if stamp != self._stamp:
            self._stamp = stamp
            self._verdicts.clear()
        known = self._pin_keys.get(spec.name)
        if known is not None and known[0] is entry.tools:
            key = known[1]
        else:
            key = (key_of(spec), tools_sha256(listing(entry)))
            self._pin_keys[spec.name] = (entry.tools, key)
        decided = self._verdicts.get(key)
        if decided is None:
            decided = await trio.to_thread.run_sync(verdict, spec, listing(entry), os.environ)
            # (a first use pins, writing the file anew: what it holds now is what was decided)
            self._stamp = state_stamp(self._state)
            if decided.quarantined is None:  # a quarantine is decided again: a pin may come
                self._verdicts[key] = decided
        return decided

    def known(self, spec: ServerSpec, entry: ServerEntry) -> PinVerdict | None:
        """The verdict decided on `spec`'s server with the tools `entry` lists, while the
        trust state is the one it was decided on; else None."""
        if state_stamp(self._state) != self._stamp:
            return None
        known = self._pin_keys.get(spec.name)
        return self._verdicts.get(known[1]) if known and known[0] is entry.tools else None
