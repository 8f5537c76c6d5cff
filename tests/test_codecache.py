"""The methods attrs writes, compiled once and kept in the state directory
(`config/codecache.py`): found there by the next process, built the same, and a file that
cannot be believed ignored."""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.config import codecache, statefiles

#: A process that installs the cache, builds trio's classes, the project's and one of its own
#: (frozen: attrs writes it a `__hash__` mixing in a salted number), and says what it got.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    from mcpx_hooks.supervisor.config import codecache
    codecache.install(os.environ)
    import attrs, trio
    from mcpx_hooks.supervisor.core import frames, hooks

    @attrs.frozen
    class Point:
        x: int
        y: str = "a"

    salted = hash("<attrs generated hash __main__.Point>")
    print(json.dumps({
        "compiled": codecache.compiled(),
        "hash": hash(Point(1)) == hash((salted, 1, "a")),
        "eq": [Point(1) == Point(1), Point(1) == Point(2)],
        "repr": repr(Point(1)),
        "default": Point(1).y,
        "frozen": hasattr(Point, "__slots__"),
    }))
    codecache.save()
    """
)


def probe(state: Path, **extra: str) -> dict[str, object]:
    env = {**os.environ, "XDG_STATE_HOME": str(state), **extra}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert out.stderr == ""
    result: dict[str, object] = json.loads(out.stdout)
    return result


def cache_file(state: Path) -> Path:
    return state / "mcpx-hooks" / "attrs-code.cache"


def test_the_second_process_compiles_nothing_and_builds_the_same_classes(tmp_path: Path) -> None:
    first = probe(tmp_path)
    assert isinstance(first["compiled"], int) and first["compiled"] > 50  # trio's and ours
    second = probe(tmp_path)
    assert second["compiled"] == 0  # each method found, the salted `__hash__` among them
    expected = {"hash": True, "eq": [True, False], "repr": "Point(x=1, y='a')", "default": "a"}
    for result in (first, second):
        assert {key: result[key] for key in expected} == expected
    path = cache_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_file_others_may_write_is_not_believed_and_is_written_again(tmp_path: Path) -> None:
    probe(tmp_path)
    path = cache_file(tmp_path)
    path.chmod(0o666)
    assert probe(tmp_path)["compiled"] != 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert probe(tmp_path)["compiled"] == 0


def test_a_file_changed_or_cut_short_is_ignored(tmp_path: Path) -> None:
    probe(tmp_path)
    path = cache_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert probe(tmp_path)["compiled"] != 0
    path.write_bytes(path.read_bytes()[: len(data) // 2])
    assert probe(tmp_path)["compiled"] != 0
    assert probe(tmp_path)["compiled"] == 0


def test_without_a_state_directory_classes_are_built_as_attrs_builds_them(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "HOME")}
    homeless = "import pwd\npwd.getpwuid = lambda uid: {}[uid]\n"  # no home by the passwd
    out = subprocess.run(
        [sys.executable, "-c", homeless + PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["hash"] is True
    assert json.loads(out.stdout)["compiled"] == 0  # nothing goes through a cache


def test_a_sealed_payload_of_another_shape_holds_nothing() -> None:
    for payload in (marshal.dumps({"a": 1}), marshal.dumps((("a", "b"),)), b"\x00junk"):
        assert codecache._entries(payload) == {}
    code = compile("x = 1", "<x>", "exec")
    assert codecache._entries(marshal.dumps((("<x>", "x = 1", code),))) == {("<x>", "x = 1"): code}


def test_what_is_kept_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codecache, "MAX_ENTRIES", 3)
    path = tmp_path / "attrs-code.cache"
    old = codecache._Cache(path)
    old.load(0)
    for n in range(3):
        old.code(f"<old {n}>", f"x = {n}", 0)
    old.save()
    new = codecache._Cache(path)
    new.load(0)
    assert len(new.kept) == 3
    new.code("<old 0>", "x = 0", 0)  # found
    assert new.compiled == 0
    for n in range(2):
        new.code(f"<new {n}>", f"y = {n}", 0)
    new.save()
    again = codecache._Cache(path)
    again.load(0)
    # Past the bound, only what the last process used is kept.
    assert set(again.kept) == {("<old 0>", "x = 0"), ("<new 0>", "y = 0"), ("<new 1>", "y = 1")}
    for n in range(10):  # a process that builds classes without end holds a bounded number
        again.code(f"<more {n}>", f"z = {n}", 0)
    assert len(again.used) == 3 and again.compiled == 10


def test_the_salted_number_is_found_only_where_attrs_writes_it() -> None:
    salt = hash("<attrs generated hash m.C>")
    script = f"def __hash__(self):\n    return hash((\n        {salt},\n        self.x,\n    ))"
    source, found = codecache._unsalted(script, "<attrs generated methods m.C>")
    assert found == salt and str(salt) not in source and codecache.SALT in source
    assert codecache._unsalted(script, "<attrs generated methods m.D>") == (script, None)
    assert codecache._unsalted(script, "<string>") == (script, None)


def test_the_state_directory_is_the_trust_states() -> None:
    state = statefiles.state_path({"XDG_STATE_HOME": "/s"})
    assert state is not None and state.parent == Path("/s/mcpx-hooks")


def test_the_command_line_keeps_what_it_compiled_and_writes_nothing_more(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    argv = [
        sys.executable,
        "-m",
        "mcpx_hooks.supervisor",
        "exec",
        "--sandbox",
        "none",
        "--",
        "true",
    ]

    def run() -> None:
        subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, check=True)

    run()
    path = cache_file(tmp_path / "state")
    first = path.stat()
    run()  # everything found: the file is not written again
    again = path.stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
