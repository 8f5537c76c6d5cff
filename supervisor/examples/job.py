"""The demo's script: greets whoever the run's input names."""

import json
import os

import mcpx  # provided by the launcher: log, emit, result, call


def main() -> str:
    with open(os.environ["MCPX_INPUT"]) as f:
        name = json.load(f)["name"]
    mcpx.log("greeting", name=name)
    try:  # a tool call the config's `call` hook refuses
        mcpx.call("words.remove", {"path": "/"})
    except mcpx.CallError as exc:
        mcpx.log("not removed", reason=str(exc))
    mcpx.log("counted", **mcpx.call("words.count", {"text": f"hello, {name}"}))
    print(f"working on a greeting for {name}")
    return f"hello, {name}"
