"""`mcpx-hooks demo`: the main job in miniature, on a built-in example, ending by itself.

Runs of `examples/job.py` with the hooks of `examples/demo.toml` around them: one that passes
the check (a hook times out and fails open, one's answer is dropped, one transforms the result,
an observer sees the run finish); one that the check refuses, so the script never starts; then
the service on a free loopback port and the same run streamed to a WebSocket client. Every
frame is shown as it happens.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import trio

from .bus import Event
from .config import load_config
from .hooks import Config
from .remote import Remote, exec_remote
from .run import RunRequest
from .runtime import Runtime, open_runtime
from .script import Script
from .server import Listening, Service, ServiceOptions
from .view import frame_lines


def example_dir() -> Path:
    return Path(str(resources.files("mcpx_hooks.supervisor").joinpath("examples")))


def example_config() -> Config:
    path = example_dir() / "demo.toml"
    return load_config([path], cwd=path.parent, environ=os.environ, discover=False)


async def _show_run(runtime: Runtime, title: str, run_input: Any) -> None:
    print(f"--- {title}")
    request = RunRequest(Script(python_file="job.py"), str(example_dir()), input=(run_input,))
    run = runtime.new_run(request)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.execute, run)
        async for batch in run.journal.follow(0):
            for frame in batch:
                print("\n".join(frame_lines(frame)))
    print()


async def _show_remote_run(runtime: Runtime) -> None:
    """The service on a free loopback port, and the same run streamed to a WebSocket client."""
    service = Service(runtime, ServiceOptions(host="127.0.0.1", port=0, token=None))
    async with trio.open_nursery() as nursery:
        listening: Listening = await nursery.start(service.serve)
        print(f"--- the same run over WebSocket: {listening.url}/v1/exec (serving on loopback)")
        request = {"file": "job.py", "cwd": str(example_dir()), "input": {"name": "websocket"}}
        await exec_remote(
            Remote(listening.url),
            request,
            lambda frame: print("ws> " + "\nws> ".join(frame_lines(frame))),
        )
        service.stop()
    print()


async def _show_observers(runtime: Runtime) -> None:
    async with runtime.bus.subscribe(kinds=("hook.finished",), since=0) as sub:
        async for item in sub:
            if isinstance(item, Event) and item.caused_by_observer:
                data = item.data
                print(
                    f"observer {data['name']} saw {data['on']} (event of run "
                    f"{item.run_id or '-'}): {data['status']}, effect {data['effect']}"
                )


async def run_demo() -> int:
    config = example_config()
    print(f"mcpx-hooks demo: {example_dir() / 'job.py'} with the hooks of demo.toml\n")
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(_show_observers, runtime)
        await _show_run(runtime, "a run the check lets through", {"name": "world"})
        await _show_run(runtime, "a run the check refuses: the script never starts", {})
        await _show_remote_run(runtime)
        await runtime.wait_observers()
        nursery.cancel_scope.cancel()
    print("\nevery hook and script above ran as a real process, its tree reaped; none is left")
    return 0
