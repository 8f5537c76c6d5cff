"""A run's start checks only the `script` hooks whose `when.argv` may match its command line
(`core/whenindex.py`): thousands of hooks, each for a command of its own, cost a run what
its own hooks cost, not a `when` check each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.hooks import Config
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.core.when import RunFacts, run_mismatch
from mcpx_hooks.supervisor.run import phases
from mcpx_hooks.supervisor.run.bus import Bus
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
