"""`exec --remote`'s view: the run's frames as they come from the server, and the line
about a hook still running, from the server's events."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import trio

from .execview import Output, say_still_running

if TYPE_CHECKING:
    from ..service.answering import Responder
    from ..service.remote import Remote
    from .execstop import RemoteStopping

#: After this long without its `start`, `exec --remote`'s view says the run has not started:
#: past a gateway's 5 s bound on queueing the request, so one that cannot reach NATS says so
#: first, and the line is said only of a request queued for a worker.
NOT_STARTED_S: Final = 8.0


class RunId:
    """The id of a remote run, once its `start` frame told it."""

    def __init__(self) -> None:
        self.value = ""
        self.known = trio.Event()

    def frame(self, frame: Mapping[str, Any]) -> None:
        if not self.known.is_set() and frame.get("runId"):
            self.value = str(frame["runId"])
            self.known.set()


async def serve_remote_still_running(
    remote: Remote,
    run: RunId,
    say: Callable[[str], object],
    *,
    asking: Callable[[str], bool] = lambda _: False,
    stopping: RemoteStopping | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`serve_still_running` for a remote run, from the server's `/v1/events` (subscribed
    before the run is asked for). Events on the wire do not say they are an observe hook's:
    those carry the event that triggered them (`trigger`). If the server will not give its
    events, the view goes without the line. `stopping` hears the run's hook events too (what
    a second Ctrl-C says the server still runs)."""
    from ..service.remote import open_remote
    from ..service.remoteread import RemoteError, Unreachable, messages

    async def own() -> AsyncIterator[tuple[str, Mapping[str, Any]]]:
        async for event in messages(ws):
            data = event.get("data")
            if not isinstance(data, Mapping) or "trigger" in data:
                continue
            await run.known.wait()
            if event.get("runId") == run.value:
                if stopping is not None:
                    stopping.saw(str(event.get("kind")), data)
                yield str(event.get("kind")), data

    async with contextlib.AsyncExitStack() as stack:
        try:
            ws = await stack.enter_async_context(
                open_remote(remote, "/v1/events", {"kinds": "hook"})
            )
        except Unreachable:  # (the run's own connection would wait as long: said at once)
            raise
        except RemoteError:  # no line then, and nothing else lost: the frames come alone
            task_status.started()
            return
        if stopping is not None:
            stopping.following()
        task_status.started()
        try:
            await say_still_running(own(), say, asking)
        except* RemoteError:  # the events stopped (in a group, from its nursery): the line too
            pass


async def exec_remote_viewed(
    remote: Remote,
    request: Mapping[str, Any],
    out: Output,
    as_json: bool,
    responder: Responder | None = None,
    *,
    stopping: RemoteStopping | None = None,
) -> list[dict[str, Any]]:
    """`service.remote.exec_remote` with its frames shown on `out` and its asks answered by
    `responder`; the readable view also follows the server's events for the still-running
    line. `stopping`: what the second and third Ctrl-C say (without it, the second leaves at
    once). A `RemoteError` is raised as is, not in a group."""
    from ..service.remote import beside, exec_remote

    run = RunId()

    def show(frame: dict[str, Any]) -> None:
        run.frame(frame)
        if stopping is not None:
            stopping.run_id = run.value
            if stopping.stopped:  # (a second Ctrl-C: nothing more is printed)
                return
        out.frame(frame, as_json, flush=False)

    def show_output(frames: list[dict[str, Any]]) -> None:  # (after the `start`: no run id)
        if stopping is None or not stopping.stopped:
            out.output(frames, as_json)

    def line(text: str) -> None:
        if stopping is None or not stopping.stopped:
            out.line(text)

    async def not_started() -> None:
        with trio.move_on_after(NOT_STARTED_S):
            await run.known.wait()
            return
        line(
            f"(no run yet after {NOT_STARTED_S:g} s: the server has not started it; a cluster"
            " gateway's run waits for a worker to take it)"
        )

    async def still_running(nursery: trio.Nursery) -> None:
        if not as_json:
            still = partial(
                serve_remote_still_running, asking=out.view.waiting_for_answer, stopping=stopping
            )
            await nursery.start(still, remote, run, line)
            nursery.start_soon(not_started)  # (from when the server answered: it is there)

    frames = await beside(
        still_running,
        lambda: exec_remote(
            remote, request, show, responder, out.flush, on_stop=stopping, on_output=show_output
        ),
    )
    return frames or []
