"""Every frame type through the CLI's readable view: one frame of each type of the table
(`frame_samples`) shows as lines a person reads, and a type the view does not know shows as
its type and its fields instead of nothing."""

from __future__ import annotations

from typing import Any

import pytest
from frame_samples import UNKNOWN, every_frame

from mcpx_hooks.supervisor.cli.execview import Output
from mcpx_hooks.supervisor.cli.view import ADVICE_LINES, frame_lines, other_frame_line


@pytest.mark.parametrize("frame", every_frame(), ids=lambda f: f["type"])
def test_every_frame_type_shows_in_the_view(frame: dict[str, Any]) -> None:
    lines = frame_lines(frame)
    assert lines, f"the view shows nothing of a {frame['type']} frame"
    assert all(line.strip() for line in lines), lines
    # Each type of the table has a view of its own: none falls to the one for other types.
    assert lines != [other_frame_line(frame)], f"the view does not know {frame['type']}"


def test_a_type_the_view_does_not_know_shows_its_type_and_fields() -> None:
    assert frame_lines(UNKNOWN) == ['future-kind {"shape": "round", "size": 3}']
    long = {**UNKNOWN, "text": "x" * 500}
    (line,) = frame_lines(long)
    assert line.startswith("future-kind {") and line.endswith("...") and len(line) < 250
    assert frame_lines({"seq": 4}) == ["(no type) {}"]


def test_exec_prints_a_line_for_every_frame(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output()
    for frame in [*every_frame(), UNKNOWN]:
        out.frame(frame, as_json=False)
        printed = capsys.readouterr().out
        assert printed.strip(), f"exec printed nothing for a {frame['type']} frame"


def test_a_refused_host_is_not_said_to_be_outside_the_list_when_a_secret_was_refused() -> None:
    """The egress frame's `why` says why the proxy refused, in its words: a secret's
    placeholder sent to a host outside the secret's hosts is not "not in network". A frame
    stored before `why` was says only that it did; the hook frame's `egress` says why."""
    from frame_samples import sample

    from mcpx_hooks.supervisor.core.egress import refusal
    from mcpx_hooks.supervisor.core.frames import FrameType

    egress = {**sample(FrameType.EGRESS), "hook": "tok", "host": "localhost", "port": 8081}
    assert frame_lines(egress) == ["egress localhost:8081 for hook tok: blocked by the proxy"]
    secret = refusal("localhost", 8081, "blocked: secret TOK sent to localhost", "anywhere")
    assert frame_lines({**egress, "why": secret}) == [
        "egress localhost:8081 for hook tok: blocked: secret TOK sent to localhost"
    ]
    server = {**egress, "hook": None, "server": "api", "host": "x.org", "port": 443}
    server["why"] = refusal("x.org", 443, None, "[servers.api] network")
    assert frame_lines(server) == [
        'egress x.org:443 for server api: blocked: x.org not in network; "x.org" in'
        " [servers.api] network would admit it"
    ]
    hook = {**sample(FrameType.HOOK), "name": "tok", "status": "ok", "clampedBy": []}
    hook["egress"] = ["blocked: secret TOK sent to localhost", "blocked: x.org not in network"]
    said = [line for line in frame_lines(hook) if line.startswith("  egress: ")]
    assert said == [
        "  egress: blocked: secret TOK sent to localhost",
        "  egress: blocked: x.org not in network",
    ]


def test_a_hook_s_advice_is_shown_once_and_at_most_its_first_lines() -> None:
    # 80,000 lines of advice: the hook's line shows the first ADVICE_LINES and counts the
    # rest; the outcome, which gathers every hook's advice, only counts it (not again).
    hook = next(f for f in every_frame() if f["type"] == "hook")
    long = "\n".join(f"a{i}" for i in range(80_000))
    lines = "\n".join(frame_lines({**hook, "advice": ["short", long]})).split("\n")
    advice = lines[lines.index("  advice: short") :]
    assert advice[1:3] == ["  advice: a0", "      a1"]
    assert len(advice) == ADVICE_LINES + 1
    assert advice[-1] == (
        f"  ... and {80_001 - ADVICE_LINES} more lines of advice (all of it: --json)"
    )
    for kind in ("result", "error"):
        outcome = next(f for f in every_frame() if f["type"] == kind)
        shown = frame_lines({**outcome, "advice": ["short", long]})
        assert "  advice: 2 pieces, shown under the hooks that gave it" in shown
        assert len(shown) < 5 and not any("a0" in line for line in shown)
    assert "advice" not in " ".join(frame_lines({**outcome, "advice": []}))


@pytest.mark.parametrize(
    ("action", "said"),
    [
        ("run", "  stdout (first lines):"),
        ("module", "  the function's return value (first lines):"),
        ("prompt", "  the model's answer (first lines):"),
        ("plugin", "  the tool's answer (first lines):"),
        ("a-kind-of-a-later-build", "  stdout (first lines):"),
    ],
)
def test_an_answer_that_is_none_is_named_as_what_the_hook_answered_with(
    action: str, said: str
) -> None:
    # A prompt or plugin hook's bad answer was shown under "stdout (first lines):", though
    # no process wrote it: the model or the tool did.
    hook = {**next(f for f in every_frame() if f["type"] == "hook"), "action": action}
    hook.update(status="invalid-output", reason="why", stdoutHead='{"refuse": 5}')
    lines = frame_lines(hook)
    assert lines[lines.index(said) + 1] == '    | {"refuse": 5}', lines
