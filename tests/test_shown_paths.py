"""A path the command line prints, where a name may hold a control character (a home, a
project directory, a file given to `init --from` or `prompts promote --to`): written in
bash's `$'…'` quoting (`core/places.shown_file`), never raw (where ESC moves the cursor) nor
in Python's escapes (which no shell reads back)."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest
from test_prompts_cli import PROJECT, cache, cached, cli

from mcpx_hooks.supervisor.models.promptcache import PromptCache

__all__ = ["cache"]  # (the fixture, used here)


def test_prompts_promote_names_its_files_as_bash_quotes_them(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "pro\x1bj"
    odd.mkdir()
    path = odd / ".mcpx-hooks.toml"
    path.write_text(PROJECT)
    key = cached(cache, path)
    target = tmp_path / "ci\nhooks.toml"
    code, out, err = cli(capsys, "promote", key, "--to", str(target))
    assert (code, err) == (0, "")
    assert f"appended run hook deps to $'{tmp_path}/ci\\nhooks.toml' at /hooks/0" in out
    assert f"the prompt hook in $'{tmp_path}/pro\\x1bj/.mcpx-hooks.toml' is left" in out
    assert f"now resolves in {tmp_path}\n" in out
    code, out, err = cli(capsys, "promote", key)
    assert (code, err) == (0, "")
    assert f"promoted deps in $'{tmp_path}/pro\\x1bj/.mcpx-hooks.toml' (/hooks/1)" in out
    assert f"trust it again: mcpx-hooks trust $'{tmp_path}/pro\\x1bj/.mcpx-hooks.toml'" in out
    assert "\x1b" not in out
    code, out, err = cli(capsys, "promote", key)
    assert code == 2 and f"$'{tmp_path}/pro\\x1bj/.mcpx-hooks.toml':/hooks/1: " in err


def test_init_from_names_its_source_as_bash_quotes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mcpx_hooks.supervisor.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["init", "--from", "nope\x1b.yaml"]) == 2
    assert capsys.readouterr().err == (
        "mcpx-hooks init: $'nope\\x1b.yaml': cannot read it: No such file or directory\n"
    )
    (tmp_path / "pre-commit\n.yaml").write_text(
        "repos:\n- repo: local\n  hooks:\n  - id: x\n    name: x\n    entry: echo hi\n"
        "    language: system\n"
    )
    assert main(["init", "--from", "pre-commit\n.yaml"]) == 0
    out = capsys.readouterr().out
    assert "wrote .mcpx-hooks.toml: 1 hook(s) from $'pre-commit\\n.yaml' (pre-commit)" in out
    head = (tmp_path / ".mcpx-hooks.toml").read_text().splitlines()[0]
    assert head == "# mcpx-hooks: converted by `mcpx-hooks init --from $'pre-commit\\n.yaml'`" + (
        " (pre-commit)."
    )


def test_doctor_and_the_history_name_paths_as_bash_quotes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpx_hooks.supervisor.cli.doctorgrants import grant_lines
    from mcpx_hooks.supervisor.history import HistoryFault
    from mcpx_hooks.supervisor.history.store import History

    home = tmp_path / "h\x1bome"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("MCPX_HOOKS_NO_DISCOVERY", "1")
    lines = grant_lines(argparse.Namespace(config=[], trust_project=False))
    assert f"  $'{tmp_path}/h\\x1bome/.ssh'" in lines
    assert all("$'" in line for line in lines if "h\\x1bome" in line)
    assert not any("\x1b" in line for line in lines)
    junk = home / "history.db"
    junk.write_bytes(b"not a database, not at all, no, not one page of it" * 100)
    with pytest.raises(HistoryFault) as fault:
        History.open(junk)
    assert f"opening the run history $'{tmp_path}/h\\x1bome/history.db'" in str(fault.value)


def test_a_huge_key_is_shown_by_its_start_and_length(tmp_path: Path) -> None:
    # A 2 MB unknown key was printed whole twice (in the pointer and in the message): 4 MB
    # of one line, for a key found by what it starts with.
    from mcpx_hooks.supervisor.config.loading import validate_files

    key = "k" * 2_000_000
    start = "k" * 57 + "..."
    unknown = tmp_path / "big.json"
    unknown.write_text(f'{{"{key}": 1, "sandbox": {{"{key}": 1}}}}')
    twice = tmp_path / "twice.json"
    twice.write_text(f'{{"{key}": 1, "{key}": 2}}')
    toml = tmp_path / "big.toml"
    toml.write_text(f"[sandbox]\n{key} = 1\n")
    said = [str(p) for p in validate_files([str(unknown), str(twice), str(toml)])]
    whole = f"2000000 characters, sha256 {hashlib.sha256(key.encode()).hexdigest()[:16]}"
    at = f"{start}({whole})"
    said_key = f'"{start}" ({whole})'
    assert said == [
        f"{unknown}:/{at}: unknown key {said_key}; expected one of: $schema, autonomy, defaults,"
        " limits, runs, history, observe, service, sandbox, script, when, models, servers,"
        " mcp, hooks",
        f"{unknown}:/sandbox/{at}: unknown key {said_key}; expected one of: read, write, deny",
        f"{twice}:/{at}: the key {said_key} is given more than once",
        f"{toml}:/sandbox/{at}: unknown key {said_key}; expected one of: read, write, deny",
    ]
    # Two keys alike in their first 57 characters and their length were shown alike: one
    # pointer, one message, and the second problem was taken for the first and never said.
    alike = [("k" * 57 + c + "x" * 300) for c in "AB"]
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps({"sandbox": dict.fromkeys(alike, 1)}))
    said = [str(p) for p in validate_files([str(pair)])]
    assert len(said) == 2 and said[0] != said[1], said
    for key, line in zip(sorted(alike, key=digest), said, strict=True):
        assert f"(358 characters, sha256 {digest(key)})" in line


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]
