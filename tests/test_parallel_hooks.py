"""`parallel = true`: consecutive parallel hooks of one phase run at once (each waits for the
other through FIFOs, which only hooks running together get past), their frames written in
declaration order, whole; a parallel hook whose effect in force may be above advise is a
config error naming its pointer."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from operator_day import HEADER, hook_frames, mcpx

#: Opens `fifo1` to write: that blocks until `second` opens it to read. Then reads `fifo2`
#: to its end (when `second` exits), then takes `lock`, which `second` holds for its whole
#: life: it finishes after `second` has exited, whatever the scheduler does.
FIRST = """
import fcntl, json, sys
fifo1, fifo2, lock = sys.argv[1:]
with open(fifo1, "w") as f:
    f.write("hello")
with open(fifo2) as f:
    got = f.read()
with open(lock, "a") as held:
    fcntl.flock(held, fcntl.LOCK_EX)
print(json.dumps({"advise": "first heard " + got}))
"""
SECOND = """
import fcntl, json, sys
fifo1, fifo2, lock = sys.argv[1:]
held = open(lock, "a")
fcntl.flock(held, fcntl.LOCK_EX)
with open(fifo1) as f:
    got = f.read()
with open(fifo2, "w") as f:
    f.write("back")
print(json.dumps({"advise": "second heard " + got}))
"""


def hook(name: str, code: str, where: Path, *, parallel: bool, **keys: object) -> str:
    argv = [sys.executable, "-c", code, str(where / "f1"), str(where / "f2"), str(where / "lk")]
    lines = [
        "[[hooks]]",
        f'name = "{name}"',
        'on = "script"',
        'phase = "before"',
        f"run = {json.dumps(argv)}",
        "timeoutMs = 3000",
        "killGraceMs = 100",
        f"parallel = {json.dumps(parallel)}",
    ] + [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def fifos(readable_tmp: Path) -> Path:
    os.mkfifo(readable_tmp / "f1")
    os.mkfifo(readable_tmp / "f2")
    return readable_tmp


def run(where: Path, config: str):  # type: ignore[no-untyped-def]
    (where / "hooks.toml").write_text(HEADER + config)
    return mcpx(
        "exec", "--json", "--config", "hooks.toml", "--", "true", cwd=where, home=where / "home"
    )


def test_parallel_hooks_run_at_once_frames_in_declaration_order(fifos: Path) -> None:
    config = hook("first", FIRST, fifos, parallel=True) + hook(
        "second", SECOND, fifos, parallel=True
    )
    out = run(fifos, config)
    assert out.returncode == 0, out.stdout + out.stderr
    frames = hook_frames(out)
    assert [f["name"] for f in frames] == ["first", "second"]
    assert [f["status"] for f in frames] == ["ok", "ok"]
    assert frames[0]["advice"] == ["first heard back"]
    assert frames[1]["advice"] == ["second heard hello"]
    assert frames[0]["seq"] + 1 == frames[1]["seq"]  # whole, one after the other


def test_without_parallel_the_same_hooks_cannot_meet(fifos: Path) -> None:
    config = hook("first", FIRST, fifos, parallel=False) + hook(
        "second", SECOND, fifos, parallel=False
    )
    frames = hook_frames(run(fifos, config))
    assert frames[0]["name"] == "first"
    assert frames[0]["status"] == "timeout"  # it waited for a reader that never came


def test_only_consecutive_parallel_hooks_run_together(fifos: Path) -> None:
    between = '[[hooks]]\nname = "between"\non = "script"\nphase = "before"\nrun = ["true"]\n'
    config = (
        hook("first", FIRST, fifos, parallel=True)
        + between
        + hook("second", SECOND, fifos, parallel=True)
    )
    frames = hook_frames(run(fifos, config))
    assert [f["name"] for f in frames][:2] == ["first", "between"]
    assert frames[0]["status"] == "timeout"


def test_a_parallel_hook_above_advise_is_a_config_error(tmp_path: Path) -> None:
    config = hook("gate", FIRST, tmp_path, parallel=True, effect="ask")
    (tmp_path / "c.toml").write_text(HEADER + config)
    out = mcpx("validate", "c.toml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 2
    said = out.stdout + out.stderr
    assert "/hooks/0/parallel" in said
    assert 'parallel = true needs an effect in force of at most "advise"' in said
    assert 'found "ask"' in said
    # A ceiling that clamps it to advise makes it legal: the effect in force is what counts.
    (tmp_path / "c.toml").write_text('[autonomy]\nmax = "advise"\n' + HEADER + config)
    out = mcpx("validate", "c.toml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 0, out.stdout + out.stderr
    # suffix hooks are clamped to advise by their phase.
    suffix = config.replace('phase = "before"', 'phase = "suffix"')
    (tmp_path / "c.toml").write_text(HEADER + suffix)
    assert mcpx("validate", "c.toml", cwd=tmp_path, home=tmp_path / "home").returncode == 0
