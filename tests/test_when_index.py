"""A run's start checks only the `script` hooks whose `when.argv` may match its command line
(`core/whenindex.py`): thousands of hooks, each for a command of its own, cost a run what
its own hooks cost, not a `when` check each; a tool call checks only the `call` hooks whose
`when.tool` (or `when.server`) may match it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.hooks import Config
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.when import RunFacts, run_mismatch, tool_mismatch
from mcpx_hooks.supervisor.run import callpoint, phases
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.callpoint import Call, CallPoint
from mcpx_hooks.supervisor.run.hookcontext import RunInfo
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.phases import PhaseHooks


def config_of(tmp_path: Path, whens: list[dict[str, Any] | None], phase: str = "before") -> Config:
    text = '[defaults]\nsandbox = "none"\n'
    for i, when in enumerate(whens):
        text += f'[[hooks]]\nname = "h{i}"\non = "script"\nphase = "{phase}"\nrun = ["true"]\n'
        if when is not None:
            keys = ", ".join(f"{key} = {json.dumps(patterns)}" for key, patterns in when.items())
            text += f"when = {{ {keys} }}\n"
    (tmp_path / "c.toml").write_text(text)
    return load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)


def phase_hooks(config: Config) -> PhaseHooks:
    return PhaseHooks(config, None, Bus(), journal=RunJournal("r"), run_id="r", asks=None)  # type: ignore[arg-type]


def run_of(*argv: str, cwd: str = "/work") -> RunInfo:
    return RunInfo("r", argv, cwd, "")


def test_a_run_checks_only_the_hooks_its_command_line_may_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whens: list[dict[str, Any] | None] = []
    for i in range(1500):
        whens += [{"argv": [f"tool-{i}*"]}, {"argv": [f"tool-{i}", f"other-{i}"]}]
    whens += [{"argv": ["true"]}, {"argv": ["tr*"]}, {"argv": ["*ue"]}, None]
    hooks = phase_hooks(config_of(tmp_path, whens))
    checked: list[str] = []

    def counting(when: Any, facts: RunFacts) -> str | None:
        checked.append(str(when))
        return run_mismatch(when, facts)

    monkeypatch.setattr(phases, "run_mismatch", counting)
    fired = hooks.of(Phase.BEFORE, run_of("true"))
    assert [h.name for h in fired] == ["h3000", "h3001", "h3002", "h3003"]
    assert len(checked) == 3  # the three that may match: not 3,003 `when` checks
    checked.clear()
    fired = hooks.of(Phase.BEFORE, run_of("/opt/tool-7", "--x"))
    assert [h.name for h in fired] == ["h14", "h15", "h3003"]  # by the program's name
    assert len(checked) <= 20  # tool-7*, tool-7?*: those that begin as it does
    assert hooks.of(Phase.SUFFIX, run_of("true")) == []  # (no hook of that phase)


PATTERNS = [
    "make", "make test*", "py*", "*test*", "[mp]ake", "?ake", "pytest -q", "/usr/bin/*",
    "ma[", "ma[!x]e", "", "*", "tr?e", "true", "'a b'*", "a b",
]  # fmt: skip
ARGVS = [
    ("make",), ("make", "test", "-j4"), ("/usr/bin/pytest", "-q"), ("pytest", "-q"), ("true",),
    (), ("a b", "c"), ("ma[",), ("sh", "-c", "make test"), ("/bin/true",),
]  # fmt: skip


def test_the_hooks_that_fire_are_those_whose_when_matches(tmp_path: Path) -> None:
    whens: list[dict[str, Any] | None] = [None]
    whens += [{"argv": [p]} for p in PATTERNS]
    whens += [{"argv": [a, b]} for a, b in zip(PATTERNS, reversed(PATTERNS), strict=True)]
    whens += [{"cwd": ["/work*"]}, {"cwd": ["/else"]}, {"argv": ["make"], "cwd": ["/else"]}]
    config = config_of(tmp_path, whens, phase="suffix")
    hooks = phase_hooks(config)
    for argv in ARGVS:
        facts = RunFacts(argv, "/work", None)
        expected = [h for h in config.hooks if not h.when or run_mismatch(h.when, facts) is None]
        assert hooks.of(Phase.SUFFIX, run_of(*argv)) == expected, argv
    assert hooks.of(Phase.SUFFIX) == [config.hooks[0]]  # no run: only the hook without when


def call_config_of(tmp_path: Path, whens: list[dict[str, Any] | None]) -> Config:
    text = '[defaults]\nsandbox = "none"\n'
    for i, when in enumerate(whens):
        text += f'[[hooks]]\nname = "c{i}"\non = "call"\nphase = "before"\nrun = ["true"]\n'
        if when is not None:
            keys = ", ".join(f"{key} = {json.dumps(patterns)}" for key, patterns in when.items())
            text += f"when = {{ {keys} }}\n"
    (tmp_path / "c.toml").write_text(text)
    return load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)


def test_a_tool_call_checks_only_the_call_hooks_its_tool_may_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whens: list[dict[str, Any] | None] = []
    for i in range(1500):
        whens += [{"tool": [f"fs.tool_{i}"]}, {"tool": [f"tool_{i}*"], "server": ["fs"]}]
    whens += [
        {"tool": ["fs.read"]},  # c3000
        {"tool": ["re*"]},  # c3001
        {"tool": ["*ad"]},  # c3002
        {"server": ["f*"]},  # c3003
        {"server": ["git"]},  # c3004: never a candidate for fs
        {"client": ["cli*"]},  # c3005: no tool nor server, checked in full
        None,  # c3006
    ]
    point = CallPoint(call_config_of(tmp_path, whens), None, None, None)  # type: ignore[arg-type]
    checked: list[str] = []

    def counting(when: Any, *args: Any) -> str | None:
        checked.append(str(when))
        return tool_mismatch(when, *args)

    monkeypatch.setattr(callpoint, "tool_mismatch", counting)
    call = Call(1, "fs", "read", {}, client="client-a")
    fired = point.hooks_of(Phase.BEFORE, call)
    assert [h.name for h in fired] == ["c3000", "c3001", "c3002", "c3003", "c3005", "c3006"]
    assert len(checked) == 5  # those that may match: not 3,006 `when` checks
    checked.clear()
    fired = point.hooks_of(Phase.BEFORE, Call(2, "fs", "tool_7", {}))
    assert [h.name for h in fired] == ["c14", "c15", "c3003", "c3006"]
    assert len(checked) == 5  # c14, c15, and *ad, f* and the client's, which any call may match
    assert point.hooks_of(Phase.SUFFIX, call) == []
