"""`client.closed` says how each socket ended: its close code, null only when it was aborted
(the client vanished or stalled), whichever side began the closing handshake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service_client import Stream, arun, open_ws, read_until, start_server
from websockets.exceptions import ConnectionClosed


def test_client_closed_carries_the_code_of_a_clean_close(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--max-message-bytes", "100")
    try:

        async def connected(ws: Any, stream: Stream) -> int:
            event = await read_until(ws, stream, lambda o: o["kind"] == "client.connected")
            return int(event["data"]["connection"])

        async def closed(ws: Any, stream: Stream, number: int) -> Any:
            def ours(o: dict[str, Any]) -> bool:
                return o["kind"] == "client.closed" and o["data"]["connection"] == number

            return (await read_until(ws, stream, ours))["data"]["code"]

        async def main() -> list[Any]:
            codes = []
            path = "/v1/events?kinds=client&since=0"
            async with open_ws(server, path) as watch:
                stream = Stream()
                await connected(watch, stream)  # the watcher's own
                # The client closes first, with 1000.
                async with open_ws(server, "/v1/events?kinds=run"):
                    number = await connected(watch, stream)
                codes.append(await closed(watch, stream, number))
                # A message where none is taken: 4400, the server closing.
                async with open_ws(server, "/v1/events?kinds=run") as ws:
                    number = await connected(watch, stream)
                    await ws.send(json.dumps({"hello": 1}))
                    try:
                        await ws.recv()
                        await ws.recv()
                    except ConnectionClosed:
                        pass
                codes.append(await closed(watch, stream, number))
                # A message over the cap: 1009.
                async with open_ws(server, "/v1/exec") as ws:
                    number = await connected(watch, stream)
                    try:
                        await ws.send(json.dumps({"argv": ["echo", "x" * 200]}))
                        await ws.recv()
                        await ws.recv()
                    except ConnectionClosed:
                        pass
                codes.append(await closed(watch, stream, number))
            return codes

        assert arun(main()) == [1000, 4400, 1009]
    finally:
        server.stop()
    assert "Traceback" not in server.log()
