"""The console in a real browser: the distribution's Chromium, headless, driven by Playwright's
synchronous API (plain tests, no Trio loop) against a real `mcpx-hooks serve` subprocess.

One browser and one server for the module, in the order a person meets them: the page
without a token, the way in, runs appearing live, a question answered from the page, an
`apply` shown as original → new, the hooks in force with an untrusted project file, the event
stream with its gap, a phone-sized screen, a 50,000-line run (its figures recorded), and last
a server restart the page recovers from by itself. Nothing sleeps: Playwright's `expect`
waits for what the page shows.

Screenshots go to `build/console/` (ignored by git); with `MCPX_CONSOLE_SHOTS=DIR` they go to
DIR instead (`make console-shots` writes the committed ones, `docs/console/`). The 50,000-line
run's figures are printed and written to `build/console/metrics.json`; no bound is asserted
on them (`bench/console.py` prints them against a baseline).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from console_browser import (
    BIG_LINES,
    GATE,
    MEASURE,
    METRICS,
    PY,
    SHOTS,
    WAIT_MS,
    Browser,
    CuttableProxy,
    Page,
    browser,
    exec_run,
    expect,
    origin,
    page,
    replay,
    require_browser,
    served,
    shot,
)
from service_client import Server, start_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

# ---- the tests, in the order a person meets the console -----------------------------------


def test_without_the_token_the_page_says_how_to_get_in(page: Page, served: dict[str, Any]) -> None:
    page.goto(origin(served) + "/")
    expect(page.get_by_role("heading", name="How to get in")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#login")).to_contain_text("/?token=TOKEN")
    shot(page, "login")
    page.goto(origin(served) + "/?token=not-the-token")
    expect(page.locator("#login-why")).to_contain_text("not this server's", timeout=WAIT_MS)


def test_the_token_once_sets_a_strict_http_only_cookie(page: Page, served: dict[str, Any]) -> None:
    token = served["server"].token
    response = page.goto(f"{origin(served)}/?token={token}")
    assert page.url == origin(served) + "/"  # the token left the address bar (303)
    assert response is not None and response.status == 200
    assert "default-src 'self'" in response.headers["content-security-policy"]
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert cookie["value"] == token
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
    assert page.evaluate("document.cookie") == ""  # no script of the page can read it


#: A page of another origin on the same host (the same site): it tries the console's
#: WebSocket and `/v1/runs` with the browser's cookie, and says how each went in its title.
EVIL_PAGE = """<!doctype html><title>waiting</title><script>
const results = [];
const say = (r) => {
  results.push(r);
  if (results.length === 2) document.title = results.join(" ");
};
const ws = new WebSocket("ws://127.0.0.1:PORT/v1/events");
ws.onopen = () => say("ws-open");
ws.onclose = (e) => { if (!results.includes("ws-open")) say("ws-refused"); };
fetch("http://127.0.0.1:PORT/v1/runs", {credentials: "include"})
  .then((r) => say(`fetch-${r.status}`), () => say("fetch-blocked"));
</script>"""


def test_a_page_of_another_origin_gets_nothing_with_the_cookie(
    page: Page, served: dict[str, Any]
) -> None:
    port = served["server"].port
    body = EVIL_PAGE.replace("PORT", str(port)).encode()

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        other = page.context.new_page()  # the same browser: it holds the console's cookie
        other.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        expect(other).to_have_title(re.compile(r"^\S+ \S+$"), timeout=WAIT_MS)
        # The socket is refused before its upgrade (403: not the server's origin), and the
        # fetch gets nothing it may read.
        assert set(other.title().split()) == {"ws-refused", "fetch-blocked"}
        other.close()
    finally:
        evil.shutdown()
        evil.server_close()
        thread.join(10)


ASK_RUN = {
    "python": (
        "def main():\n"
        "    for i in range(3):\n"
        "        print('working', i)\n"
        "    print('x' * 50_000)\n"
        "    return {'greeting': 'hello', 'n': 1}\n"
    ),
    "hooks": [
        GATE,
        {
            "name": "upper",
            "on": "script",
            "phase": "onSuccess",
            "effect": "apply",
            "run": [
                "sh",
                "-c",
                'echo \'{"apply": {"value": {"greeting": "HELLO", "n": 2}}}\'',
            ],
        },
        {
            "name": "lint",
            "on": "script",
            "phase": "onSuccess",
            "run": ["sh", "-c", "echo oops >&2; exit 3"],
        },
    ],
}


def test_a_run_appears_live_its_question_is_answered_from_the_page_and_its_frames_keep_order(
    page: Page, served: dict[str, Any]
) -> None:
    run_id = exec_run(served, ASK_RUN, wait=False)
    item = page.locator(f'li[data-run="{run_id}"] a')
    expect(item).to_be_visible(timeout=WAIT_MS)  # listed live, from the event stream
    expect(item).to_contain_text("running")
    # Keyboard only: to the run's link, Enter; the focus goes to the question the run waits
    # on (its heading first); then Tab to the question's Yes button.
    item.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".frame.ask .question-line")).to_be_focused(timeout=WAIT_MS)
    yes = page.get_by_role("button", name="Yes")
    expect(yes).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".frame.ask")).to_contain_text("Deploy now?")
    expect(page.locator(".frame.ask .ask-left")).to_have_text(re.compile(r'^"no" in about \d+ s$'))
    # The hook is not said to be running while it waits for a person.
    waiting = page.locator(".running-hooks .frame.running", has_text="gate")
    expect(waiting.locator(".badge")).to_have_text("waiting for an answer")
    expect(waiting.locator(".running-for")).to_have_text(re.compile(r"^asked \d+ s ago$"))
    shot(page, "run-ask")
    for _ in range(40):
        if yes.evaluate("b => b === document.activeElement"):
            break
        page.keyboard.press("Tab")
    expect(yes).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".frame.hook .asked")).to_contain_text("yes (by client)")
    frames = replay(served, run_id)
    structural = [f for f in frames if f["type"] not in ("stdout", "stderr", "log", "emit")]
    shown = page.locator(".timeline > li[data-seq]").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.seq), r.dataset.type])"
    )
    assert shown == [[f["seq"], f["type"]] for f in structural]
    assert [f["type"] for f in structural if f["type"] != "warning"][:3] == ["start", "ask", "hook"]
    expect(page.locator("#output-count")).to_have_text("(4 lines)")
    # A line of 50,000 characters is drawn cut, saying so.
    expect(page.locator(".output .line").last).to_contain_text("… (48,000 more characters)")
    # What `apply` changed: original → new; the failed hook; the clamp and the dropped key.
    diff = page.locator(".diff")
    expect(diff.locator("figcaption")).to_have_text("original → new")
    expect(diff.locator("pre.after")).to_contain_text('"HELLO"')
    expect(diff.locator("pre.before")).to_contain_text('"hello"')
    expect(diff.locator(".diff-lines .add")).to_contain_text(['"greeting": "HELLO",', '"n": 2'])
    lint = page.locator(".frame.hook", has_text="lint")
    expect(lint.locator(".badge.failed")).to_be_visible()
    expect(lint).to_contain_text("exited with status 3")
    tidy = page.locator(".frame.hook", has_text="tidy")
    expect(tidy.locator(".clamp")).to_contain_text("asked apply, clamped by phase")
    expect(tidy.locator(".dropped")).to_contain_text("apply")
    expect(page.locator(".frame.result")).to_contain_text('"HELLO"')
    expect(item).to_contain_text("failed: lint")
    page.locator(".frame.hook", has_text="upper").scroll_into_view_if_needed()
    shot(page, "run-apply")
    # No script error, no policy violation (the 401s are the page asking before it was let in).
    assert [e for e in served["page_state"]["errors"] if "status of 401" not in e] == []


def test_a_refused_run_is_flagged_in_the_list(page: Page, served: dict[str, Any]) -> None:
    request = {
        "argv": ["true"],
        "hooks": [
            {
                "name": "guard",
                "on": "script",
                "phase": "before",
                "effect": "ask",
                "run": ["sh", "-c", 'echo \'{"refuse": "not on Fridays"}\''],
            }
        ],
    }
    run_id = exec_run(served, request, wait=True)
    item = page.locator(f'li[data-run="{run_id}"] a')
    expect(item).to_contain_text("refused by guard", timeout=WAIT_MS)
    expect(item.locator(".badge")).to_have_text("error")
    item.click()
    expect(page.locator(".facts")).to_contain_text("refused by guard")
    page.goto(f"{origin(served)}/#/runs")
    shot(page, "runs")


def test_a_failed_hook_shows_what_it_said_under_its_failure(
    page: Page, served: dict[str, Any]
) -> None:
    # The tutorial's gate (docs/hooks.md): it says why on stdout, and a word on stderr.
    said = 'echo "jq is missing: apt-get install jq"; echo "see docs" >&2; exit 1'
    hook = {"name": "gate", "on": "script", "phase": "before", "run": ["sh", "-c", said]}
    run_id = exec_run(served, {"argv": ["true"], "hooks": [hook]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    frame = page.locator(".frame.hook", has_text="gate")
    expect(frame.locator(".badge.failed")).to_be_visible(timeout=WAIT_MS)
    # Open, not folded away: the reason and what it said are read together.
    stdout = frame.locator("details.said", has_text="stdout (its tail)")
    expect(stdout.locator("pre")).to_have_text("jq is missing: apt-get install jq\n")
    expect(stdout.locator("pre")).to_be_visible()
    stderr = frame.locator("details.said", has_text="stderr (its tail)")
    expect(stderr.locator("pre")).to_have_text("see docs\n")
    expect(stderr.locator("pre")).to_be_visible()


#: What a script or a hook may print, shown as text and never run as part of the page.
HOSTILE = [
    "<img src=x onerror=\"document.title='owned'\">",
    "<script>document.title='owned'</script>",
    "\u202etxt.exe\u202c \x1b[31mred\x1b[0m \x00 \ufffd",
    "javascript:alert(1)",
]


def test_hostile_output_is_shown_as_text(page: Page, served: dict[str, Any]) -> None:
    code = f"import json\nfor line in {HOSTILE!r}:\n    print(line)\n"
    hook = {
        "name": "<b>bold</b>",
        "on": "script",
        "phase": "onSuccess",
        "run": ["sh", "-c", "printf '<img src=y onerror=alert(2)>'"],
    }
    run_id = exec_run(served, {"argv": [PY, "-c", code], "hooks": [hook]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#output-count")).to_have_text(f"({len(HOSTILE)} lines)")
    expect(page.locator(".output .line").first).to_contain_text("<img src=x onerror=")
    advice = page.locator(".frame.hook .advice").first
    expect(advice).to_contain_text("<img src=y onerror=alert(2)>")
    expect(page.locator(".frame.hook .name").first).to_have_text("<b>bold</b>")
    # Only the page's own image, no script run: the title is the page's.
    assert page.evaluate("document.querySelectorAll('img, b, script:not([src])').length") == 1
    assert page.title() == "mcpx-hooks console"


def test_the_hooks_in_force_with_provenance_and_the_untrusted_file(
    page: Page, served: dict[str, Any]
) -> None:
    page.get_by_role("link", name="Hooks").click()
    table = page.locator("table.hooks")
    expect(table).to_contain_text("tidy", timeout=WAIT_MS)
    expect(table).to_contain_text(str(served["cwd"] / "serve.toml"))
    table.locator("summary", has_text="tidy").click()  # what it runs, as the server resolved it
    expect(table.locator(".hook-detail")).to_contain_text('"timeoutMs": 10000')
    skipped = page.locator(".skipped")
    expect(skipped).to_contain_text(str(served["cwd"] / ".mcpx-hooks.toml"))
    expect(skipped).to_contain_text("mcpx-hooks trust")
    shot(page, "hooks")


def test_the_hooks_view_says_when_no_project_file_was_found(
    browser: Browser, tmp_path: Path
) -> None:
    # It said "None: every project file found is trusted." when none was found at all.
    tmp_path.chmod(0o755)
    server = start_server(tmp_path)  # (discovery off: no project file is found)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
        page.get_by_role("link", name="Hooks").click()
        hint = page.locator("p.hint", has_text="project file")
        expect(hint).to_have_text(
            "None: no project file (.mcpx-hooks.toml or .mcpx-hooks.json) was found.",
            timeout=WAIT_MS,
        )
    finally:
        context.close()
        server.stop()


def test_the_event_stream_shows_its_gap(browser: Browser, served: dict[str, Any]) -> None:
    server: Server = served["server"]
    # Each admitted socket publishes two events: past the bus's 1024, the oldest are gone.
    for _ in range(520):
        ws = connect(server.url + "/v1/hooks", additional_headers=server.headers(), proxy=None)
        with ws, contextlib.suppress(ConnectionClosed):
            while True:
                ws.recv(timeout=10)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        fresh = context.new_page()
        fresh.goto(f"{origin(served)}/?token={server.token}")
        fresh.get_by_role("link", name="Events").click()
        expect(fresh.locator(".event.gap").first).to_contain_text(
            "gap events 0\u2013", timeout=WAIT_MS
        )
        expect(fresh.locator(".event.client").first).to_be_visible()
        run_id = exec_run(served, {"argv": ["true"]}, wait=True)
        expect(fresh.locator(".event.run", has_text=run_id).first).to_be_visible(timeout=WAIT_MS)
        shot(fresh, "events")
    finally:
        context.close()


def test_a_phone_sized_screen_shows_one_column(browser: Browser, served: dict[str, Any]) -> None:
    server: Server = served["server"]
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        phone = context.new_page()
        phone.goto(f"{origin(served)}/?token={server.token}")
        first = phone.locator("#runs li a").first
        expect(first).to_be_visible(timeout=WAIT_MS)
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        shot(phone, "phone-runs")
        phone.locator("#runs li a", has_text="working").first.click()
        expect(phone.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
        expect(phone.locator("#runs")).to_be_hidden()
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        # Each row's text takes the screen's width, the output row's too (it stood in the
        # seq's narrow column, a word a line).
        label = phone.locator(".frame.output-group > :last-child")
        expect(label).to_contain_text("in the output below")
        assert label.bounding_box()["width"] > 250  # type: ignore[index]
        shot(phone, "phone-run")
        phone.get_by_role("link", name="← All runs").click()
        expect(phone.locator("#runs")).to_be_visible()
    finally:
        context.close()


def test_a_50000_line_run_stays_smooth(page: Page, served: dict[str, Any]) -> None:
    code = f"import sys\nfor i in range({BIG_LINES}):\n    print('line', i, 'of the big run')\n"
    run_id = exec_run(served, {"argv": [PY, "-c", code]}, wait=True)
    page.goto(f"{origin(served)}/#/runs")
    expect(page.locator(f'li[data-run="{run_id}"]')).to_be_visible(timeout=WAIT_MS)
    figures = page.evaluate(MEASURE, [run_id, BIG_LINES])
    # Virtualised: a few dozen rows in the page, not 50,000.
    assert 0 < figures["rowsInPage"] < 200, figures
    expect(page.locator(".output .line").last).to_contain_text("of the big run")
    figures["lines"] = BIG_LINES
    METRICS.parent.mkdir(parents=True, exist_ok=True)
    METRICS.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nconsole, {BIG_LINES:,}-line run: {json.dumps(figures)}")
    page.locator("#output-title").scroll_into_view_if_needed()
    page.evaluate("document.getElementById('output-title').scrollIntoView()")
    shot(page, "big-run")


#: Prints a line, waits for the test (a FIFO: the test's end opened, then closed), prints
#: another: a run that is still going while the page loses its connection.
WAITING = """import sys
with open(sys.argv[1]) as fifo:
    print('before', flush=True)
    fifo.read()
print('after', flush=True)
"""


def test_a_lost_connection_resumes_a_live_run_where_it_was(
    browser: Browser, tmp_path: Path
) -> None:
    proxy = CuttableProxy()
    server = start_server(tmp_path, "--allow-origin", f"http://127.0.0.1:{proxy.port}")
    proxy.upstream = server.port
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    writer: list[BinaryIO] = []
    opening = threading.Thread(target=lambda: writer.append(fifo.open("wb")), daemon=True)
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{proxy.port}/?token={server.token}")
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
        served = {"server": server}
        run_id = exec_run(served, {"argv": [PY, "-c", WAITING, str(fifo)]}, wait=False)
        opening.start()
        opening.join(30)
        assert writer, "the script did not open its FIFO"
        page.locator(f'li[data-run="{run_id}"] a').click()
        expect(page.locator(".output .line")).to_have_text([re.compile("before")])
        proxy.cut()  # the page's sockets end; the server and the run go on
        expect(page.locator("#link")).to_contain_text("reconnecting", timeout=WAIT_MS)
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
        writer.pop().close()  # the script goes on: its next line comes on the new socket
        expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator(".output .line")).to_have_text(
            [re.compile("before"), re.compile("after")]
        )
        shown = page.locator(".timeline > li[data-seq]").evaluate_all(
            "rows => rows.map(r => Number(r.dataset.seq))"
        )
        frames = replay(served, run_id)
        assert shown == [f["seq"] for f in frames if f["type"] != "stdout"]
        assert page.locator("#banner").is_hidden()  # the same server: no restart said
    finally:
        for end in writer:
            end.close()
        context.close()
        server.stop()
        proxy.close()


#: Prints a line, waits for the test (a FIFO), then prints 20 more and waits for ever.
PRINTS_ON = """import sys, time
print('kept', flush=True)
with open(sys.argv[1]) as fifo:
    fifo.read()
for i in range(20):
    print(f'not kept {i}', flush=True)
time.sleep(3600)
"""


def stored_frames(db: Path, run_id: str) -> int:
    """How many of the run's frames the history holds (0 before its first write)."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        row = con.execute("SELECT frames FROM runs WHERE id = ?", (run_id,)).fetchone()
    return 0 if row is None else int(row[0])


def test_a_run_the_killed_server_kept_less_of_is_shown_again_as_kept(
    browser: Browser, tmp_path: Path
) -> None:
    # A server killed (SIGKILL) had sent the page frames it had not yet stored: the next one
    # ends the run where its history ends, with an error and an end numbered as those frames
    # were. The page asked to resume past them and showed "from=N is past the run's frames",
    # the run "running" for ever, lines the history does not have.
    tmp_path.chmod(0o755)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    db = tmp_path / "state" / "mcpx-hooks" / "history.db"
    server = start_server(tmp_path, env=env)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    holder = None
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
        served = {"server": server}
        run_id = exec_run(served, {"argv": [PY, "-c", PRINTS_ON, str(fifo)]}, wait=False)
        page.goto(f"http://127.0.0.1:{server.port}/#/runs/{run_id}")
        expect(page.locator("#output-count")).to_have_text("(1 line)", timeout=WAIT_MS)
        deadline = time.monotonic() + WAIT_MS / 1000
        while stored_frames(db, run_id) < 2:  # start and the line: stored, within 50 ms
            assert time.monotonic() < deadline, "the history never stored the run's line"
            time.sleep(0.02)
        # The history is held (another process's lock): what comes now is sent, not stored.
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        with fifo.open("w"):
            pass
        expect(page.locator("#output-count")).to_have_text("(21 lines)", timeout=WAIT_MS)
        port = server.port
        server.stop(signal.SIGKILL)
        holder.close()
        holder = None
        server = start_server(tmp_path, "--port", str(port), env=env)
        served["server"] = server
        notice = page.locator(".run .notice")
        expect(notice).to_contain_text(
            "The server stopped before it kept all of this run", timeout=WAIT_MS
        )
        expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator(".frame.error")).to_contain_text("the run's history ends here")
        expect(page.locator("#output-count")).to_have_text("(1 line)")
        expect(page.locator(".output .line")).to_have_text([re.compile("kept")])
        expect(page.locator(".run-head .badge")).to_have_text("error")
        frames = replay(served, run_id)
        shown = page.locator(".timeline > li[data-seq]").evaluate_all(
            "rows => rows.map(r => [Number(r.dataset.seq), r.dataset.type])"
        )
        assert shown == [[f["seq"], f["type"]] for f in frames if f["type"] != "stdout"]
        expect(notice).to_contain_text("this page had shown 22 frames")
    finally:
        if holder is not None:
            holder.close()
        context.close()
        if server.proc.poll() is None:
            server.stop()


def test_after_a_server_restart_the_page_recovers_by_itself(
    page: Page, served: dict[str, Any]
) -> None:
    old: Server = served["server"]
    page.goto(f"{origin(served)}/#/runs")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
    before = page.locator("#runs li").count()
    assert before > 1
    port = old.port
    assert old.stop() == 0
    expect(page.locator("#link")).to_contain_text("reconnecting", timeout=WAIT_MS)
    # The same port and token file: the cookie still admits the page.
    new = start_server(
        served["cwd"], "--config", "serve.toml", "--port", str(port), env=served["env"]
    )
    served["server"] = new
    assert new.token == old.token
    # The server keeps a run history (its state directory): the runs are listed again.
    expect(page.locator("#banner")).to_contain_text(
        "The server restarted: the runs it kept are listed again", timeout=WAIT_MS
    )
    expect(page.locator("#link")).to_have_text("live")
    run_id = exec_run(served, {"argv": ["echo", "after the restart"]}, wait=True)
    expect(page.locator(f'li[data-run="{run_id}"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#runs li")).to_have_count(before + 1)
    shot(page, "restarted")


def test_after_a_restart_with_a_new_token_the_page_asks_for_it(
    browser: Browser, tmp_path: Path
) -> None:
    # The socket is refused at its handshake (401) as long as the cookie is the old token:
    # "reconnecting" for ever before, never the login.
    tmp_path.chmod(0o755)
    server = start_server(tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
        expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
        port, old = server.port, server.token
        assert server.stop() == 0
        expect(page.locator("#link")).to_contain_text("reconnecting", timeout=WAIT_MS)
        server = start_server(tmp_path, "--port", str(port), "--new-token")
        assert server.token != old
        expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#login-why")).to_contain_text("it has a new token")
        expect(page.locator("#link")).to_have_text("not signed in")
    finally:
        context.close()
        server.stop()


def test_after_a_restart_without_a_history_the_page_says_the_runs_are_gone(
    browser: Browser, tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    (tmp_path / "serve.toml").write_text("[history]\nenabled = false\n")
    server = start_server(tmp_path, "--config", "serve.toml")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
        served = {"server": server}
        exec_run(served, {"argv": ["echo", "before the restart"]}, wait=True)
        expect(page.locator("#runs li")).to_have_count(1, timeout=WAIT_MS)
        port = server.port
        assert server.stop() == 0
        expect(page.locator("#link")).to_contain_text("reconnecting", timeout=WAIT_MS)
        server = start_server(tmp_path, "--config", "serve.toml", "--port", str(port))
        expect(page.locator("#banner")).to_contain_text(
            "the runs it held before are gone", timeout=WAIT_MS
        )
        served["server"] = server
        run_id = exec_run(served, {"argv": ["echo", "after the restart"]}, wait=True)
        expect(page.locator(f'li[data-run="{run_id}"]')).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#runs li")).to_have_count(1)
    finally:
        context.close()
        server.stop()


def test_screenshots_were_written() -> None:
    require_browser()
    names = {p.stem for p in SHOTS.glob("*.png")}
    assert {"login", "run-ask", "run-apply", "runs", "hooks", "events", "phone-run"} <= names
