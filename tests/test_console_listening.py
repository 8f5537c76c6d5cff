"""The console as a screen reader reads it aloud, and with a keyboard, where a long run makes
it long to hear or to go through, in the distribution's Chromium under Playwright (as
`test_console_keyboard.py`) against a real `mcpx-hooks serve`: a run in the list named in a
few words, what each frame's link is, the way straight to an open question (and the focus
moved to it when the person has chosen no other place), an applied change's lines said as
added and removed, and a question whose countdown ran out by the page's clock.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pytest
from console_browser import (
    GATE,
    WAIT_MS,
    Browser,
    Page,
    browser,
    exec_run,
    expect,
    held_from,
    origin,
    page,
    served,
    sign_in,
    tab_to,
)
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

#: A script given whole on its command line: forty lines of `sh -c`.
LONG = "".join(f"echo line {i}\n" for i in range(40))


def test_a_run_in_the_list_is_named_in_a_few_words(page: Page, served: dict[str, Any]) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": ["sh", "-c", LONG]}, wait=True)
    link = page.locator(f'li[data-run="{run_id}"] a')
    # Its status, the start of its command line, when; not the forty lines of the script.
    said = r"^result sh -c \$'echo line 0\\necho line 1\\n[^,]*…, started [^,]+, [^,]+, exit 0$"
    expect(link).to_have_accessible_name(re.compile(said), timeout=WAIT_MS)
    assert len(link.evaluate("a => a.getAttribute('aria-label')")) < 160
    # The whole line: on the link's command (shown cut), and on the run's page.
    link.press("Enter")
    whole = page.locator(".run-head .argv")
    expect(whole).to_contain_text("echo line 39", timeout=WAIT_MS)
    expect(link.locator("code")).to_have_attribute("title", whole.inner_text())


NAMED_RUN = {
    "argv": ["sh", "-c", "echo hi"],
    "hooks": [
        {"name": "lint", "on": "script", "phase": "onSuccess", "run": ["sh", "-c", "exit 3"]}
    ],
}


def test_each_frame_link_says_what_its_frame_is(page: Page, served: dict[str, Any]) -> None:
    sign_in(page, served)
    run_id = exec_run(served, NAMED_RUN, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    timeline = page.get_by_role("list", name="Frames")
    expect(timeline.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    names = {
        "start": r"frame 0: start, sh -c 'echo hi'",
        "output-group": r"frame \d+: the script's output, from here",
        "lint": r"frame \d+: hook lint \(script\.onSuccess\), failed",
        "end": r"frame \d+: end, exit code 0",
    }
    rows = {
        "start": timeline.locator('li[data-type="start"]'),
        "output-group": timeline.locator("li.output-group"),
        "lint": timeline.locator("li.frame.hook", has_text="lint"),
        "end": timeline.locator('li[data-type="end"]'),
    }
    for key, name in names.items():
        expect(rows[key].get_by_role("link")).to_have_accessible_name(re.compile(f"^{name}$"))


#: A run whose question comes after thirty hooks' frames: thirty links before its buttons.
LONG_BEFORE_ASKING = {
    "argv": ["true"],
    "hooks": [
        *({"name": f"h{i}", "on": "script", "phase": "before", "run": ["true"]} for i in range(30)),
        {**GATE, "phase": "onSuccess"},
    ],
}


@pytest.mark.parametrize("where", ["on-the-heading", "typing-a-search"])
def test_a_question_that_comes_is_reached_at_once(
    browser: Browser, served: dict[str, Any], where: str
) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        sign_in(tab, served)
        holding = held_from(tab, '"type":"ask"')
        run_id = exec_run(served, LONG_BEFORE_ASKING, wait=False)
        tab.goto(f"{origin(served)}/#/runs/{run_id}")
        heading = tab.get_by_role("heading", name=f"Run {run_id}")
        expect(heading).to_be_focused(timeout=WAIT_MS)
        expect(tab.locator('.frame.hook[data-type="hook"]')).to_have_count(30, timeout=WAIT_MS)
        box = tab.get_by_role("searchbox", name="Search the runs")
        if where == "typing-a-search":
            box.focus()
            tab.keyboard.type("depl")
        holding["release"]()  # the question comes
        question = tab.locator(".frame.ask .ask p").first
        expect(question).to_be_visible(timeout=WAIT_MS)
        expect(tab.locator("#announce")).to_contain_text("gate asks: Deploy now?")
        if where == "typing-a-search":
            # Left where the person is; the page says where the question is.
            expect(box).to_be_focused()
            expect(box).to_have_value("depl")
            expect(tab.locator("#announce")).to_contain_text("Go to the open question")
            heading.focus()
        else:
            # Nobody chose another place: the question has the focus.
            expect(question).to_be_focused()
            heading.focus()
        # From the run's heading, the question is two keys away, its Yes button three.
        go = tab.get_by_role("link", name="Go to the open question")
        assert tab_to(tab, go) == 1
        tab.keyboard.press("Enter")
        expect(question).to_be_focused()
        yes = tab.get_by_role("button", name="Yes")
        assert tab_to(tab, yes) == 1
        tab.keyboard.press("Enter")
        expect(tab.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
        expect(go).to_be_hidden()  # no question is open any more
    finally:
        context.close()


APPLIED = {
    "python": "def main():\n    return {'greeting': 'hello', 'n': 1}\n",
    "hooks": [
        {
            "name": "upper",
            "on": "script",
            "phase": "onSuccess",
            "effect": "apply",
            "run": ["sh", "-c", 'echo \'{"apply": {"value": {"greeting": "HELLO", "n": 1}}}\''],
        }
    ],
}


def test_the_lines_an_apply_changed_are_said_added_and_removed(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    run_id = exec_run(served, APPLIED, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".diff-lines")).to_match_aria_snapshot(
        """
        - group "lines changed":
          - text: '{ removed: "greeting": "hello", added: "greeting": "HELLO", "n": 1 }'
        """,
        timeout=WAIT_MS,
    )


def answer_from_afar(served: dict[str, Any], run_id: str, word: str) -> None:
    """Answers the run's open question on a socket of its own (a real client, as a terminal
    would), and reads the run to its end."""
    server = served["server"]
    url = f"{server.url}/v1/runs/{run_id}?from=0"
    ws = connect(url, additional_headers=server.headers(), max_size=None, proxy=None)
    with ws, contextlib.suppress(ConnectionClosed):
        while True:
            for line in str(ws.recv(timeout=60)).split("\n"):
                frame = json.loads(line)
                if frame.get("type") == "ask":
                    ws.send(json.dumps({"type": "answer", "askId": frame["askId"], "answer": word}))


def test_a_question_past_its_deadline_by_the_page_clock_takes_no_answer(
    browser: Browser, served: dict[str, Any]
) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.clock.install()  # the page's own clock, moved on below (the server's is not)
        sign_in(tab, served)
        run_id = exec_run(served, {"argv": ["true"], "hooks": [GATE]}, wait=False)
        tab.goto(f"{origin(served)}/#/runs/{run_id}")
        yes = tab.get_by_role("button", name="Yes")
        no = tab.get_by_role("button", name="No")
        expect(yes).to_be_enabled(timeout=WAIT_MS)
        no.focus()
        tab.clock.fast_forward("01:01")  # past the minute the question waits, by this clock
        expect(yes).to_be_disabled()
        expect(no).to_be_disabled()
        state = tab.locator(".frame.ask .ask-state")
        expect(state).to_have_text(
            'its deadline has passed by this page\'s clock: "no" applies unless the server'
            " took an answer in time"
        )
        expect(state).to_be_focused()  # not lost with the button
        # The server decides: its own clock has not reached the deadline, an answer counts.
        answer_from_afar(served, run_id, "yes")
        expect(state).to_have_text("answered yes (by client)", timeout=WAIT_MS)
    finally:
        context.close()
