"""The console as a screen reader reads it aloud, and with a keyboard, where a long run makes
it long to hear or to go through, in the distribution's Chromium under Playwright (as
`test_console_keyboard.py`) against a real `mcpx-hooks serve`: a run in the list named in a
few words, what each frame's link is, the way straight to an open question (and the focus
moved to it when the person has chosen no other place), an applied change's lines said as
added and removed, and a question whose countdown ran out by the page's clock.
"""

from __future__ import annotations

import re
from typing import Any

from console_browser import (
    WAIT_MS,
    Page,
    browser,
    exec_run,
    expect,
    origin,
    page,
    served,
    sign_in,
)

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
