"""The console in a real browser (Chromium under Playwright, as `test_console_browser.py`)
while the server stops: a `serve` in its SIGTERM grace, which still streams the runs it lets
finish and takes their answers, and a `serve` killed (SIGKILL) while a run's question waited,
then started again on its history. Each test has a server of its own; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sqlite3
import time
from pathlib import Path

from console_browser import GATE, PY, WAIT_MS, Browser, browser, exec_run, expect
from service_client import start_server

#: The fixture comes from `console_browser`; named here so that pytest finds it.
__all__ = ["browser"]

#: The run: a question first (`GATE`, a minute to answer), then a line.
ASKING = {"argv": [PY, "-c", "print('after the question')"], "hooks": [GATE]}


def stored_frames(db: Path, run_id: str) -> int:
    """How many of the run's frames the history holds (0 before its first write)."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        row = con.execute("SELECT frames FROM runs WHERE id = ?", (run_id,)).fetchone()
    return 0 if row is None else int(row[0])


def test_a_server_in_its_shutdown_grace_is_said_to_be_shutting_down_not_unreachable(
    browser: Browser, tmp_path: Path
) -> None:
    # Its events socket closed with 1001 at the SIGTERM: the header said "server unreachable
    # — reconnecting…" at once, while the run's question could still be answered and its
    # output still came.
    tmp_path.chmod(0o755)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    server = start_server(tmp_path, "--grace", "60", env=env)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
        run_id = exec_run({"server": server}, ASKING, wait=False)
        page.goto(f"http://127.0.0.1:{server.port}/#/runs/{run_id}")
        expect(page.get_by_role("button", name="Yes")).to_be_visible(timeout=WAIT_MS)
        server.proc.send_signal(signal.SIGTERM)
        link = page.locator("#link")
        expect(link).to_contain_text("server shutting down", timeout=WAIT_MS)
        expect(link).not_to_contain_text("unreachable")
        notice = page.locator(".run .notice")
        expect(notice).to_contain_text("The server is shutting down")
        expect(notice).to_contain_text("this run may still finish")
        page.get_by_role("button", name="Yes").click()
        expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator(".output .line")).to_have_text([re.compile("after the question")])
        expect(page.locator(".run-head .badge")).to_have_text("result")
        expect(page.locator(".frame.ask .ask-state")).to_have_text("answered yes (by client)")
        expect(notice).to_be_hidden()  # (the run is over: the shutdown means nothing more to it)
        assert server.stop(None) == 0  # (signalled already: it ends by itself)
        expect(link).to_contain_text("server shutting down")
    finally:
        context.close()
        if server.proc.poll() is None:
            server.stop()


def test_a_question_a_killed_server_left_says_the_server_stopped_and_how_the_run_ended(
    browser: Browser, tmp_path: Path
) -> None:
    # SIGKILL while the question waited, then a restart on the same history: the question's
    # line said only "the run has ended".
    tmp_path.chmod(0o755)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    db = tmp_path / "state" / "mcpx-hooks" / "history.db"
    server = start_server(tmp_path, env=env)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
        run_id = exec_run({"server": server}, ASKING, wait=False)
        page.goto(f"http://127.0.0.1:{server.port}/#/runs/{run_id}")
        expect(page.get_by_role("button", name="Yes")).to_be_visible(timeout=WAIT_MS)
        shown = page.locator(".timeline > li[data-seq]").count()
        deadline = time.monotonic() + WAIT_MS / 1000
        while stored_frames(db, run_id) < shown:  # the question stored, within 50 ms
            assert time.monotonic() < deadline, "the history never stored the question"
            time.sleep(0.02)
        port = server.port
        server.stop(signal.SIGKILL)
        server = start_server(tmp_path, "--port", str(port), env=env)
        expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
        state = page.locator(".frame.ask .ask-state")
        expect(state).to_contain_text(
            "not answered: the server stopped before the question was answered"
        )
        expect(state).to_contain_text("the run ended in error: the run's history ends here")
        expect(page.get_by_role("button", name="Yes")).to_be_disabled()
        expect(page.locator(".run-head .badge")).to_have_text("error")
    finally:
        context.close()
        if server.proc.poll() is None:
            server.stop()
