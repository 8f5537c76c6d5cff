"""Over stdio a client is alone in hearing the servers it uses: a burst of a server's
progress notifications on a call that goes through the SDK's server (here, arguments too
large to relay as a line) reaches a client that reads, every one, in order. Before, the
client's queue (64 messages) took the first ones and the rest of each chunk of the server's
output was missed: 73 of 2,000 reached a client reading all along."""

from __future__ import annotations

import json
from pathlib import Path

import trio
from conftest import Marker
from mcpface_parts import stdio_session, through_mcpx, write_config

from mcpx_hooks.supervisor.service.mcpoutbox import OUTBOX_BYTES

PROGRESS = (
    '{"jsonrpc":"2.0","method":"notifications/progress",'
    '"params":{"progressToken":@id,"progress":%d,"message":"%s"}}'
)


async def test_a_burst_of_progress_reaches_a_client_that_reads_whole(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker, h_mode="relay", expose=("relay",))
    count = OUTBOX_BYTES // 800  # (1,310 of some 300 bytes: a quarter of the queue)
    burst = "\n".join(PROGRESS % (n, "y" * 200) for n in range(count))
    done = json.dumps({"content": [{"type": "text", "text": "done"}]})
    raw = f'{burst}\n{{"jsonrpc":"2.0","id":@id,"result":{done}}}'
    heard: list[float] = []

    async def progress(said: float, total: float | None, message: str | None) -> None:
        heard.append(said)

    with trio.fail_after(60):
        async with stdio_session(through_mcpx(config), where / "stderr") as session:
            await session.list_tools()  # (its server running: the call is not relayed as a
            # line only for its size, and goes through the SDK's server)
            answer = await session.call_tool("h__relay", {"raw": raw}, progress_callback=progress)
    assert answer.is_error is False
    assert heard == list(range(count))
    assert marker.alive() == []
