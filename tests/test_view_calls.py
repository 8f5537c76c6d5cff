"""What a person reads at the terminal of a run's tool calls and plugin hooks, from real runs
of `mcpx-hooks exec` and `runs show` in a scratch project (a home of its own, the package's
example tool server): a plugin hook's line names the server's tool that answered it, a
refused call's line names the hook that refused it, and `runs show --verbose` says what each
hook's process used (the default view does not)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from console_browser import WAIT_MS, Page, browser, expect, origin, page, served
from docpage import Scratch

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

EXAMPLES = Path(__file__).parent.parent / "supervisor" / "examples" / "tools"

CONFIG = f"""
[servers.words]
command = [{json.dumps(sys.executable)}, "wordtools.py"]   # copied into the project

[[hooks]]
name = "tally"
on = "script"
phase = "onSuccess"
plugin = "words.count"
args = {{ text = "@result.value" }}
effect = "advise"

[[hooks]]
name = "no-removing"
on = "call"
phase = "before"
when = {{ tool = ["words.remove"] }}
run = ["sh", "-c", "echo '{{\\"refuse\\": \\"removing is not allowed here\\"}}'"]
effect = "ask"
"""

JOB = """\
import mcpx

def main():
    mcpx.call("words.count", {"text": "the server starts and lists its tools"})
    try:
        mcpx.call("words.remove", {"path": "build/"})
    except mcpx.CallError:
        pass
    return "one two three"
"""

TOOK = re.compile(r" in \d+ ms")


def ran(tmp_path: Path, *flags: str) -> tuple[Scratch, str]:
    """The job run by `exec` (readable view, unless `flags` say `--json`), and what it
    printed."""
    s = Scratch(tmp_path)
    s.write("tools.toml", CONFIG)
    s.write("job.py", JOB)
    s.write("wordtools.py", (EXAMPLES / "wordtools.py").read_text())
    done = s.sh(f"mcpx-hooks exec {' '.join(flags)} --config tools.toml --python job.py")
    assert done.returncode == 0, done.stdout + done.stderr
    return s, done.stdout


def test_a_plugin_hook_s_line_names_the_tool_that_answered_and_a_refused_call_its_hook(
    tmp_path: Path,
) -> None:
    # Before: `hook tally (script.onSuccess, plugin, sandbox strict)`, whose server's tool
    # answered unsaid; the refused call `FAILED: refused by no-removing: …`, its hook named
    # only where its error text named it, and read as the server's failure.
    _, out = ran(tmp_path)
    lines = [TOOK.sub(" in N ms", line) for line in out.splitlines()]
    assert any(
        line.startswith("hook tally (script.onSuccess, plugin words.count, sandbox ")
        and line.endswith("): ok in N ms")
        for line in lines
    ), out
    assert (
        "call words.remove, destructive: REFUSED by no-removing: removing is not allowed here"
        " in N ms"
    ) in lines, out
    assert "call words.count: ok in N ms" in lines, out


def test_runs_show_verbose_says_what_each_hook_s_process_used(tmp_path: Path) -> None:
    # Before: no view showed a hook's `resources`, and `runs show` had no --verbose.
    s, out = ran(tmp_path)
    run_id = out.split()[1].rstrip(":")
    plain = s.sh(f"mcpx-hooks runs show {run_id}")
    verbose = s.sh(f"mcpx-hooks runs show {run_id} --verbose")
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    assert " of CPU, " not in plain.stdout, plain.stdout
    shown = verbose.stdout.splitlines()
    gate = next(i for i, line in enumerate(shown) if line.startswith("hook no-removing ("))
    # Under the hook's line and its effect: what its process used, its peak memory in a unit.
    assert re.fullmatch(
        r"  used \d+ ms of CPU, \d+(\.\d)? (bytes|KiB|MiB|GiB) of memory at most", shown[gate + 2]
    ), verbose.stdout
    # The rest as the default view: a plugin hook runs no process of its own, said nothing of.
    assert [line for line in shown if " of CPU, " not in line] == plain.stdout.splitlines()
    tally = next(i for i, line in enumerate(shown) if line.startswith("hook tally ("))
    assert " of CPU, " not in shown[tally + 2], verbose.stdout


def test_the_demo_s_refused_call_reads_the_same_run_locally_and_served(tmp_path: Path) -> None:
    # Before: `call words.remove: FAILED…` in the local run, whose remove call came before any
    # call had started the server, and `call words.remove, destructive: FAILED…` in the
    # served one: the same call in two wordings, the hint known only in the second.
    s = Scratch(tmp_path)
    done = s.sh("mcpx-hooks demo", MCPX_HOOKS_NO_DISCOVERY="1")
    assert done.returncode == 0, done.stdout + done.stderr
    said = [
        TOOK.sub(" in N ms", line.removeprefix("ws> "))
        for line in done.stdout.splitlines()
        if line.removeprefix("ws> ").startswith("call words.remove")
    ]
    refused = "REFUSED by no-removing: the demo removes nothing in N ms"
    assert said == [f"call words.remove, destructive: {refused}"] * 2, done.stdout


def test_the_console_s_hook_detail_names_a_plugin_s_tool_and_says_what_a_process_used(
    tmp_path: Path, page: Page, served: dict[str, Any]
) -> None:
    # Before: a plugin hook's server and tool were two loose fields under its line, and what
    # a hook's process used was never shown. The frames are a real run's, as `exec --json`
    # printed them, sent on the run's socket.
    _, out = ran(tmp_path, "--json")
    frames = [json.loads(line) for line in out.splitlines()]
    run_id = frames[0]["runId"]

    def run_socket(ws: Any) -> None:
        ws.send("\n".join(json.dumps(f) for f in frames))
        ws.close(code=1000)

    page.route_web_socket(re.compile(rf"/v1/runs/{run_id}\?from=0$"), run_socket)
    page.goto(f"{origin(served)}/?token={served['server'].token}")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
    page.goto(f"{origin(served)}/#/runs/{run_id}")
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    hooks = page.locator('.timeline > li.frame[data-type="hook"]')
    tally = hooks.filter(has_text="tally").locator(".hook-line")
    expect(tally).to_contain_text(" · plugin words.count · ")
    gate = hooks.filter(has_text="no-removing")
    expect(gate.locator(".used")).to_have_text(
        re.compile(r"used \d+ ms of CPU · \d+(\.\d)? (bytes|KiB|MiB) of memory at most")
    )
    expect(hooks.filter(has_text="tally").locator(".used")).to_have_count(0)
