"""`validate` of a config of many hooks: the hooks are checked one by one, each shape of
invalid hook by jsonschema once (`config/manyhooks.py`), and what is found is exactly what a
walk of the whole document finds, every problem with its file and pointer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from mcpx_hooks.supervisor.config.manyhooks import SPLIT_FROM
from mcpx_hooks.supervisor.config.problems import problems
from mcpx_hooks.supervisor.config.schemas import document_problems, validator

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]

#: Hooks wrong in every way the schema says, and right ones, and the layer splice (`null`).
VARIED: list[Any] = [
    {"name": "a", "on": "script", "run": ["true"]},  # no phase: an observe hook on "script"
    {"name": "b", "on": "script", "phase": "before", "run": ["true"]},
    {"name": "c", "on": "script", "phase": "before"},  # no action
    {"name": "d", "on": "script", "phase": "before", "run": [""], "colour": 1},
    {"name": "", "on": "script", "phase": "before", "run": ["true"]},  # an empty name
    {"name": 7, "on": "script", "phase": "before", "run": ["true"]},
    {"on": "script", "phase": "nope", "run": ["true"], "timeoutMs": -1},
    {"on": "call", "phase": "before", "run": ["true"], "when": {"tool": []}},
    None,
    "a string",
    [],
    {"name": "e", "on": "script", "phase": "before", "run": ["true"], "timeoutMs": 1e400},
    {"name": "f", "on": "script", "phase": "before", "module": "x", "run": ["true"]},
]


def varied_doc(copies: int) -> dict[str, Any]:
    hooks = [
        {**h, "name": f"{h['name']}{i}"} if isinstance(h, dict) and h.get("name") else h
        for i in range(copies)
        for h in VARIED
    ]
    return {"hooks": hooks, "colour": "blue", "defaults": {"timeoutMs": "x"}}


@pytest.mark.parametrize("copies", [1, SPLIT_FROM // len(VARIED) + 1, 20])
def test_the_split_finds_exactly_what_the_whole_walk_finds(copies: int) -> None:
    doc = varied_doc(copies)
    split = document_problems(doc, "c.json")
    whole = problems(validator("config"), doc, "c.json")
    assert [(p.file, p.pointer, p.message) for p in split] == [
        (p.file, p.pointer, p.message) for p in whole
    ]
    assert len(split) > 10 * copies


def test_fifty_thousand_copies_of_one_invalid_hook_are_walked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50,000 hooks missing their phase took about 20 s: jsonschema walked each one."""
    walked = []
    descend = jsonschema.Draft202012Validator.descend

    def counting(self: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(instance, dict) and instance.get("on") == "script":
            walked.append(instance["name"])
        return descend(self, instance, *args, **kwargs)

    monkeypatch.setattr(type(validator("config")), "descend", counting)
    hooks = [{"name": f"h{n}", "on": "script", "run": ["true"]} for n in range(50_000)]
    found = document_problems({"hooks": hooks}, "big.json")
    assert [p.pointer for p in found] == [f"/hooks/{n}/on" for n in range(50_000)]
    assert len({p.message for p in found}) == 1
    assert set(walked) == {"h0"}  # the first copy only (its if, then and else)


def test_validate_names_every_problem_of_many_hooks(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    hooks = [{"name": f"h{n}", "on": "script", "run": ["true"]} for n in range(2_000)]
    path.write_text(json.dumps({"hooks": hooks}))
    out = subprocess.run(
        [*CLI, "validate", str(path)], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [f"{path}:/hooks/{n}/on" for n in range(2000)]
    assert out.stderr == "2000 problem(s)\n"
