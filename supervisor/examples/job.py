"""The demo's script: greets whoever the run's input names."""

import json
import os

import mcpx  # provided by the launcher: log, emit, result


def main() -> str:
    with open(os.environ["MCPX_INPUT"]) as f:
        name = json.load(f)["name"]
    mcpx.log("greeting", name=name)
    print(f"working on a greeting for {name}")
    return f"hello, {name}"
