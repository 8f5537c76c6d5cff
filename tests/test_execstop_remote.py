"""What `exec --remote` says on its second and third Ctrl-C (`RemoteStopping`), from the hook
events the readable view follows, or without them (`--json`). Pure: no server."""

from __future__ import annotations

from mcpx_hooks.supervisor.cli.execstop import RemoteStopping
from mcpx_hooks.supervisor.core.events import EventKind


def stopping() -> tuple[RemoteStopping, list[str]]:
    said: list[str] = []
    stop = RemoteStopping(said.append)
    stop.run_id, stop.url = "3f2a9c0e5d7b1a46", "ws://127.0.0.1:8765"
    return stop, said


def test_it_names_each_hook_still_running_then_where_the_end_will_be() -> None:
    stop, said = stopping()
    stop.following()
    for name in ("a", "b", "c"):
        stop.saw(EventKind.HOOK_STARTED, {"name": name, "on": "script", "phase": "suffix"})
    stop.saw(EventKind.HOOK_FINISHED, {"name": "b"})
    stop(2)
    stop(3)
    assert said == [
        "mcpx-hooks exec: stopping; the server still runs hook a (script.suffix), hook c"
        " (script.suffix), each killed at its timeoutMs; Ctrl-C again to leave now (the server"
        " runs them to the end all the same)",
        "mcpx-hooks exec: leaving; the server runs hook a (script.suffix), hook c (script.suffix)"
        " to their end all the same (the run's end is in its history: mcpx-hooks runs show"
        " 3f2a9c0e5d7b1a46 --remote ws://127.0.0.1:8765)",
    ]
    assert stop.stopped and stop.left


def test_with_nothing_running_the_second_says_nothing() -> None:
    stop, said = stopping()
    stop.following()
    stop(2)
    assert said == [] and stop.stopped and not stop.left


def test_a_hook_name_cannot_forge_a_line() -> None:
    stop, said = stopping()
    stop.following()
    stop.saw(EventKind.HOOK_STARTED, {"name": "x\nmcpx-hooks exec: done", "on": "script"})
    stop(2)
    [line] = said
    assert "\n" not in line
