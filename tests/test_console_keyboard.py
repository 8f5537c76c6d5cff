"""The console with only a keyboard, and as a screen reader reads it, in the distribution's
Chromium under Playwright (as `test_console_browser.py`) against a real `mcpx-hooks serve`:
the skip link, the focus when a question's buttons go (answered here or elsewhere) and when
a phone goes back to the list, a late answer from a second tab (after another's, after the
deadline) said as not taken, the live region saying a run whose hooks end by the dozen in a
few sentences, and the accessibility tree of the pages a person meets.

A second tab's late answer is made by holding back, in the browser's own network layer
(Playwright's `route_web_socket`, passing everything through to the real server), the frames
the server sent that tab after the one that settled the question: the person answers
before the page has heard it is settled, as on a slow link. Its clock is a minute behind
(as on a machine whose clock is slow): by its own clock the deadline has not passed, so it
still offers the buttons (a page whose clock says the deadline passed offers none).
"""

from __future__ import annotations

import itertools
import json
import shlex
import time
from typing import Any

import pytest
from console_browser import (
    GATE,
    PY,
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
from websockets.sync.client import connect

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

#: A question the run waits on after the first one (a minute): the run goes on, its socket open.
LATER = {**GATE, "name": "later", "phase": "onSuccess"}


def test_the_skip_link_goes_to_the_content_and_keeps_the_run_open(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": ["true"]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    heading = page.get_by_role("heading", name=f"Run {run_id}")
    expect(heading).to_be_focused(timeout=WAIT_MS)
    page.locator(".skip").focus()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    # It went to `#main`, which no view is: the run was closed, the runs list shown.
    assert page.evaluate("location.hash") == f"#/runs/{run_id}"
    expect(heading).to_be_visible()


def test_a_question_answered_with_the_keyboard_keeps_the_focus_on_it(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": ["true"], "hooks": [GATE]}, wait=False)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    yes = page.get_by_role("button", name="Yes")
    # The run waits on it: the focus goes to the question, one Tab from its Yes.
    expect(page.locator(".frame.ask .question-line")).to_be_focused(timeout=WAIT_MS)
    assert tab_to(page, yes) == 1
    page.keyboard.press("Enter")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    # The buttons went; the focus is on what the question says now, not lost to the page.
    state = page.locator(".frame.ask .ask-state")
    expect(state).to_have_text("answered yes (by client)")
    expect(state).to_be_focused()
    page.keyboard.press("Tab")  # and goes on from there, to the next frame's link
    expect(page.locator(".frame.hook a.seq").first).to_be_focused()


def test_a_question_whose_run_was_cancelled_says_so(page: Page, served: dict[str, Any]) -> None:
    # The run cancelled while its question waited (its client left, a server stopping): the
    # question's line said 'settled', the word for nothing a person can act on.
    sign_in(page, served)
    server = served["server"]
    request = {"argv": ["true"], "hooks": [GATE], "cancelOnDisconnect": True}
    with connect(server.url + "/v1/exec", additional_headers=server.headers(), proxy=None) as ws:
        ws.send(json.dumps(request))
        run_id = json.loads(str(ws.recv(timeout=60)).split("\n")[0])["runId"]
        page.goto(f"{origin(served)}/#/runs/{run_id}")
        expect(page.get_by_role("button", name="Yes")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".frame.ask .ask-state")).to_have_text(
        "not answered: the run was cancelled while the question waited for an answer"
    )


def test_back_to_the_list_on_a_phone_puts_the_focus_on_the_run(
    browser: Browser, served: dict[str, Any]
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        phone = context.new_page()
        sign_in(phone, served)
        run_id = exec_run(served, {"argv": ["true"]}, wait=True)
        phone.goto(f"{origin(served)}/#/runs/{run_id}")
        back = phone.get_by_role("link", name="← All runs")
        expect(back).to_be_visible(timeout=WAIT_MS)
        back.focus()
        phone.keyboard.press("Enter")
        expect(phone.locator("#runs")).to_be_visible()
        expect(phone.locator(f'li[data-run="{run_id}"] a')).to_be_focused()
    finally:
        context.close()


def held_after_settling(tab: Page) -> dict[str, Any]:
    """Holds back what the server sends `tab` on a run's socket from the first hook frame on,
    until `release` (the rest passes through, both ways)."""
    return held_from(tab, '"type":"hook"')


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        (
            {},
            "answered yes (by client). answer refused: ask-1 was already answered yes"
            " (by client); the first counts",
        ),
        (
            {"default": "yes", "deadlineMs": 1500},
            'nobody answered in time: "yes" applied at its deadline. answer refused: ask-1 is'
            " closed: its deadline passed (default yes applied)",
        ),
    ],
    ids=["after-another-tab", "after-the-deadline"],
)
def test_a_late_answer_from_a_second_tab_is_said_not_taken(
    browser: Browser, served: dict[str, Any], asked: dict[str, Any], said: str
) -> None:
    question = {**GATE, "run": ["sh", "-c", "echo " + _ask_json(asked)]}
    first = browser.new_context()
    second = browser.new_context()
    try:
        second.clock.install(time=time.time() - 60)
        one, two = first.new_page(), second.new_page()
        sign_in(one, served)
        sign_in(two, served)
        holding = held_after_settling(two)
        run_id = exec_run(served, {"argv": ["true"], "hooks": [question, LATER]}, wait=False)
        one.goto(f"{origin(served)}/#/runs/{run_id}")
        two.goto(f"{origin(served)}/#/runs/{run_id}")
        no = two.get_by_role("button", name="No")
        expect(no).to_be_visible(timeout=WAIT_MS)
        if not asked:
            one.get_by_role("button", name="Yes").click()
        # Settled (by the first tab, or by the deadline): the second has not heard it yet.
        expect(one.locator('.timeline li[data-type="hook"]').first).to_be_visible(timeout=WAIT_MS)
        no.focus()
        two.keyboard.press("Enter")
        holding["release"]()
        state = two.locator(".frame.ask .ask-state").first
        expect(state).to_have_text(said, timeout=WAIT_MS)
        expect(state).to_be_focused()
        one.get_by_role("button", name="No").click()  # the later question: the run ends
        expect(one.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    finally:
        first.close()
        second.close()


def _ask_json(asked: dict[str, Any]) -> str:
    ask = {"question": "Deploy now?", "default": "no", "deadlineMs": 60000, **asked}
    return shlex.quote(json.dumps({"ask": ask}))


#: Every change of the page's live region, with its time (`performance.now()`).
HEARD = """() => {
  window.heard = [];
  const region = document.getElementById('announce');
  new MutationObserver(() => window.heard.push([performance.now(), region.textContent]))
    .observe(region, {childList: true, characterData: true, subtree: true});
}"""


def test_a_run_whose_hooks_end_by_the_dozen_is_said_in_a_few_sentences(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    failing = [
        {
            "name": f"h{i}",
            "on": "script",
            "phase": ("before", "onSuccess")[i % 2],
            "run": ["sh", "-c", "exit 1"],
        }
        for i in range(30)
    ]
    code = "for i in range(3000):\n    print('line', i)\n"
    page.evaluate(HEARD)
    run_id = exec_run(served, {"argv": [PY, "-c", code], "hooks": [GATE, *failing]}, wait=False)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    page.get_by_role("button", name="Yes").click(timeout=WAIT_MS)
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#announce")).to_contain_text("run ended: result", timeout=WAIT_MS)
    heard = page.evaluate("window.heard")
    texts = [text for _, text in heard]
    # The question in full; the thirty failures and the end in a few sentences, at most one
    # every two seconds (before: one a hook, thirty in two seconds); no output line read.
    assert any("gate asks: Deploy now?" in t for t in texts), texts
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(heard)]
    assert len(heard) <= 6 and all(gap >= 1900 for gap in gaps), heard
    assert not any("line" in t for t in texts), texts


def test_the_accessibility_tree_names_every_control_and_status(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    # The link's state in words: its coloured dot is not read ("● live").
    expect(page.locator("header.top")).to_match_aria_snapshot("- status: live")
    run_id = exec_run(served, {"argv": ["true"], "hooks": [GATE]}, wait=False)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.ask")).to_match_aria_snapshot(
        """
        - listitem:
          - 'link /^frame \\d+: question from gate: Deploy now\\?$/'
          - text: ask
          - paragraph:
            - strong: gate
            - text: "asks: Deploy now?"
          - paragraph: Unanswered within 1 min, the answer is "no" (the run is refused).
          - 'group "Answer: Deploy now?"':
            - button "Yes"
            - button "No"
            - status
            - text: /"no" in about \\d+ s/
        """,
        timeout=WAIT_MS,
    )
    expect(page.locator("#run")).to_match_aria_snapshot(
        f"""
        - article "Run {run_id}":
          - heading "Run {run_id}" [level=2]
          - link "Go to the open question"
          - link "Download output (.txt)"
          - link "Download frames (.ndjson)"
          - checkbox "Show times"
          - heading "Timeline" [level=3]
          - list "Frames"
          - list "Hooks running now"
          - heading /Output/ [level=3]
          - region "Script output"
        """
    )
    page.get_by_role("button", name="No").click()
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
