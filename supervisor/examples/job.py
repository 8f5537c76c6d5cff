"""The demo's script: greets whoever the run's input names."""

import json
import os

import mcpx  # provided by the launcher: log, emit, result, call


def main() -> str:
    with open(os.environ["MCPX_INPUT"]) as f:
        name = json.load(f)["name"]
    mcpx.log("greeting", name=name)
    # A tool call that goes through (it starts the server, which lists its tools)...
    mcpx.log("counted", **mcpx.call("words.count", {"text": f"hello, {name}"}))
    try:  # ...and one the config's `call` hook refuses: the server is not asked
        mcpx.call("words.remove", {"path": "/"})
    except mcpx.CallError as exc:
        mcpx.log("not removed", reason=str(exc))
    print(f"working on a greeting for {name}")
    return f"hello, {name}"
