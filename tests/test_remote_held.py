"""What `exec --remote` holds of a run is bounded: a server sending more frames than any run
keeps (tens of thousands of log frames, more artifacts than a run may leave, outcomes twice)
has every frame shown as it comes, and the client holds its outcome, as many artifacts as a
run keeps, and `HELD_OTHERS` of the rest."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from frame_samples import sample
from websockets.sync.server import ServerConnection, serve

from mcpx_hooks.supervisor.core.frames import FrameType
from mcpx_hooks.supervisor.run.artifacts import MAX_ARTIFACTS
from mcpx_hooks.supervisor.service.remote import HELD, HELD_OTHERS, Remote, exec_remote

LOGS = HELD_OTHERS + 1000
ARTIFACTS = MAX_ARTIFACTS + 200


def frames() -> Iterator[dict[str, Any]]:
    """A run's frames, numbered: more logs and artifacts than are held, two outcomes."""
    kinds = [FrameType.START, *[FrameType.LOG] * LOGS, *[FrameType.ARTIFACT] * ARTIFACTS]
    kinds += [FrameType.RESULT, FrameType.RESULT, FrameType.END, FrameType.END]
    for seq, kind in enumerate(kinds):
        yield sample(kind, seq)


@pytest.fixture
def server() -> Iterator[str]:
    def handle(connection: ServerConnection) -> None:
        connection.recv()  # the request
        batch: list[str] = []
        for frame in frames():
            batch.append(json.dumps(frame))
            if len(batch) == 500:
                connection.send("\n".join(batch))
                batch.clear()
        connection.send("\n".join(batch))
        connection.close(1000)

    with serve(handle, "127.0.0.1", 0) as running:
        thread = threading.Thread(target=running.serve_forever, daemon=True)
        thread.start()
        yield f"ws://127.0.0.1:{running.socket.getsockname()[1]}"
        running.shutdown()
        thread.join()


def test_the_held_frames_are_bounded_and_every_frame_is_shown(server: str) -> None:
    shown: list[dict[str, Any]] = []
    held = trio.run(exec_remote, Remote(server, None), {"argv": ["true"]}, shown.append)
    assert len(shown) == sum(1 for _ in frames())
    by_type: dict[str, int] = {}
    for frame in held:
        by_type[frame["type"]] = by_type.get(frame["type"], 0) + 1
    assert by_type == {
        FrameType.START: 1,
        FrameType.LOG: HELD_OTHERS - 1,
        FrameType.ARTIFACT: MAX_ARTIFACTS,
        FrameType.RESULT: 1,
        FrameType.END: 1,
    }
    assert [f["seq"] for f in held] == sorted(f["seq"] for f in held)  # in the run's order
    results = [f for f in held if f["type"] == FrameType.RESULT]
    assert results[0]["seq"] == 1 + LOGS + ARTIFACTS  # the first one


def test_a_run_keeps_as_many_artifacts_as_the_client_holds() -> None:
    assert HELD[FrameType.ARTIFACT] == MAX_ARTIFACTS
