"""`/v1/hooks`' one message, built once per config and shared by every socket.

The hooks, files and skipped files of a config are encoded once, when a socket first asks
for them under that config (a config of thousands of hooks makes megabytes of JSON), in a
worker thread (`HooksAnswers`): 5,000 hooks took some 40 ms, which on the event loop every
other client waited for; sockets that ask while it is encoded wait for that one. The
tool servers' states change as servers start and stop, so they are encoded per request,
but they are small, and the whole WebSocket frame is built again only when they differ
from the last ones: every socket between two changes is given the same bytes, which
`ServerConnection.accept` writes as they are.
"""

from __future__ import annotations

from typing import Any, Final

import trio

from ..core import jsontext
from ..core.convert import to_json
from ..core.frames import ServiceMessage
from ..core.hooks import Config
from .broadcast import text_frame

#: What a message's servers part closes with.
_END: Final = b"}"


class HooksAnswer:
    """The message of one config (`config`): `frame(servers)` is its complete text frame
    with the tool servers' states `servers`."""

    def __init__(self, config: Config) -> None:
        self.config = config
        message = {
            "type": ServiceMessage.HOOKS,
            "hooks": [to_json(h) for h in config.hooks],
            "files": list(config.files),
            # The project files found and applied (trusted): with `skipped`, what was found.
            "projectFiles": list(config.pinned),
            # The project files found and not applied (not trusted, or changed since).
            "skipped": [to_json(skipped) for skipped in config.skipped],
        }
        # `{"type":…,"skipped":[…]` and `,"servers":` then the states: one JSON object.
        self._head = jsontext.dumps(message)[:-1] + b',"servers":'
        self._servers: bytes | None = None
        self._frame = b""
        #: How many times the frame was built (a test's count).
        self.built = 0

    def frame(self, servers: list[dict[str, Any]]) -> bytes:
        """The message as one text frame, the same bytes while `servers` encode the same."""
        encoded = jsontext.dumps(servers)
        if encoded != self._servers:
            self._servers = encoded
            self._frame = text_frame(b"".join((self._head, encoded, _END)))
            self.built += 1
        return self._frame


class HooksAnswers:
    """The message of the config in force, encoded in a worker thread once per config:
    sockets that ask while it is encoded wait for that encoding. Should it fail, each
    socket waiting tries again (and fails alone)."""

    def __init__(self) -> None:
        self._answer: HooksAnswer | None = None
        #: The config being encoded now, and what is set once it is done (or failed).
        self._encoding: tuple[Config, trio.Event] | None = None

    async def of(self, config: Config) -> HooksAnswer:
        while (answer := self._answer) is None or answer.config is not config:
            encoding = self._encoding
            if encoding is not None and encoding[0] is config:
                await encoding[1].wait()
                continue
            self._encoding = encoding = (config, trio.Event())
            try:
                self._answer = await trio.to_thread.run_sync(HooksAnswer, config)
            finally:
                if self._encoding is encoding:
                    self._encoding = None
                encoding[1].set()
        return answer
