"""Every frame type through the console: its scripts take the frame types and the messages
beside them from `/console/tables.js`, which the server makes from its tables
(`core/frames.py`), and spell none of them; in the distribution's Chromium, one frame of each
type of the table (`frame_samples`) and one of a type no table has, sent on a run's socket,
each show on the run's page (the browser part runs only this module's one test; it is slow).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from console_browser import WAIT_MS, Page, browser, expect, origin, page, served
from frame_samples import RUN_ID, UNKNOWN, every_frame

from mcpx_hooks.supervisor.core.convert import camel
from mcpx_hooks.supervisor.core.effects import AnsweredBy
from mcpx_hooks.supervisor.core.events import EventKind
from mcpx_hooks.supervisor.core.frames import (
    ENVELOPE_KEYS,
    OUTPUT_TYPES,
    Control,
    FrameType,
    HookStatus,
    ServiceMessage,
)
from mcpx_hooks.supervisor.core.hookframes import HookFrame
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.servers import CALL_CANCELLED, CALL_SESSION_ENDED
from mcpx_hooks.supervisor.service import pages
from mcpx_hooks.supervisor.service.wire import Close

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

CONSOLE = Path(pages.__file__).parent / pages.FOLDER
#: The tables' words, which no script of the console may spell.
WORDS = {*FrameType, *Control, *ServiceMessage}
#: Where a script would spell one: compared with a type or a stream, a `case`, a message's type.
SPELLED = re.compile(
    r'(?:\.type|\bstream)\s*[!=]==?\s*"([^"]*)"'
    r'|\bcase\s+"([^"]*)"'
    r'|\btype:\s*"([^"]*)"'
)


def _exported(module: bytes) -> dict[str, Any]:
    found = re.findall(r"^export const (\w+) = Object\.freeze\((.*)\);$", module.decode(), re.M)
    return {name: json.loads(value) for name, value in found}


def test_the_server_makes_the_consoles_tables_from_its_own() -> None:
    assert pages.TABLES not in {p.name for p in CONSOLE.iterdir()}  # made, never shipped
    assert _exported(pages.shipped()[pages.TABLES].body) == {
        "FrameType": {t.name: t.value for t in FrameType},
        "OUTPUT_TYPES": [t.value for t in FrameType if t in OUTPUT_TYPES],
        "ENVELOPE_KEYS": list(ENVELOPE_KEYS),
        "Control": {"CANCEL": "cancel", "ANSWER": "answer"},
        "ServiceMessage": {"ERROR": "error", "HOOKS": "hooks"},
        "HookStatus": {s.name: s.value for s in HookStatus},
        "Phase": {p.name: p.value for p in Phase},
        "EventKind": {k.name: k.value for k in EventKind},
        "AnsweredBy": {a.name: a.value for a in AnsweredBy},
        "Close": {c.name: c.value for c in Close},
        "CALL_CANCELLED": CALL_CANCELLED,
        "CALL_SESSION_ENDED": CALL_SESSION_ENDED,
        "ANSWER_WORDS": {
            "source": "stdout",
            "run": "stdout",
            "module": "the function's return value",
            "prompt": "the model's answer",
            "plugin": "the tool's answer",
        },
        "PROCESS_ANSWER": "stdout",
        # (each a hook frame's field: a note the console shows under the hook)
        "HOOK_NOTES": ["failureNote", "answerNote"],
    }
    fields = {camel(f.name) for f in attrs.fields(HookFrame)}
    assert {"failureNote", "answerNote"} <= fields


@pytest.mark.parametrize("script", sorted(p.name for p in CONSOLE.glob("*.js")))
def test_no_script_of_the_console_spells_a_frame_type(script: str) -> None:
    text = (CONSOLE / script).read_text()
    spelled = {word for match in SPELLED.findall(text) for word in match if word}
    assert not spelled & WORDS, f"{script} spells {sorted(spelled & WORDS)}: use tables.js"


def test_the_guard_finds_a_spelled_type() -> None:
    said = 'if (frame.type === "hook") x(); switch (t) { case "end": } send({ type: "answer" });'
    assert {w for m in SPELLED.findall(said) for w in m if w} == {"hook", "end", "answer"}


def test_every_frame_type_shows_on_a_runs_page(page: Page, served: dict[str, Any]) -> None:
    frames = [*every_frame(), {**UNKNOWN, "seq": len(FrameType)}]

    def run_socket(ws: Any) -> None:  # the run's socket, answered here instead of the server
        ws.send("\n".join(json.dumps(f) for f in frames))
        ws.close(code=1000)

    page.route_web_socket(re.compile(rf"/v1/runs/{RUN_ID}\?from=0$"), run_socket)
    page.goto(f"{origin(served)}/?token={served['server'].token}")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
    page.goto(f"{origin(served)}/#/runs/{RUN_ID}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    given = page.evaluate("import('/console/tables.js').then((m) => m.FrameType)")
    assert given == {t.name: t.value for t in FrameType}
    for frame in frames:
        kind = frame["type"]
        if kind in OUTPUT_TYPES:  # drawn in the output list, its type beside it (stdout: blank)
            line = page.locator(f".output .line.{kind}")
            expect(line).to_have_count(1)
            assert line.inner_text().strip(), f"the console shows nothing of a {kind} frame"
        else:
            row = page.locator(f'.timeline > li.frame[data-type="{kind}"]')
            expect(row).to_have_count(1)
            body = row.locator(":scope > :nth-child(3)")
            assert body.inner_text().strip(), f"the console shows nothing of a {kind} frame"
    unknown = page.locator(f'.timeline > li.frame[data-type="{UNKNOWN["type"]}"]')
    expect(unknown).to_contain_text('"shape": "round"')
    assert [e for e in served["page_state"]["errors"] if "status of 401" not in e] == []
