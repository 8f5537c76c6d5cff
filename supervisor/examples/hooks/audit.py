"""An observer: writes a line per event to its scratch directory; answers nothing."""

import os
from typing import Any


def hook(payload: dict[str, Any]) -> dict[str, Any] | None:
    event = payload["event"]
    with open(os.path.join(os.environ["MCPX_HOOK_SCRATCH"], "audit.log"), "a") as log:
        log.write(f"{event['seq']} {event['kind']}\n")
    return {"advise": "an observer's answer is dropped: observe hooks have effect off"}
