"""Who may declare what: trust of project files by SHA-256 (the pure rules, the state file,
discovery's gate), ceilings that only fall, locked hooks. The command line and real runs
are in tests/test_trust_cli.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.config import statefiles, trust, truststore
from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.config.trust import (
    TrustEntry,
    TrustState,
    TrustStateError,
    Verdict,
    decide,
    digest,
    parse_state,
    state_text,
)
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.errors import ConfigError, Problem
from mcpx_hooks.supervisor.core.hooks import Config, Profile, at_least_as_strict

SHA = "a" * 64


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def hook(name: str, *, extra: str = "") -> str:
    return f'[[hooks]]\nname = "{name}"\non = "script"\nphase = "before"\nrun = ["{name}"]\n{extra}'


# --- the state document --------------------------------------------------------------------


def test_state_round_trips_and_decides() -> None:
    state = TrustState().with_file("/p/.mcpx-hooks.toml", TrustEntry(SHA, "2026-01-01T00:00Z"))
    again = parse_state(state_text(state).encode())
    assert again == state
    assert decide(again, "/p/.mcpx-hooks.toml", SHA) is Verdict.TRUSTED
    assert decide(again, "/p/.mcpx-hooks.toml", "b" * 64) is Verdict.CHANGED
    assert decide(again, "/q/.mcpx-hooks.toml", SHA) is Verdict.UNTRUSTED
    assert again.without("/p/.mcpx-hooks.toml") == TrustState()
    assert digest(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "invalid JSON"),
        (b"\xff", "invalid JSON"),
        (b"[]", "expected a JSON object, found an array"),
        (b'{"version": true, "files": {}}', "expected version 1, found true"),
        (b'{"version": 2}', "expected version 1, found 2"),
        (b'{"version": 1, "extra": 1}', "unknown key 'extra'"),
        (b'{"version": 1, "files": []}', "/files: expected an object"),
        (b'{"version": 1, "files": {"rel": {"sha256": "x", "trustedAt": ""}}}', "absolute"),
        (b'{"version": 1, "files": {"/a": {"sha256": "x", "trustedAt": ""}}}', "64 lowercase"),
        (
            b'{"version": 1, "files": {"/a": {"sha256": "' + b"A" * 64 + b'", "trustedAt": ""}}}',
            "64 lowercase",
        ),
        (
            b'{"version": 1, "files": {"/a": {"sha256": "' + b"a" * 64 + b'", "trustedAt": 1}}}',
            "/files//a/trustedAt: expected a string",
        ),
        (b'{"version": 1, "files": {"/a": {"sha256": "' + b"a" * 64 + b'"}}}', "sha256 and"),
        (b"[" * 10_000 + b"]" * 10_000, "nested deeper"),
        (b" " * (trust.MAX_STATE_BYTES + 1), "larger than"),
    ],
)
def test_a_state_that_cannot_be_believed_is_refused_whole(data: bytes, why: str) -> None:
    with pytest.raises(TrustStateError, match=None) as info:
        parse_state(data)
    assert why in str(info.value)


def test_trust_all_takes_one_word_and_says_any_other() -> None:
    assert trust.trust_all({}, False) == (False, None)
    assert trust.trust_all({}, True) == (True, None)
    assert trust.trust_all({"MCPX_HOOKS_TRUST": "all"}, False) == (True, None)
    trusted, note = trust.trust_all({"MCPX_HOOKS_TRUST": "yes"}, False)
    assert not trusted and note is not None and "'yes' means nothing" in note


# --- the state file ------------------------------------------------------------------------


def test_state_path_follows_xdg_then_home(monkeypatch: pytest.MonkeyPatch) -> None:
    assert statefiles.state_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path(
        "/s/mcpx-hooks/trust.json"
    )
    assert statefiles.state_path({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.local/state/mcpx-hooks/trust.json"
    )
    monkeypatch.setattr("pwd.getpwuid", lambda uid: {}[uid])  # no home by the passwd either
    assert statefiles.state_path({}) is None


def test_the_state_is_written_atomically_0600(tmp_path: Path) -> None:
    path = tmp_path / "state" / "mcpx-hooks" / "trust.json"
    with truststore.locked_state(path) as state:
        assert state == TrustState()
        truststore.save_state(path, state.with_file("/p/x.toml", TrustEntry(SHA, "t")))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # No temporary file is left beside it; the lock file stays.
    assert sorted(p.name for p in path.parent.iterdir()) == ["trust.json", "trust.json.lock"]
    assert truststore.load_state(path) == (
        TrustState({"/p/x.toml": TrustEntry(SHA, "t")}),
        None,
    )


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "dangling", "others", "junk"])
def test_a_hostile_state_file_trusts_nothing_and_says_why(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "trust.json"
    if kind == "fifo":
        os.mkfifo(path)  # a read would block: refused before it
    elif kind == "directory":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "gone")
    else:
        path.write_text(state_text(TrustState({"/p/x.toml": TrustEntry(SHA, "t")})))
        if kind == "others":
            path.chmod(0o666)
        else:
            path.write_text("{not json")
    state, why = truststore.load_state(path)
    assert state == TrustState()
    assert why is not None and str(path) in why and "nothing is trusted" in why
    # A command that writes the state never overwrites what it could not read.
    if kind != "dangling":
        with pytest.raises(statefiles.StateError), truststore.locked_state(path):
            pass


def test_trust_key_resolves_the_directory_not_the_file(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (real / ".mcpx-hooks.toml").symlink_to(tmp_path / "elsewhere.toml")
    key = truststore.trust_key(tmp_path / "link" / ".mcpx-hooks.toml")
    assert key == str(real / ".mcpx-hooks.toml")


# --- discovery's gate ----------------------------------------------------------------------


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """A project file in a working directory; the state and etc directories of a test."""
    local = write(tmp_path / "w" / ".mcpx-hooks.toml", hook("local"))
    environ = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path / "home")}
    return local, environ, tmp_path / "etc"


def _trust(local: Path, environ: dict[str, str]) -> None:
    path = statefiles.state_path(environ)
    assert path is not None
    with truststore.locked_state(path) as state:
        entry = TrustEntry(digest(local.read_bytes()), "t")
        truststore.save_state(path, state.with_file(truststore.trust_key(local), entry))


def test_a_project_file_applies_only_once_trusted(chain: tuple[Path, dict[str, str], Path]) -> None:
    local, environ, etc = chain
    config = load_config(cwd=local.parent, environ=environ, etc_dir=etc)
    assert config.hooks == ()
    assert [(s.file, s.reason) for s in config.skipped] == [(str(local), "not trusted")]
    assert config.skipped[0].trust_command == f"mcpx-hooks trust {local}"
    assert config.warnings == (trust.skip_message(str(local), Verdict.UNTRUSTED),)
    assert "not trusted" in config.warnings[0] and "MCPX_HOOKS_TRUST=all" in config.warnings[0]

    _trust(local, environ)
    config = load_config(cwd=local.parent, environ=environ, etc_dir=etc)
    assert [h.name for h in config.hooks] == ["local"]
    assert config.skipped == () and config.warnings == ()
    assert config.pinned == {str(local): digest(local.read_bytes())}

    local.write_text(hook("local") + "# changed\n")
    config = load_config(cwd=local.parent, environ=environ, etc_dir=etc)
    assert config.hooks == ()
    assert config.skipped[0].reason == Verdict.CHANGED.value
    assert "changed since it was trusted" in config.warnings[0]


def test_trusting_for_one_command(chain: tuple[Path, dict[str, str], Path]) -> None:
    local, environ, etc = chain
    for env, flag in (({**environ, "MCPX_HOOKS_TRUST": "all"}, False), (environ, True)):
        config = load_config(cwd=local.parent, environ=env, etc_dir=etc, trust_project=flag)
        assert [h.name for h in config.hooks] == ["local"]
        assert config.warnings == ()
    # A project file named with --config is trusted, and applies once, at its place.
    config = load_config([".mcpx-hooks.toml"], cwd=local.parent, environ=environ, etc_dir=etc)
    assert [h.name for h in config.hooks] == ["local"] and config.skipped == ()


def test_files_in_trusted_places_need_no_trust(chain: tuple[Path, dict[str, str], Path]) -> None:
    _, environ, etc = chain
    write(etc / "config.toml", hook("etc"))
    inside = write(etc / "sub" / ".mcpx-hooks.toml", "[[hooks]]\ninherit = true\n" + hook("in"))
    config = load_config(cwd=inside.parent, environ=environ, etc_dir=etc)
    assert [h.name for h in config.hooks] == ["etc", "in"]


def test_a_corrupt_state_is_said_with_each_file_skipped(
    chain: tuple[Path, dict[str, str], Path],
) -> None:
    local, environ, etc = chain
    state = statefiles.state_path(environ)
    assert state is not None
    write(state, "garbage")
    config = load_config(cwd=local.parent, environ=environ, etc_dir=etc)
    assert config.hooks == ()
    assert "is not valid (invalid JSON" in config.warnings[0]
    assert config.warnings[1].startswith(f"skipped {local}")


def test_a_layered_again_file_applies_only_while_pinned(tmp_path: Path) -> None:
    c = write(tmp_path / "c.toml", hook("c"))
    pinned = {str(c): digest(c.read_bytes())}
    config = load_config([str(c)], cwd=tmp_path, environ={}, discover=False, pinned=pinned)
    assert [h.name for h in config.hooks] == ["c"]
    c.write_text(hook("other"))
    config = load_config([str(c)], cwd=tmp_path, environ={}, discover=False, pinned=pinned)
    assert config.hooks == ()
    assert "changed since it was trusted and applied" in config.warnings[0]


# --- ceilings ------------------------------------------------------------------------------


def layered(tmp_path: Path, far: str, near: str) -> tuple[Config, Path, Path]:
    a = write(tmp_path / "far.toml", far)
    b = write(tmp_path / "near.toml", near)
    return load_config([a, b], cwd=tmp_path, environ={}, discover=False), a, b


def test_a_nearer_file_may_lower_a_ceiling_never_raise_it(tmp_path: Path) -> None:
    far = '[autonomy]\nmax = "advise"\n[limits]\nmemoryMb = 512\ncpuSeconds = 10\n'
    near = '[autonomy]\nmax = "run"\n[limits]\nmemoryMb = 4096\ncpuSeconds = 5\n'
    config, a, b = layered(tmp_path, far, near)
    assert config.autonomy_max is Effect.ADVISE
    assert config.limits.memory_mb == 512
    assert config.limits.cpu_seconds == 5
    assert config.warnings == (
        f'{b}: autonomy.max "run" would raise the ceiling "advise" set by {a}; a nearer file'
        ' may only lower it, so "advise" stays in force',
        f"{b}: limits.memoryMb 4096 would raise the ceiling 512 set by {a}; a nearer file may"
        " only lower it, so 512 stays in force",
    )
    config, _, _ = layered(tmp_path, '[autonomy]\nmax = "apply"\n', '[autonomy]\nmax = "off"\n')
    assert config.autonomy_max is Effect.OFF
    assert config.warnings == ()


def test_the_lowest_wins_and_the_warning_names_who_set_it(tmp_path: Path) -> None:
    files = [
        write(tmp_path / f"{i}.toml", f'[autonomy]\nmax = "{word}"\n')
        for i, word in enumerate(["apply", "ask", "run"])
    ]
    config = load_config(files, cwd=tmp_path, environ={}, discover=False)
    assert config.autonomy_max is Effect.ASK
    assert len(config.warnings) == 1
    assert f"set by {files[1]}" in config.warnings[0]


def test_a_sandbox_default_only_gets_stricter(tmp_path: Path) -> None:
    assert at_least_as_strict(Profile.STRICT, Profile.WORKSPACE)
    assert not at_least_as_strict(Profile.NET, Profile.WORKSPACE)
    assert not at_least_as_strict(Profile.WORKSPACE, Profile.NET)
    assert at_least_as_strict(Profile.NET, Profile.NONE)
    far = '[defaults]\nsandbox = "workspace"\n[script]\nsandbox = "none"\n'
    near = '[defaults]\nsandbox = "net"\n[script]\nsandbox = "strict"\n'
    config, a, _ = layered(tmp_path, far, near)
    assert config.defaults.sandbox is Profile.WORKSPACE
    assert config.script_sandbox is Profile.STRICT
    (warning,) = config.warnings
    assert f'defaults.sandbox "net" would loosen the ceiling "workspace" set by {a}' in warning
    assert "may only make it stricter" in warning


# --- locked hooks --------------------------------------------------------------------------

LOCKED = hook("gate", extra='locked = true\neffect = "ask"\nfailure = "closed"\n')


def test_a_locked_hook_stays_at_its_place_when_a_nearer_list_drops_it(tmp_path: Path) -> None:
    config, a, _ = layered(tmp_path, hook("first") + LOCKED, hook("mine") + hook("yours"))
    assert [h.name for h in config.hooks] == ["mine", "gate", "yours"]
    gate = config.find("gate")
    assert gate.locked and gate.source.file == str(a)
    # Spliced in, it is where the splice puts it; declared the same, it is itself.
    config, _, _ = layered(tmp_path, LOCKED, hook("mine") + "[[hooks]]\ninherit = true\n")
    assert [h.name for h in config.hooks] == ["mine", "gate"]
    config, _, _ = layered(tmp_path, LOCKED, LOCKED)
    assert config.find("gate").source.file == str(a)


@pytest.mark.parametrize(
    ("nearer", "pointer", "says"),
    [
        (hook("gate", extra="enabled = false\n"), "/hooks/0/enabled", "may not disable it"),
        (hook("gate", extra='effect = "off"\n'), "/hooks/0", "may not redefine it"),
    ],
)
def test_disabling_or_redefining_a_locked_hook_is_refused(
    tmp_path: Path, nearer: str, pointer: str, says: str
) -> None:
    a = write(tmp_path / "far.toml", LOCKED)
    b = write(tmp_path / "near.toml", nearer)
    with pytest.raises(ConfigError) as info:
        load_config([a, b], cwd=tmp_path, environ={}, discover=False)
    (problem,) = info.value.problems
    assert (problem.file, problem.pointer) == (str(b), pointer)
    assert f'hook "gate" is locked by {a}:/hooks/0: a nearer file {says}' in problem.message


def test_a_locked_hook_keeps_the_defaults_where_it_was_declared(tmp_path: Path) -> None:
    far = "[defaults]\ntimeoutMs = 3000\n" + hook("gate", extra="locked = true\n")
    config, _, _ = layered(tmp_path, far, '[defaults]\ntimeoutMs = 1\neffect = "off"\n')
    gate = config.find("gate")
    assert (gate.timeout_ms, gate.effect) == (3000, Effect.ADVISE)


def test_a_locked_hook_needs_a_name(tmp_path: Path) -> None:
    text = '[[hooks]]\non = "script"\nphase = "before"\nrun = ["x"]\nlocked = true\n'
    c = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError) as info:
        load_config([c], cwd=tmp_path, environ={}, discover=False)
    assert info.value.problems[0] == Problem(
        str(c),
        "/hooks/0/locked",
        "expected a name beside locked = true: nearer files name a locked hook to keep it,"
        " and may not redefine that name",
    )


def test_hooks_json_says_locked(tmp_path: Path) -> None:
    from mcpx_hooks.supervisor.core.hooks import hook_json

    config, _, _ = layered(tmp_path, LOCKED, "")
    assert hook_json(config.hooks[0])["locked"] is True
    assert json.dumps(hook_json(config.hooks[0]))


def test_each_layer_costs_what_it_holds_not_what_is_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request's per-call hooks are a layer each, and every layer went over every hook in
    # force (pinning each, putting locked ones back): 5,000 of them took 7 s to admit, the
    # GIL held as long, while `serve` was to answer its other clients.
    from mcpx_hooks.supervisor.config import policy

    seen = {"pinned": 0, "kept": 0}
    pin, keep = policy._pin, policy._keep_locked

    def counted_pin(decl: Any, *args: Any) -> Any:
        seen["pinned"] += 1
        return pin(decl, *args)

    def counted_keep(farther: Any, merged: Any, locked: Any) -> Any:
        seen["kept"] += len(merged)
        return keep(farther, merged, locked)

    monkeypatch.setattr(policy, "_pin", counted_pin)
    monkeypatch.setattr(policy, "_keep_locked", counted_keep)
    a = write(tmp_path / "far.toml", LOCKED + hook("first"))
    per_call = [
        {"name": f"h{i}", "on": "script", "phase": "before", "run": ["true"]} for i in range(400)
    ]
    config = load_config([a], cwd=tmp_path, environ={}, discover=False, per_call_hooks=per_call)
    assert [h.name for h in config.hooks] == ["gate", "first", *(f"h{i}" for i in range(400))]
    assert config.find("gate").locked
    assert seen["pinned"] + seen["kept"] < 10 * 400, seen
