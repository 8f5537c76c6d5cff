"""What a run's scripts print, and the argv it ran, read in the console as a terminal and the
command line show them, in a real browser (the distribution's Chromium under Playwright, as
`test_console_browser.py`) against a real `mcpx-hooks serve`: a character that reorders text
(U+202E) never turns a line or a command line around, and a command line reads as `runs list`
prints it.
"""

from __future__ import annotations

import json
from typing import Any

from console_browser import (
    PY,
    WAIT_MS,
    Page,
    browser,
    exec_run,
    expect,
    origin,
    page,
    served,
)

from mcpx_hooks.supervisor.core.servers import CALL_CANCELLED, CALL_SESSION_ENDED
from mcpx_hooks.supervisor.core.shellwords import shell_line

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

RLO = "\u202e"


def sign_in(page: Page, served: dict[str, Any]) -> None:
    page.goto(f"{origin(served)}/?token={served['server'].token}")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)


#: Command lines as the page writes them, run in the page.
COMMAND_LINES = """async (argvs) => {
  const dom = await import('/console/dom.js');
  return argvs.map((argv) => dom.commandLine(argv));
}"""


def test_a_command_line_reads_as_runs_list_prints_it(page: Page, served: dict[str, Any]) -> None:
    sign_in(page, served)
    argvs = [
        ["echo", "plain", "it's", "", "a b", "x=1", "ü"],
        ["echo", f"safe {RLO}gnp.exe", "\x1b[31mred", "tab\there", "new\nline", "back\\'slash"],
        ["echo", "\x7f\x85\u2028\u00a0", "\U0001f600 emoji", "\ufeffbom", "\x00"],
    ]
    assert page.evaluate(COMMAND_LINES, argvs) == [shell_line(argv) for argv in argvs]


#: Every text in the page that holds a character that reorders what follows it.
REORDERED = r"""() => {
  const found = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (/[\u202a-\u202e\u2066-\u2069]/.test(n.data)) found.push(n.data);
  }
  return found;
}"""


def test_a_reordering_character_never_turns_a_line_around(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    argv = [PY, "-c", f"print('safe {RLO}gnp.exe it is')", f"x{RLO}fdp.exe"]
    run_id = exec_run(served, {"argv": argv}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    # One line is '1 line', from one frame ('1 lines', 'frames 2 to 2' before).
    expect(page.locator("#output-count")).to_have_text("(1 line)", timeout=WAIT_MS)
    expect(page.locator(".frame.output-group")).to_contain_text(
        "1 stdout (frame 2, in the output below)"
    )
    line = page.locator(".output .line").first
    expect(line).to_contain_text("safe \\u202egnp.exe it is")
    shown = shell_line(argv)
    expect(page.locator(".argv code")).to_have_text(shown)
    expect(page.locator(f'.runs a[href="#/runs/{run_id}"] .cmd')).to_have_text(shown)
    assert page.evaluate(REORDERED) == []


#: The command line as it is drawn (`innerText`: what the eye reads, white space as laid out),
#: in the run's heading, its start frame and its entry in the runs list.
DRAWN_COMMAND = """(runId) => [
  document.querySelector('.argv code'),
  document.querySelector('.frame.start code'),
  document.querySelector(`.runs a[href="#/runs/${runId}"] .cmd`),
].map((e) => e && e.innerText)"""


def test_a_command_line_keeps_its_spaces_as_drawn(page: Page, served: dict[str, Any]) -> None:
    # Two spaces in a pattern, a program's indentation: drawn as one space, the command read
    # off the page is another command.
    sign_in(page, served)
    argv = [PY, "-c", "def main():\n    return 'a  b'\n", "x  y"]
    run_id = exec_run(served, {"argv": argv}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    assert page.evaluate(DRAWN_COMMAND, run_id) == [shell_line(argv)] * 3


#: A question, a piece of advice and the refusal they make, each of several lines, as a hook
#: writes a list: printf's `%s` writes the JSON as it is (its `\n` escapes stay escapes).
SAID_IN_LINES = "Deploy these?\n  api  v2\n  web  v3"
LISTING_HOOKS = [
    {
        "name": "lister",
        "on": "script",
        "phase": "before",
        "effect": "ask",
        "run": [
            "sh",
            "-c",
            "printf '%s\\n' '"
            + json.dumps(
                {
                    "advise": "Fix these:\n  - a.py:3  unused\n  - b.py:7",
                    "ask": {"question": SAID_IN_LINES, "default": "no", "deadlineMs": 500},
                }
            )
            + "'",
        ],
    }
]

#: What each of them is drawn as (`innerText`: lines and spaces as the eye reads them).
DRAWN_SAYINGS = """() => Object.fromEntries(
  ['.frame.ask .question', '.frame.hook .refusal', '.frame.hook .asked', '.frame.hook .advice li',
   '.frame.error .message', '.facts .message']
  .map((s) => [s, document.querySelector(s)?.innerText]))"""


def test_what_a_hook_says_in_lines_is_drawn_in_lines(page: Page, served: dict[str, Any]) -> None:
    # A question listing what it would deploy read 'Deploy these? api v2 web v3': its lines
    # and spaces were laid out as HTML collapses them.
    sign_in(page, served)
    run_id = exec_run(served, {"argv": ["true"], "hooks": LISTING_HOOKS}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    # A run that printed nothing says so: its output box is empty, not still coming.
    expect(page.locator("#output-count")).to_have_text("(none: the script printed nothing)")
    drawn = page.evaluate(DRAWN_SAYINGS)
    assert drawn[".frame.ask .question"] == SAID_IN_LINES
    assert drawn[".frame.hook .advice li"] == "Fix these:\n  - a.py:3  unused\n  - b.py:7"
    for said in (
        ".frame.hook .refusal",
        ".frame.hook .asked",
        ".frame.error .message",
        ".facts .message",
    ):
        assert SAID_IN_LINES in drawn[said], said


#: Progress bars as programs draw them: a carriage return, then the line written over.
PROGRESS = r"""import sys
E = '\x1b'
sys.stdout.write('progress 10%\rprogress 50%\rprogress 100%\n')
sys.stdout.write('abcdef\rxy\n')
sys.stdout.write('a line from windows\r\n')
sys.stdout.write(f'{E}[31m 10% red\r{E}[32m100%{E}[0m done\n')
sys.stdout.write('x' * 5000 + '\r' * 5000 + 'last\n')
"""

#: Each output line's text and the colour of its first piece.
LINES = """() => [...document.querySelectorAll('.output .line')].map((l) => {
  const text = [...l.childNodes].slice(2).map((n) => n.textContent).join('');
  const span = l.querySelector('span:not(.s)');
  return [text, span ? getComputedStyle(span).color : null];
})"""


def test_a_carriage_return_writes_over_the_line_as_in_a_terminal(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": [PY, "-c", PROGRESS]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator("#output-count")).to_have_text("(5 lines)", timeout=WAIT_MS)
    # (The count is said as the frames are taken; the lines are drawn after: wait for them.)
    expect(page.locator(".output .line")).to_have_count(5, timeout=WAIT_MS)
    got = page.evaluate(LINES)
    texts = [text for text, _ in got]
    assert texts[:4] == ["progress 100%", "xycdef", "a line from windows", "100% done"]
    assert texts[4].startswith("lastxxx") and "more characters" in texts[4]
    green = got[3][1]
    red = page.evaluate(
        "() => { const s = document.createElement('span'); s.className = 'sgr-fg1';"
        " document.body.append(s); const c = getComputedStyle(s).color; s.remove(); return c; }"
    )
    assert green not in (None, red)


def test_a_link_with_a_broken_escape_says_no_such_run(page: Page, served: dict[str, Any]) -> None:
    sign_in(page, served)
    errors: list[str] = served["page_state"]["errors"]
    before = len(errors)
    page.goto(f"{origin(served)}/#/runs/ab%E0%A4%A")
    run = page.locator("article.run")
    expect(run.locator("h2")).to_contain_text("ab%E0%A4%A", timeout=WAIT_MS)
    expect(run).to_contain_text("This run is gone: no run 'ab%E0%A4%A'")
    assert errors[before:] == []


#: A run of 100,000 egress refusals (a script that tried as many hosts), drawn in the page
#: from its frames: how many rows its timeline holds, what the folded row says, and the row
#: a link to a folded frame marks.
REFUSALS = """async (count) => {
  const { RunView } = await import('/console/run.js');
  const view = new RunView('no-such-run', { onGone: () => {} });
  document.body.append(view.root);
  const at = '2026-01-01T00:00:00Z';
  const frame = (seq, type, more) => ({ runId: 'no-such-run', seq, at, type, ...more });
  view.take(frame(0, 'start', { argv: ['sh'], cwd: '/', sandbox: 'workspace' }));
  for (let i = 1; i <= count; i++) {
    view.take(frame(i, 'egress', { run: 'no-such-run', host: `h${i}.example.org`, port: 80,
      allowed: false, why: `blocked: h${i}.example.org not in network` }));
  }
  view.take(frame(count + 1, 'end', { exitCode: 0, durationMs: 5, chain: '' }));
  const drawn = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const t0 = performance.now();
  await drawn();
  const ms = performance.now() - t0;
  view.goTo(5000);
  const rows = view.timeline.children.length;
  const folded = view.timeline.querySelector('li.folded');
  const marked = view.timeline.querySelector('li.marked');
  const result = { rows, ms, nodes: view.root.getElementsByTagName('*').length,
    label: folded.textContent, marked: marked === folded };
  view.close();
  view.root.remove();
  return result;
}"""


def test_a_run_of_a_hundred_thousand_refused_hosts_draws_in_a_few_rows(
    page: Page, served: dict[str, Any]
) -> None:
    # Each egress frame was a row of the timeline: 30,000 of them took 13 s to draw here,
    # the page unanswering for seconds at a time, and 270,000 elements.
    sign_in(page, served)
    got = page.evaluate(REFUSALS, 100_000)
    assert got["rows"] == 1 + 20 + 1 + 1  # start, 20 refusals, the rest counted, end
    assert got["label"] == (
        "#21egress99,980 more egress frames"
        " (frames 21\u2013100000; every one is in Download frames)"
    )
    assert got["marked"] is True
    assert got["nodes"] < 1000


#: A `before` hook that fails after drawing a progress bar on its stderr.
PROGRESS_HOOK = {
    "name": "fetch-deps",
    "on": "script",
    "phase": "before",
    "run": [
        PY,
        "-c",
        "import sys; sys.stderr.write('fetching 10%\\rfetching 100%\\n'"
        " '\\x1b[31mno\\rfailed\\x1b[0m\\n'); sys.exit(1)",
    ],
}


def test_a_hook_s_progress_bar_is_written_over_as_in_a_terminal(
    page: Page, served: dict[str, Any]
) -> None:
    sign_in(page, served)
    run_id = exec_run(served, {"argv": ["true"], "hooks": [PROGRESS_HOOK]}, wait=True)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    hook = page.locator(".timeline .frame.hook", has_text="fetch-deps")
    tail = hook.locator("details.said pre")
    expect(tail).to_contain_text("failed", timeout=WAIT_MS)
    assert tail.text_content() == "fetching 100%\nfailed\n"


#: A hook that answers with 150,000 pieces of advice (within its 1 MiB of stdout), drawn in
#: the page from the run's frames: whether the run's end is drawn, and what the advice shows.
ADVICE = """async (count) => {
  const { RunView } = await import('/console/run.js');
  const view = new RunView('no-such-run', { onGone: () => {} });
  document.body.append(view.root);
  const at = '2026-01-01T00:00:00Z';
  const frame = (seq, type, more) => ({ runId: 'no-such-run', seq, at, type, ...more });
  const advice = Array.from({ length: count }, (_, i) => `piece ${i}`);
  view.take(frame(0, 'start', { argv: ['true'], cwd: '/', sandbox: 'workspace' }));
  view.take(frame(1, 'hook', { name: 'adv', on: 'script', phase: 'before', action: 'run',
    effect: 'advise', status: 'ok', durationMs: 5, sandbox: 'strict', advice }));
  view.take(frame(2, 'result', { value: null, advice }));
  view.take(frame(3, 'end', { exitCode: 0, durationMs: 5, chain: '' }));
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const hook = view.timeline.querySelector('li[data-seq="1"] .advice');
  const result = { ended: view.ended, items: view.root.querySelectorAll('.advice li').length,
    first: hook.querySelector('li').textContent, more: hook.querySelector('.more').textContent };
  view.close();
  view.root.remove();
  return result;
}"""


def test_a_hook_s_hundred_thousand_pieces_of_advice_never_stop_the_run_s_page(
    page: Page, served: dict[str, Any]
) -> None:
    # Each piece was an element, all of them passed to one call: past about 120,000 the
    # browser threw (too many arguments), and nothing after that frame was drawn, its end
    # included: the page said the run was still going, for good.
    sign_in(page, served)
    got = page.evaluate(ADVICE, 150_000)
    assert got == {
        "ended": True,
        "items": 40,  # 20 under the hook, 20 under the result
        "first": "piece 0",
        "more": "\u2026 and 149,980 more (all of them: Download frames)",
    }


#: A script's 500 tool calls, each with a `before` hook that advises, a line of output after
#: each call, and among them a call a hook refused (its hook frame and its call frame), drawn
#: in the page from their frames: the timeline's rows, what the folded rows say, and the row
#: a link to a folded frame marks.
CALLS = """async (count) => {
  const { RunView } = await import('/console/run.js');
  const view = new RunView('no-such-run', { onGone: () => {} });
  document.body.append(view.root);
  const at = '2026-01-01T00:00:00Z';
  let seq = 0;
  const frame = (type, more) => view.take({ runId: 'no-such-run', seq: seq++, at, type, ...more });
  const hook = (name, more) => frame('hook', { name, on: 'call', phase: 'before', action: 'run',
    effect: 'advise', status: 'ok', durationMs: 5, sandbox: 'strict', advice: ['counting'],
    dropped: [], refused: null, changed: false, ...more });
  frame('start', { argv: ['python', 'many.py'], cwd: '/', sandbox: 'workspace' });
  for (let i = 1; i <= count; i++) {
    const refused = i === 300;
    hook(refused ? 'no-removing' : 'count-check', refused
      ? { effect: 'ask', advice: [],
        refused: { reason: 'removing is not allowed', failClosed: false } }
      : {});
    frame('call', { id: i, server: 'words', tool: refused ? 'remove' : 'count',
      argsSha256: 'ab'.repeat(32), durationMs: 7, ok: !refused,
      ...(refused ? { error: 'refused by no-removing: removing is not allowed',
        refusedBy: 'no-removing' } : {}) });
    frame('stdout', { text: `call ${i} done` });
  }
  frame('result', { value: null });
  frame('end', { exitCode: 0, durationMs: 5, chain: '' });
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const rows = [...view.timeline.children];
  const folded = rows.filter((r) => r.classList.contains('folded'));
  const call = rows.find((r) => r.dataset.seq === '899');
  view.goTo(1000);
  const marked = view.timeline.querySelector('li.marked');
  const result = { rows: rows.length, labels: folded.map((r) => r.textContent),
    refusedCall: call && call.querySelector('.call-body')?.textContent,
    refusedHook: rows.some((r) => r.dataset.seq === '898'),
    marked: marked === folded[1], lines: view.output.length };
  view.close();
  view.root.remove();
  return result;
}"""


def test_a_script_s_five_hundred_tool_calls_fold_into_a_row_that_counts_them(
    page: Page, served: dict[str, Any]
) -> None:
    # Each call frame was a row of raw JSON nine lines high, and each of its hooks another:
    # 500 calls made 1,500 rows, with the refused call and the output buried among them.
    sign_in(page, served)
    got = page.evaluate(CALLS, 500)
    # start, 20 calls (hook, call, output each), the first fold, the refusing hook, its call
    # and its output, the second fold, result, end
    assert got["rows"] == 1 + 20 * 3 + 1 + 3 + 1 + 2
    assert got["labels"] == [
        "#61calls279 more calls, all ok: words.count \u00d7279; 279 call hook frames, none"
        " failed or refused; 279 output frames, in the output below"
        " (frames 61\u2013897; every one is in Download frames)",
        "#901calls200 more calls, all ok: words.count \u00d7200; 200 call hook frames, none"
        " failed or refused; 200 output frames, in the output below"
        " (frames 901\u20131500; every one is in Download frames)",
    ]
    assert got["refusedHook"] is True
    assert got["refusedCall"] == (
        "words.remove refused \u00b7 7 ms \u00b7 call 300 \u00b7 args abababababab\u2026"
        "Refused by no-removing: removing is not allowed"
    )
    assert got["marked"] is True
    assert got["lines"] == 500


#: One call frame of each ending, drawn alone: its badge and the line under it.
CALL_ENDINGS = """async (frames) => {
  const { RunView } = await import('/console/run.js');
  const view = new RunView('no-such-run', { onGone: () => {} });
  document.body.append(view.root);
  const at = '2026-01-01T00:00:00Z';
  view.take({ runId: 'no-such-run', seq: 0, at, type: 'start', argv: ['mcp', 'client'],
    cwd: '/', sandbox: 'none' });
  frames.forEach((more, i) => view.take({ runId: 'no-such-run', seq: i + 1, at, type: 'call',
    id: i + 1, server: 'fs', tool: 'delete_file', argsSha256: 'ab'.repeat(32), durationMs: 3,
    ...more }));
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const bodies = [...view.timeline.querySelectorAll('.call-body')];
  const result = bodies.map((b) => ({ badge: b.querySelector('.badge').textContent,
    said: [...b.querySelectorAll('p:not(.call-line)')].map((p) => p.textContent) }));
  view.close();
  view.root.remove();
  return result;
}"""


def test_a_call_reads_ok_refused_cancelled_or_failed_as_exec_prints_it(
    page: Page, served: dict[str, Any]
) -> None:
    # A call its MCP client cancelled read "failed" (it is not the tool's failure), and a
    # refused one "failed" too, its hook named twice: "refused by gate: no deleting" then
    # "refused by gate".
    sign_in(page, served)
    got = page.evaluate(
        CALL_ENDINGS,
        [
            {"ok": True},
            {"ok": False, "error": "refused by gate: no deleting", "refusedBy": "gate"},
            {"ok": False, "error": CALL_CANCELLED},
            {"ok": False, "error": CALL_SESSION_ENDED},
            {"ok": False, "error": "the tool raised: disk full"},
        ],
    )
    assert got == [
        {"badge": "ok", "said": []},
        {"badge": "refused", "said": ["Refused by gate: no deleting"]},
        {"badge": "cancelled", "said": [CALL_CANCELLED]},
        {"badge": "cancelled", "said": [CALL_SESSION_ENDED]},
        {"badge": "failed", "said": ["the tool raised: disk full"]},
    ]
