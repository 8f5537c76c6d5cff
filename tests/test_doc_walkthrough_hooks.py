"""docs/hooks.md run for real, in a scratch project: the page's observer (`on = "*"`) and
`jq-present` hook as it writes them; its gate three ways (hooks/gate.sh, hooks/gate.py,
hooks/gate_module.py, each written where its first line says, with the `run` or `module` that
line gives); the input a hook is given against the page's; the failure view "without jq"
compared with what `exec` prints; and the `hook test` commands as written.

Substituted: jq is installed here, and "without jq" is made by giving the gate hooks a PATH
(`env = { PATH = … }`) holding only `sh`. The hooks `deps` and `hint` that `hook test` names,
and its `payload.json`, are not shown on the page: the test writes the smallest of each."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from docpage import Scratch, block, blocks, commands, normal

PAGE = "hooks.md"


def trusted(s: Scratch, config: str) -> None:
    s.write(".mcpx-hooks.toml", config)
    done = s.sh("mcpx-hooks trust")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_observer_records_every_event(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    trusted(s, block(PAGE, 'on = "*"', "toml").body)
    done = s.sh("mcpx-hooks exec -- true")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    events = [json.loads(line) for line in (s.proj / "events.jsonl").read_text().splitlines()]
    kinds = {e["event"]["kind"] for e in events}
    assert {"run.started", "run.finished"} <= kinds, kinds


def test_jq_present_as_written(tmp_path: Path) -> None:
    if shutil.which("jq") is None:
        pytest.skip("the page's hook checks for jq, which this machine lacks")
    s = Scratch(tmp_path)
    trusted(s, block(PAGE, 'name = "jq-present"', "toml").body)
    done = s.sh("mcpx-hooks hook test jq-present")
    assert done.returncode == 0, done.stdout
    assert normal(done.stdout)[:2] == [
        "hook jq-present (script.before, run, sandbox strict): ok in N ms",
        "  effect ask",
    ]


def gate_files(s: Scratch) -> dict[str, str]:
    """Each of the page's three gates written where its first line says; their hook keys."""
    keys = {}
    for b in blocks(PAGE):
        found = re.search(
            r"^# (hooks/gate\w*\.\w+): ((?:run|module) = .+?)(?:;|$)", b.body, flags=re.MULTILINE
        )
        if found and b.lang in {"sh", "python"}:
            s.write(found[1], b.body)
            keys[found[1]] = found[2]
    assert len(keys) == 3, keys
    return keys


def test_the_gate_three_ways_without_jq(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    keys = gate_files(s)
    nojq = s.proj / "nojq"  # a PATH holding sh and no jq
    nojq.mkdir()
    (nojq / "sh").symlink_to("/bin/sh")
    hooks = [
        f'[[hooks]]\nname = "{name}"\non = "script"\nphase = "before"\n{key}\n'
        f'env = {{ PATH = "{nojq}" }}\n' + ('effect = "ask"\n' if name != "gate" else "")
        for name, key in zip(["gate", "py", "mod"], keys.values(), strict=True)
    ]
    trusted(s, "\n".join(hooks))
    # The shell gate fails (its exit status answers): the view the page shows.
    done = s.sh("mcpx-hooks exec --only gate -- true")
    assert done.returncode == 0, done.stdout
    shown = block(PAGE, "hook gate (script.before, run, sandbox strict)").body
    out = normal(done.stdout)
    start = out.index(normal(shown)[0].replace("4 ms", "N ms"))
    assert out[start : start + len(normal(shown))] == normal(shown)
    # The Python gates answer with a refusal.
    for name, reason in (("py", "jq is missing for true"), ("mod", "jq is missing")):
        done = s.sh(f"mcpx-hooks hook test {name}")
        assert done.returncode == 3, done.stdout
        assert f"REFUSES the run (the hook said no): {reason}" in done.stdout


def test_the_input_a_hook_is_given_has_the_pages_keys(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    trusted(
        s,
        '[[hooks]]\nname = "deps"\non = "script"\nphase = "before"\neffect = "ask"\n'
        'timeoutMs = 5000\nrun = ["sh", "-c", "cat > given.json"]\nsandbox = "workspace"\n',
    )
    s.write("job.py", "def main():\n    return 1\n")
    assert s.sh("""mcpx-hooks exec --input '{"k": 1}' -- python3 job.py""").returncode != 2
    given = json.loads((s.proj / "given.json").read_text())
    page = json.loads(block(PAGE, '"protocol": 1', "json").body)
    assert given.keys() == page.keys()
    assert given["hook"] == page["hook"]
    assert given["run"].keys() == page["run"].keys()
    assert given["run"]["argv"] == page["run"]["argv"]
    assert given["input"] == {"k": 1}


def test_hook_test_commands_as_written(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    trusted(
        s,
        '[[hooks]]\nname = "deps"\non = "script"\nphase = "before"\nrun = ["echo", "checked"]\n\n'
        '[[hooks]]\nname = "hint"\non = "script"\nphase = "onError"\n'
        'run = ["sh", "-c", "echo look at the failing tests"]\n',
    )
    s.write("payload.json", '{"input": {"k": 1}}\n')
    deps, hint = commands(block(PAGE, "mcpx-hooks hook test deps", "sh").body)
    done = s.sh(deps)
    assert done.returncode == 0, done.stdout
    assert normal(done.stdout) == [
        "hook deps (script.before, run, sandbox strict): ok in N ms",
        "  effect advise",
        "  advice: checked",
    ]
    done = s.sh(hint)
    assert done.returncode == 0, done.stdout
    assert normal(done.stdout)[-1] == "  advice: look at the failing tests"
