"""The console reads like a terminal, in a real browser (the distribution's Chromium under
Playwright, as `test_console_browser.py`) against a real `mcpx-hooks serve`: colours in output
drawn and never shown as escape codes (the parser's own cases run in the page too), a colour
set in one frame still in force in the next, a running hook's time counted live, a run's
downloads whole (a 100,000-line run: every line in the file while the page draws a few dozen),
a link to a frame opening the run there, time stamps on demand, and the search box.

The search box is tested against a test double of `GET /v1/search` (Playwright answers the
page's request, with matches taken from a real run's frames) while this server has no such
endpoint; the test uses the server's own the moment it answers. Screenshots as the other
browser tests take them (`make console-shots` writes `docs/console/`).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from console_browser import (
    PY,
    SHOTS,
    WAIT_MS,
    Page,
    browser,
    exec_run,
    expect,
    origin,
    page,
    require_browser,
    served,
    shot,
)
from service_client import Server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

LINES = 100_000


def sign_in(page: Page, served: dict[str, Any]) -> None:
    page.goto(f"{origin(served)}/?token={served['server'].token}")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)


def raw_lines(served: dict[str, Any], run_id: str) -> list[str]:
    """The run's frames as the server sends them on `/v1/runs/{runId}?from=0`: its lines."""
    server: Server = served["server"]
    url = f"{server.url}/v1/runs/{run_id}?from=0"
    lines: list[str] = []
    ws = connect(url, additional_headers=server.headers(), max_size=None, proxy=None)
    with ws, contextlib.suppress(ConnectionClosed):
        while True:
            lines.extend(str(ws.recv(timeout=60)).split("\n"))
    return lines


#: The parser's cases, run in the page: each is [text, the state before (null: none)], and
#: what comes back is its pieces and the state after.
PARSE = """async (cases) => {
  const ansi = await import('/console/ansi.js');
  const out = [];
  let state = ansi.PLAIN;
  for (const [text, carry] of cases) {
    const read = ansi.parse(text, carry ? state : ansi.PLAIN);
    state = read.state;
    out.push({pieces: read.pieces.map((p) => [p.text, p.style.fg, p.style.bg, p.style.bold,
      p.style.dim, p.style.italic, p.style.underline]), state: [state.fg, state.bg, state.bold]});
  }
  return out;
}"""


def test_the_parser_reads_sgr_and_drops_every_other_escape(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    e = "\x1b"
    cases = [
        [f"{e}[1;31mred{e}[0m plain", False],
        [f"{e}[38;5;208morange{e}[48;2;0;0;255m on blue", False],
        ["the next line keeps both", True],
        [f"{e}[39;49mdefault {e}[2;3;4mdim italic underlined{e}[22;23;24m none", True],
        [f"a{e}]0;a title{e}\\b{e}[2Kc{e}[?25hd{e}[>4;2me{e}(Bf{e}Mg{e}[31", False],
        [f"{e}[38:2::10:20:30mcolons{e}[m {e}[92mbright{e}[38;5;3mindexed", False],
        [f"{e}[38;5;999mbad index{e}[38;2;1mshort", False],
    ]
    got = page.evaluate(PARSE, cases)
    plain = [None, None, False, False, False, False]
    assert got[0]["pieces"] == [["red", 1, None, True, False, False, False], [" plain", *plain]]
    assert got[1]["pieces"] == [
        ["orange", "#ff8700", None, False, False, False, False],
        [" on blue", "#ff8700", "#0000ff", False, False, False, False],
    ]
    assert got[2]["pieces"] == [["the next line keeps both", "#ff8700", "#0000ff", *plain[2:]]]
    assert got[3]["pieces"] == [
        ["default ", *plain],
        ["dim italic underlined", None, None, False, True, True, True],
        [" none", *plain],
    ]
    # OSC (a title), erase, cursor, private sequences, charsets, a cut one: all gone.
    assert got[4]["pieces"] == [["abcdefg", *plain]]
    assert got[5]["pieces"] == [
        ["colons", "#0a141e", None, False, False, False, False],
        [" ", *plain],
        ["bright", 10, None, False, False, False, False],
        ["indexed", 3, None, False, False, False, False],
    ]
    # An index out of range, a truecolor with too few values: no colour, no text lost.
    assert got[6]["pieces"] == [["bad indexshort", *plain]]


#: The page's own bookkeeping, run in the page: hooks running by the bus's events (a finish
#: replayed before its start included), the time said, and the words the server found marked
#: as text (marks in code points, an emoji one; one out of order or out of the line ignored).
BOOKKEEPING = """async () => {
  const running = await import('/console/running.js');
  const search = await import('/console/search.js');
  const hooks = new running.RunningHooks();
  const heard = [];
  hooks.listen((id) => heard.push(id));
  const ev = (kind, name, at, runId = 'r1', on = 'script') =>
    hooks.take({kind, runId, at, data: {name, on, phase: 'before'}});
  ev('hook.started', 'a', '2026-01-01T00:00:00Z');
  ev('hook.started', 'b', '2026-01-01T00:00:05Z');
  ev('hook.finished', 'c', '2026-01-01T00:00:06Z', 'r1', 'call');
  ev('hook.started', 'c', '2026-01-01T00:00:01Z', 'r1', 'call');
  ev('hook.started', 'x', '2026-01-01T00:00:00Z', 'r2');
  const first = hooks.of('r1').map((h) => h.name);
  ev('hook.finished', 'a', '2026-01-01T00:00:09Z');
  const second = hooks.of('r1').map((h) => h.name);
  hooks.take({kind: 'run.finished', runId: 'r2', at: '', data: {}});
  const third = hooks.of('r2');
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  const said = [running.runningFor('2026-01-01T00:00:00Z', t0 + 12400),
    running.runningFor('2026-01-01T00:00:00Z', t0 + 185000),
    running.runningFor('2026-01-01T00:00:00Z', t0 - 3000), running.runningFor('nonsense'),
    running.askedAgo('2026-01-01T00:00:00Z', t0 + 7000), running.askedAgo('nonsense')];
  const marked = search.marked('a <b>Needle</b> 🚀 and needle-42',
    [[5, 11], [16, 17], [3, 4], [22, 28], [29, 99], 'x']);
  const line = {from: 10, to: 14, piece: 2, pieces: 5};
  const pieces = [search.pieceSaid({type: 'stdout', line}), search.pieceSaid({type: 'stdout'}),
    search.pieceSaid({type: 'stdout', line: {...line, to: '14'}})];
  return {first, second, third, heard: heard.length, said, pieces,
    marked: marked.map((n) => typeof n === 'string' ? n : `[${n.textContent}]`),
    link: search.searchLink('a b', 'r1')};
}"""


def test_the_page_s_bookkeeping_of_running_hooks_and_search_words(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    got = page.evaluate(BOOKKEEPING)
    # The call hook's finish came first: its start does not open it.
    assert got["first"] == ["a", "b"]
    assert got["second"] == ["b"]
    assert got["third"] == []  # a finished run has none running
    assert got["heard"] == 7
    assert got["said"] == [
        "running for 12 s",
        "running for 3 min 5 s",
        "running for 0 s",
        "running",
        "asked 7 s ago",
        "asked",
    ]
    assert got["marked"] == ["a <b>", "[Needle]", "</b> ", "[🚀]", " and ", "[needle]", "-42"]
    assert got["link"] == "#/search?q=a+b&run=r1"
    # A match in a piece of a line over 64 KiB says which frames hold the line, as `runs search`
    # does (the page said nothing of it); a match in a whole line, or a malformed `line`, nothing.
    assert got["pieces"] == [
        "piece 2 of 5 of a line too long for one frame: the stdout frames 10 to 14 joined",
        None,
        None,
    ]


#: Colours as a build tool prints them; the first colour is set in one line (one frame) and
#: reset in the next, each stream keeping its own.
COLOURED = r"""import sys
E = '\x1b'
print(f'{E}[32m✓ compiled{E}[0m 12 files')
print(f'{E}[1;31merror:{E}[0m {E}[4mmain.py{E}[24m line 3 {E}[3mitalic{E}[23m {E}[2mdim{E}[22m')
print(f'{E}[33mwarning: this colour starts here', flush=True)
print(f'and is still in force on the next line{E}[0m, then reset', flush=True)
print(f'{E}[38;5;208m256-colour orange{E}[0m {E}[38;2;255;0;255mtruecolor magenta{E}[0m '
      f'{E}[48;5;21m{E}[97m white on blue {E}[0m {E}]8;;https://example.com{E}\\a link{E}]8;;{E}\\')
print(f'{E}[35mmagenta on stderr', file=sys.stderr, flush=True)
print('stderr keeps its own colour', file=sys.stderr, flush=True)
print('stdout is plain again')
# A line longer than the server's 64 KiB pieces, cut inside a colour's sequence.
print('x' * (64 * 1024 - 2) + f'{E}[31mred after the cut{E}[0m')
"""

STYLE = """(el) => { const s = getComputedStyle(el);
  return [s.color, s.backgroundColor, s.fontWeight, s.fontStyle, s.textDecorationLine,
          s.opacity]; }"""


def test_colours_are_drawn_and_no_escape_code_shows(page: Page, served: dict[str, Any]) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": [PY, "-c", COLOURED]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator("#output-count")).to_have_text("(10 lines)", timeout=WAIT_MS)
    out = page.locator(".output")
    expect(out.locator(".line")).to_have_count(10)  # drawn (at the next animation frame)
    text = out.inner_text()
    assert "\x1b" not in text and "[0m" not in text and "]8;;" not in text
    assert "a link" in text and "example.com" not in text
    # The palette's colours are the page's (light theme): --c2 #116329, --c1 #cf222e, …
    ok = out.locator("span", has_text="✓ compiled")
    assert ok.evaluate(STYLE)[0] == "rgb(17, 99, 41)"
    error = out.locator("span", has_text="error:")
    assert error.evaluate(STYLE)[:3] == ["rgb(207, 34, 46)", "rgba(0, 0, 0, 0)", "700"]
    assert out.locator("span", has_text="main.py").evaluate(STYLE)[4] == "underline"
    assert out.locator("span", has_text="italic").evaluate(STYLE)[3] == "italic"
    assert out.locator("span", has_text="dim").last.evaluate(STYLE)[5] == "0.65"
    # A colour across two frames: the second line is still yellow until its reset.
    first = out.locator("span", has_text="warning: this colour starts here")
    second = out.locator("span", has_text="and is still in force on the next line")
    after = out.locator(".line", has_text="then reset").locator("span", has_text=", then reset")
    yellow = "rgb(125, 78, 0)"
    assert first.evaluate(STYLE)[0] == yellow
    assert second.evaluate(STYLE)[0] == yellow
    assert after.evaluate(STYLE)[0] != yellow
    assert out.locator("span", has_text="256-colour orange").evaluate(STYLE)[0] == (
        "rgb(255, 135, 0)"
    )
    assert out.locator("span", has_text="truecolor magenta").evaluate(STYLE)[0] == (
        "rgb(255, 0, 255)"
    )
    blue = out.locator("span", has_text="white on blue").evaluate(STYLE)
    assert blue[1] == "rgb(0, 0, 255)" and blue[0] == "rgb(140, 149, 159)"
    # stderr's colour carries on stderr's next line, and never onto stdout's.
    magenta = "rgb(130, 80, 223)"
    keeps = out.locator("span", has_text="stderr keeps its own colour")
    assert keeps.evaluate(STYLE)[0] == magenta
    plain = out.locator(".line", has_text="stdout is plain again")
    assert plain.locator("span.sgr-fg5").count() == 0
    # The sequence cut between two frames is whole again: the colour, and no code shown. (Its
    # line is stdout's last; stderr's two may come after it: the two pipes' lines, written
    # in one instant, come in either order.)
    cut = out.locator(".line", has_text="red after the cut")
    expect(cut).to_have_count(1)
    assert "31m" not in cut.inner_text()
    assert cut.locator("span", has_text="red after the cut").evaluate(STYLE)[0] == (
        "rgb(207, 34, 46)"
    )
    page.evaluate("document.getElementById('output-title').scrollIntoView()")
    shot(page, "colours")


#: A linter that fails in colour, as one forced to colour (`FORCE_COLOR`, `--color=always`) does.
COLOURED_LINTER = {
    "name": "lint",
    "on": "script",
    "phase": "onSuccess",
    "run": [
        PY,
        "-c",
        "import sys; sys.stderr.write('\\x1b[1;31merror:\\x1b[0m E501 line too long\\n');"
        " sys.exit(1)",
    ],
}


def test_a_hook_s_coloured_stderr_is_drawn_in_colour_with_no_escape_code(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    request = {"argv": ["true"], "hooks": [COLOURED_LINTER]}
    run_id = exec_run(served, request, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    tail = page.locator(".timeline .frame.hook", has_text="lint").locator("details.said pre")
    expect(tail).to_contain_text("error: E501 line too long", timeout=WAIT_MS)
    assert "[1;31m" not in tail.inner_text() and "\x1b" not in tail.inner_text()
    error = tail.locator("span", has_text="error:")
    assert error.evaluate(STYLE)[:3] == ["rgb(207, 34, 46)", "rgba(0, 0, 0, 0)", "700"]


#: A formatter run as a hook, forced to colour: its plain stdout is its advice.
COLOURED_ADVISER = {
    "name": "fmt",
    "on": "script",
    "phase": "before",
    "run": [PY, "-c", "print('\\x1b[33mwarning:\\x1b[0m 2 files would be reformatted')"],
}


def test_a_hook_s_coloured_advice_is_drawn_in_colour_with_no_escape_code(
    page: Page, served: dict[str, Any]
) -> None:
    # Advice drew its escape codes as boxes ('\x1b[33mwarning:\x1b[0m …'), under the hook
    # and in the result, where the hook's stderr is drawn in colour.
    sign_in(page, served)
    run_id = exec_run(served, {"argv": ["true"], "hooks": [COLOURED_ADVISER]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    for where in (".frame.hook", ".frame.result"):
        piece = page.locator(where, has_text="reformatted").locator(".advice li")
        expect(piece).to_have_text("warning: 2 files would be reformatted")
        warning = piece.locator("span", has_text="warning:")
        assert warning.evaluate(STYLE)[0] != piece.evaluate(STYLE)[0], where


#: A `before` hook that works for a few seconds (its own time: nothing waits on the test).
SLOW_HOOK = {
    "name": "slow-check",
    "on": "script",
    "phase": "before",
    "timeoutMs": 30_000,
    "run": ["sh", "-c", "sleep 6; echo '{}'"],
}


def seconds(text: str) -> int:
    found = re.fullmatch(r"running for (\d+) s", text)
    assert found, text
    return int(found.group(1))


def test_a_running_hook_shows_its_time_live_then_its_frame(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    request = {"argv": ["echo", "after the check"], "hooks": [SLOW_HOOK]}
    run_id = exec_run(served, request, wait=False)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    running = page.locator(".running-hooks .frame.running", has_text="slow-check")
    expect(running).to_be_visible(timeout=WAIT_MS)
    expect(running).to_contain_text("script.before")
    timer = running.locator(".running-for")
    expect(timer).to_have_text(re.compile(r"^running for \d+ s$"))
    first = seconds(timer.inner_text())
    # Counted on by the page itself while the hook works.
    expect(timer).not_to_have_text(f"running for {first} s", timeout=WAIT_MS)
    assert seconds(timer.inner_text()) > first
    shot(page, "running-hook")
    # Done: its frame in the timeline, and the running row gone.
    hook = page.locator(".timeline .frame.hook", has_text="slow-check")
    expect(hook.locator(".badge.ok")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".frame.running")).to_have_count(0)
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)


#: 100,000 lines, each naming its number (one in a thousand coloured).
BIG = (
    f"for i in range({LINES}):\n"
    "    print(f'\\x1b[36mline {i}\\x1b[0m' if i % 1000 == 0 else f'line {i} of the long run')\n"
)


def test_downloads_hold_every_line_while_the_page_draws_a_few(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": [PY, "-c", BIG]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator("#output-count")).to_have_text(f"({LINES:,} lines)", timeout=60_000)
    expect(page.locator(".output .line").last).to_contain_text(f"line {LINES - 1} of")
    drawn = page.locator(".output .line").count()
    assert 0 < drawn < 200  # virtualised: the page holds a few dozen rows
    # What a person gets from the links: the files, whole.
    with page.expect_download() as got:
        page.get_by_role("link", name="Download output (.txt)").click()
    assert got.value.suggested_filename == f"run-{run_id}-output.txt"
    text = Path(got.value.path()).read_text(encoding="utf-8")
    want = [
        f"\x1b[36mline {i}\x1b[0m" if i % 1000 == 0 else f"line {i} of the long run"
        for i in range(LINES)
    ]
    assert text.split("\n") == [*want, ""]
    with page.expect_download() as got:
        page.get_by_role("link", name="Download frames (.ndjson)").click()
    stored = Path(got.value.path()).read_text(encoding="utf-8")
    assert stored.split("\n") == [*raw_lines(served, run_id), ""]
    assert len(stored.split("\n")) > LINES
    page.locator(".run-tools").scroll_into_view_if_needed()
    shot(page, "download")
    # The token is asked for, as on every /v1 path.
    server: Server = served["server"]
    status = page.evaluate(
        """async (url) => (await fetch(url, {credentials: 'omit'})).status""",
        f"{origin(served)}/v1/runs/{run_id}/output.txt",
    )
    assert status == 401
    assert server.proc.poll() is None
    # A link to a frame deep in the output opens the run scrolled there, that line marked.
    seq = next(
        f["seq"]
        for f in map(json.loads, stored.split("\n")[70_000:70_010])
        if f.get("text") == "line 70001 of the long run"
    )
    page.goto(f"{origin(served)}/#/runs")
    page.goto(f"{origin(served)}/#/runs/{run_id}@{seq}")
    marked = page.locator(".output .line.marked")
    expect(marked).to_contain_text("line 70001 of the long run", timeout=60_000)
    expect(marked).to_be_in_viewport()
    href = marked.locator("a.n").get_attribute("href")
    assert href == f"#/runs/{run_id}@{seq}"


def test_a_frame_link_opens_the_run_there_and_times_show_on_demand(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    code = "print('\\n'.join(map(str, range(300))))"
    run_id = exec_run(served, {"argv": [PY, "-c", code]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    end = page.locator(".timeline .frame.end")
    expect(end).to_be_visible(timeout=WAIT_MS)
    link = end.locator("a.seq")
    href = link.get_attribute("href")
    seq = int(end.get_attribute("data-seq") or -1)
    assert href == f"#/runs/{run_id}@{seq}"
    # Opened afresh at that address: the run, scrolled to the frame, marked.
    page.goto(f"{origin(served)}/#/runs")
    page.goto(f"{origin(served)}/{href}")
    marked = page.locator(".timeline .frame.marked")
    expect(marked).to_have_attribute("data-seq", str(seq), timeout=WAIT_MS)
    expect(marked).to_be_in_viewport()
    # The time stamps: hidden until asked for.
    stamp = end.locator(".at")
    expect(stamp).to_be_hidden()
    page.get_by_label("Show times").check()
    expect(stamp).to_be_visible()
    expect(stamp).to_have_text(re.compile(r"\d{1,2}:\d{2}:\d{2}"))
    expect(page.locator(".output .line .at").first).to_be_visible()


def test_the_search_box_finds_in_all_runs_or_this_one(page: Page, served: dict[str, Any]) -> None:
    sign_in(page, served)
    code = "for i in range(500):\n    print(f'step {i}', 'needle-42 found' if i == 321 else '')\n"
    run_id = exec_run(served, {"argv": [PY, "-c", code]}, wait=True)
    lines = raw_lines(served, run_id)
    frames = [json.loads(line) for line in lines]
    # The server's own search, once its history has indexed the run (its writer batches).
    page.wait_for_function(
        """async (id) => (await (await fetch(`/v1/search?q=needle-42&run=${id}`)).json())
          .length > 0""",
        arg=run_id,
        timeout=WAIT_MS,
    )
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    box = page.get_by_role("searchbox", name="Search the runs")
    box.fill('"needle-42"')
    page.get_by_label("this run").check()
    page.get_by_role("button", name="Search").click()
    match = page.locator(".matches .match a").first
    expect(match).to_contain_text("needle-42", timeout=WAIT_MS)
    expect(page.locator(".search-said")).to_contain_text(f"in run {run_id}")
    expect(match.locator("mark")).to_have_text("needle-42")
    needle = next(f for f in frames if "needle-42" in str(f.get("text", "")))
    assert match.get_attribute("href") == f"#/runs/{run_id}@{needle['seq']}"
    # All runs: no `run` asked.
    box.fill("step 32")
    page.get_by_label("all runs").check()
    page.get_by_role("button", name="Search").click()
    expect(page.locator(".search-said")).to_contain_text("in all runs", timeout=WAIT_MS)
    # The words "step" and "32" as they are: not "step 320" (a search is by words).
    expect(page.locator(".matches .match")).to_have_count(1)
    shot(page, "search")
    box.fill('"needle-42"')
    page.get_by_role("button", name="Search").click()
    # The output line, and the run's argv in its `start` frame (the code names the needle).
    expect(page.locator(".search-said")).to_contain_text("2 matches for", timeout=WAIT_MS)
    # The match opens the run at its frame: the output scrolled there, that line marked.
    page.locator(f'.matches .match a[href="#/runs/{run_id}@{needle["seq"]}"]').click()
    marked = page.locator(".output .line.marked")
    expect(marked).to_contain_text("step 321 needle-42 found", timeout=WAIT_MS)
    expect(marked).to_be_in_viewport()


#: Lines whose words a search finds though they are not typed as they are: other case,
#: accents, punctuation between a phrase's words, a CJK run's middle, emoji.
MARKED_LINES = [
    "build step Needle-42 done, needles elsewhere",
    "le café est prêt",
    "日本語テキストを表示します",
    "deploy 🚀 launched, 👍🏽 from ops",
]


def test_the_search_marks_what_the_index_found(page: Page, served: dict[str, Any]) -> None:
    """Each match marks the words as the index found them: `"needle 42"` marks `Needle-42`,
    `NEEDLE` not the `needle` in `needles`, `cafe` marks `café`, `"本語 テキ"` the middle of
    a CJK run, `"🚀launched"` the emoji and the word after it, `👍` the thumb with its skin
    tone (the marks were the typed text matched literally, whatever the index found)."""
    sign_in(page, served)
    script = served["cwd"] / "marked.py"  # (its argv names the file, not the words)
    script.write_text("".join(f"print({line!r})\n" for line in MARKED_LINES), encoding="utf-8")
    run_id = exec_run(served, {"argv": [PY, str(script)]}, wait=True)
    page.wait_for_function(
        """async (id) => (await (await fetch(`/v1/search?q=launched&run=${id}`)).json())
          .length > 0""",
        arg=run_id,
        timeout=WAIT_MS,
    )
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    box = page.get_by_role("searchbox", name="Search the runs")
    page.get_by_label("this run").check()
    cases = {
        '"needle 42"': ["Needle-42"],
        "NEEDLE": ["Needle"],  # a word whole: `needles` is another word
        "cafe PRET": ["café", "prêt"],
        "本語テ": ["本語テ"],
        '"本語 テキ"': ["本語テキ"],  # a CJK phrase: its characters, one after the other
        "🚀": ["🚀"],
        '"🚀launched"': ["🚀 launched"],
        "👍 ops": ["👍🏽", "ops"],
    }
    got = {}
    for query in cases:
        box.fill(query)
        page.get_by_role("button", name="Search").click()
        said = page.locator(".search-said")
        quoted = query if '"' in query else f"“{query}”"
        expect(said).to_contain_text(f"1 match for {quoted}", timeout=WAIT_MS)
        got[query] = page.locator(".matches .match mark").all_text_contents()
    assert got == cases


def test_the_screenshots_of_the_terminal_parts_were_written() -> None:
    require_browser()
    names = {p.stem for p in SHOTS.glob("*.png")}
    assert {"colours", "running-hook", "download", "search"} <= names
