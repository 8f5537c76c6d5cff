"""`mcpx-hooks prompts list|show|promote|clear` through the real command line, on real cache
files and real config files: what is kept byte for byte, and what is refused untouched."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.cli.main import main
from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.models.promptcache import CachedAnswer, PromptCache, cache_key

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ARGV = ["sh", "-c", "command -v jq >/dev/null || echo 'jq is missing'"]
TEAM = {"team": "platform"}
DEPS_PROMPT = "Make sure the tools this job needs exist.\nSay which are missing.\n"

#: A project file: the prompt hook sits between two others, with comments everywhere.
PROJECT = f'''# The project's hooks.   (a comment on top)
[autonomy]
max = "run"   # a ceiling, with a comment

[[hooks]]
name = "first"   # stays as it is
on = "script"
phase = "onSuccess"
run = ["true"]

[[hooks]]
# the deps hook, asked of a model
name = "deps"
on = "script"
phase = "before"
prompt = """{DEPS_PROMPT}"""   # the instruction
model = "default"
effect = "run"        # may run a command
failure = "closed"
vars = {{ team = "platform" }}
timeoutMs = 20000
enabled = true

[hooks.when]
argv = ["*pytest*"]   # only around test runs

[[hooks]]
name = "last"
on = "script"
phase = "suffix"
run = ["echo", "done"]
# a comment at the end
'''


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PromptCache:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    opened = PromptCache.open(os.environ)
    assert opened is not None
    return opened


def cached(
    cache: PromptCache,
    file: Path | None,
    *,
    hook: str = "deps",
    pointer: str | None = "/hooks/1",
    prompt: str = DEPS_PROMPT,
    answer: dict[str, Any] | None = None,
    created: float = 1000.0,
) -> str:
    key = cache_key(hook, prompt, "run", "default", "qwen2.5-coder:7b", TEAM)
    entry = CachedAnswer(
        hook=hook,
        file=None if file is None else str(file),
        pointer=pointer,
        prompt=prompt,
        effect="run",
        model={"name": "default", "provider": "openai", "model": "qwen2.5-coder:7b"},
        answer=answer or {"run": {"argv": ARGV}},
        created=created,
    )
    cache.put(key, entry)
    return key


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["prompts", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def project(tmp_path: Path, text: str = PROJECT, name: str = ".mcpx-hooks.toml") -> Path:
    path = tmp_path / "proj" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def hooks_of(path: Path) -> dict[str, Any]:
    config = load_config([path], cwd=path.parent, environ={}, discover=False)
    return {h.name: h for h in config.hooks}


def test_list_show_and_clear(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "list") == (0, f"no cached prompt answers ({cache.directory})\n", "")
    key = cached(cache, project(tmp_path))
    proposed = cached(
        cache, None, hook="tidy", pointer=None, prompt="tidy @result", created=2000.0,
        answer={"propose": {"value": {"rows": [1, 2]}, "note": "sorted"}},
    )  # fmt: skip
    code, out, err = cli(capsys, "list")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(proposed[:12]) and "tidy" in lines[0]
    assert lines[0].endswith('propose: {"rows": [1, 2]}')
    assert lines[1].startswith(key[:12]) and "deps" in lines[1]
    assert lines[1].endswith("run: " + shlex.join(ARGV))
    code, out, _ = cli(capsys, "list", "--json")
    rows = json.loads(out)
    assert [r["key"] for r in rows] == [proposed, key]
    assert rows[1]["answer"] == {"run": {"argv": ARGV}} and rows[1]["pointer"] == "/hooks/1"
    code, out, _ = cli(capsys, "show", key[:6])
    assert code == 0
    assert f"key       {key}" in out and "declared  " in out and "/hooks/1" in out
    assert "  Make sure the tools this job needs exist." in out
    assert f"promote it: mcpx-hooks prompts promote {key[:12]}" in out
    code, out, _ = cli(capsys, "show", key, "--json")
    assert json.loads(out)["hook"] == "deps"
    assert cli(capsys, "clear") == (0, f"removed 2 cached prompt answers ({cache.directory})\n", "")
    assert cache.entries() == []


def test_unknown_short_and_ambiguous_keys_are_usage_errors(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "show", "f" * 64)
    assert code == 2 and "no cached answer" in err and "prompts list shows them" in err
    code, _, err = cli(capsys, "promote", "abc")
    assert code == 2 and "expected a key" in err
    code, _, err = cli(capsys, "show", "not-hex!")
    assert code == 2 and "expected a key" in err
    code, _, err = cli(capsys, "show", "a\x1bb")  # escaped once, as every other name is
    assert code == 2 and err.endswith("found 'a\\x1bb'\n"), err
    seen: dict[str, str] = {}
    for i in range(100_000):  # two hooks whose keys share their first four digits
        k = cache_key(f"h{i}", DEPS_PROMPT, "run", "default", "qwen2.5-coder:7b", TEAM)
        if k[:4] in seen:
            break
        seen[k[:4]] = f"h{i}"
    prefix = k[:4]
    cached(cache, None, hook=f"h{i}", pointer=None)
    cached(cache, None, hook=seen[prefix], pointer=None)
    code, _, err = cli(capsys, "show", prefix)
    assert code == 2 and f"{prefix} is the start of" in err


def test_a_hostile_entry_is_left_out_and_said(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = cached(cache, project(tmp_path))
    bad = "ab" * 32
    cache.path(bad).write_text('{"version": 1, "key": "' + bad + '", "answer": "\u001b[2J"}')
    code, out, err = cli(capsys, "list")
    assert code == 0 and out.startswith(key[:12]) and bad[:12] not in out
    assert "1 cache file in" in err and "prompts clear removes them" in err
    code, _, err = cli(capsys, "show", bad)
    assert code == 2 and "cannot be read" in err
    # Control characters in an entry never reach the terminal as themselves.
    cached(cache, None, hook="esc\u001b]0;pwned\u0007", pointer=None,
           answer={"run": {"argv": ["echo", "\u001b[31mred\r"]}})  # fmt: skip
    code, out, _ = cli(capsys, "list")
    assert "\u001b" not in out and "\r" not in out and "\\x1b[31mred\\r" in out
    assert cli(capsys, "clear")[1].startswith("removed 3 cached prompt answers")


def test_promote_rewrites_the_table_and_keeps_every_other_byte(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path)
    key = cached(cache, path)
    code, out, err = cli(capsys, "promote", key[:8])
    assert (code, err) == (0, "")
    assert f"promoted deps in {path} (/hooks/1): a run hook now: sh -c" in out
    assert f"the file's SHA-256 changed; trust it again: mcpx-hooks trust {path}" in out
    text = path.read_text()
    run = 'run = ["sh", "-c", "command -v jq >/dev/null || echo \'jq is missing\'"]\n'
    expected = (
        PROJECT.replace(f'prompt = """{DEPS_PROMPT}"""   # the instruction\n', run)
        .replace('model = "default"\n', "")
        .replace('vars = { team = "platform" }\n', "")
        # A gate (failure = "closed") stays a gate: `ask`, not `run`; its comment kept.
        .replace('effect = "run"        #', 'effect = "ask"        #')
    )
    assert text == expected  # every other byte, comments and order, as it was
    assert validate_files([path]) == []
    deps = hooks_of(path)["deps"]
    assert deps.action == "run" and list(deps.target) == ARGV
    assert deps.timeout_ms == 20000 and deps.failure.value == "closed"
    assert dict(deps.when) == {"argv": ["*pytest*"]} and deps.effect.word == "ask"
    assert list(hooks_of(path)) == ["first", "deps", "last"]
    # Promoting again finds a run hook, not a prompt hook: refused, the file as it is.
    code, _, err = cli(capsys, "promote", key)
    assert code == 2 and "is not a prompt hook (promoted already?)" in err
    assert path.read_text() == text


def test_promote_of_a_hook_with_sub_tables_and_no_name(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "# top\n[[hooks]]\non = 'script'\nphase = 'onError'\nprompt = 'explain @error'\n"
        "effect = 'run'\n\n[hooks.vars]\nteam = 'x'\n\n[hooks.when]\ncwd = ['/*']\n"
    )
    path = project(tmp_path, text)
    key = cached(cache, path, hook="script.onError.0", pointer="/hooks/0",
                 prompt="explain @error")  # fmt: skip
    assert cli(capsys, "promote", key)[0] == 0
    assert path.read_text() == (
        "# top\n[[hooks]]\non = 'script'\nphase = 'onError'\n"
        f"run = {json.dumps(ARGV)}\neffect = \"advise\"\n\n[hooks.when]\ncwd = ['/*']\n"
    )
    assert validate_files([path]) == []


def test_promote_in_an_inline_list_of_hooks(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "# keep me\nhooks = [\n  {name = 'deps', on = 'script', phase = 'before',"
        " prompt = 'check', effect = 'run'},\n]\n"
    )
    path = project(tmp_path, text)
    key = cached(cache, path, pointer="/hooks/0", prompt="check")
    assert cli(capsys, "promote", key)[0] == 0
    written = path.read_text()
    assert written.startswith("# keep me\nhooks = [\n") and "prompt" not in written
    assert list(hooks_of(path)["deps"].target) == ARGV


def test_promote_in_a_json_file_keeps_its_key_order(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "autonomy": {"max": "run"},
        "hooks": [
            {"phase": "before", "name": "deps", "on": "script", "prompt": DEPS_PROMPT,
             "vars": {"team": "platform"}, "effect": "run", "timeoutMs": 20000},
        ],
    }  # fmt: skip
    path = project(tmp_path, json.dumps(doc, indent=4), name=".mcpx-hooks.json")
    key = cached(cache, path, pointer="/hooks/0")
    assert cli(capsys, "promote", key)[0] == 0
    written = json.loads(path.read_text())
    assert list(written) == ["autonomy", "hooks"]
    assert list(written["hooks"][0]) == ["phase", "name", "on", "run", "effect", "timeoutMs"]
    assert written["hooks"][0]["run"] == ARGV
    assert written["hooks"][0]["effect"] == "advise"  # its output is advice, not a command
    assert path.read_text().startswith('{\n    "autonomy"')


def test_promote_to_another_file_appends_and_leaves_the_prompt_hook(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path)
    key = cached(cache, path)
    target = tmp_path / "ci.toml"
    target.write_text('# the CI hooks\n[[hooks]]\nname = "lint"\non = "script"\n'
                      'phase = "before"\nrun = ["ruff", "check"]\n')  # fmt: skip
    before = target.read_text()
    code, out, err = cli(capsys, "promote", key, "--to", str(target))
    assert (code, err) == (0, "")
    assert f"appended run hook deps to {target} at /hooks/1" in out
    assert f"the prompt hook in {path} is left as it was" in out
    assert "now resolves in" in out and "trust it again" not in out
    assert path.read_text() == PROJECT
    after = target.read_text()
    assert after.startswith(before)
    hooks = hooks_of(target)
    assert list(hooks) == ["lint", "deps"]
    assert list(hooks["deps"].target) == ARGV and hooks["deps"].when is not None
    # A new file is written from nothing; a name already there would not validate.
    fresh = tmp_path / "proj" / "new.json"
    assert cli(capsys, "promote", key, "--to", str(fresh))[0] == 0
    assert json.loads(fresh.read_text())["hooks"][0]["name"] == "deps"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask  # as an editor makes one
    target.chmod(0o640)
    code, _, err = cli(capsys, "promote", key, "--to", str(target))
    assert code == 2 and "would not validate" in err and "deps" in err
    assert target.read_text() == after and stat.S_IMODE(target.stat().st_mode) == 0o640
    path.chmod(0o640)
    assert cli(capsys, "promote", key)[0] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # a file rewritten keeps its mode


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda t: t.replace("Say which are missing.", "Say nothing."), "the file changed since"),
        (lambda t: t.replace('name = "deps"', 'name = "renamed"'), "no hook named 'deps'"),
        (lambda t: t.replace("[autonomy]", "[autonomy"), "cannot be read as config"),
    ],
    ids=["prompt-changed", "hook-gone", "not-toml"],
)
def test_a_file_changed_since_is_refused_untouched(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, said: str
) -> None:
    path = project(tmp_path, change(PROJECT))
    before = path.read_bytes()
    code, _, err = cli(capsys, "promote", cached(cache, path))
    assert code == 2 and said in err
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_what_cannot_be_promoted_is_refused_clearly(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path)
    proposed = cached(cache, path, answer={"propose": {"value": [1]}}, hook="tidy")
    code, _, err = cli(capsys, "promote", proposed)
    assert code == 2 and "a proposed value, not a command" in err
    loose = cached(cache, None, hook="cmdline", pointer=None)
    code, _, err = cli(capsys, "promote", loose)
    assert code == 2 and "was not declared in a file" in err
    notes = tmp_path / "notes.txt"  # an entry that names a file that is not a config file
    notes.write_text("dear diary\n")
    code, _, err = cli(capsys, "promote", cached(cache, notes, hook="diary"))
    assert code == 2 and "expected a .toml or .json config file" in err
    assert notes.read_text() == "dear diary\n" and path.read_text() == PROJECT


def test_no_state_directory_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr("pwd.getpwuid", lambda uid: {}[uid])  # and no home by the passwd
    code, _, err = cli(capsys, "list")
    assert code == 2 and "no state directory" in err


def test_a_state_directory_in_the_checkout_is_said_as_such(tmp_path: Path) -> None:
    # XDG_STATE_HOME is set: "no state directory: set XDG_STATE_HOME or HOME" named the
    # wrong cause, and setting it again changed nothing.
    (tmp_path / ".git").mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / ".state")}
    done = subprocess.run(
        [*CLI, "prompts", "list"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no state directory" not in done.stderr
    assert f"lies inside the git checkout {tmp_path}," in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


def test_the_installed_command_lists_and_promotes(cache: PromptCache, tmp_path: Path) -> None:
    path = project(tmp_path)
    key = cached(cache, path)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    listed = subprocess.run(
        [*CLI, "prompts", "list"], env=env, capture_output=True, text=True, check=False
    )
    assert (listed.returncode, listed.stderr) == (0, "") and key[:12] in listed.stdout
    done = subprocess.run(
        [*CLI, "prompts", "promote", key], env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert list(hooks_of(path)["deps"].target) == ARGV


def test_the_demo_skips_its_prompt_hook_without_a_model_and_says_how_to_add_one(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_DEMO_")}
    env["MCPX_HOOKS_NO_DISCOVERY"] = "1"
    done = subprocess.run(
        [*CLI, "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "hook summarise (script.onSuccess, prompt" in done.stdout
    assert "skipped" in done.stdout.split("hook summarise", 1)[1].splitlines()[0]
    assert "the prompt hook summarise was skipped: no model configured" in done.stdout
    assert "MCPX_HOOKS_DEMO_MODEL_URL=http://127.0.0.1:8080/v1 mcpx-hooks demo" in done.stdout


def test_the_demo_model_layer_names_the_server_given() -> None:
    from mcpx_hooks.supervisor.cli.demo import DEFAULT_MODEL, model_layer

    assert model_layer({}) is None
    assert model_layer({"MCPX_HOOKS_DEMO_MODEL_URL": "  "}) is None
    url = 'http://127.0.0.1:8080/v1?q="x"'
    layer = model_layer({"MCPX_HOOKS_DEMO_MODEL_URL": url})
    assert layer is not None
    assert tomllib.loads(layer) == {
        "models": {"default": {"provider": "openai", "url": url, "model": DEFAULT_MODEL}}
    }
    layer = model_layer({"MCPX_HOOKS_DEMO_MODEL_URL": url, "MCPX_HOOKS_DEMO_MODEL": "llama3"})
    assert layer is not None
    assert tomllib.loads(layer)["models"]["default"]["model"] == "llama3"


def test_promote_refuses_what_the_target_cannot_hold(
    cache: PromptCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {"hooks": [{"name": "deps", "on": "script", "phase": "before", "prompt": "check",
                      "effect": "run", "cwd": None}]}  # fmt: skip
    path = project(tmp_path, json.dumps(doc), name=".mcpx-hooks.json")
    key = cached(cache, path, pointer="/hooks/0", prompt="check")
    notes = tmp_path / "notes.txt"
    code, _, err = cli(capsys, "promote", key, "--to", str(notes))
    assert code == 2 and "expected a .toml or .json config file" in err and not notes.exists()
    toml = tmp_path / "ci.toml"  # TOML has no null
    code, _, err = cli(capsys, "promote", key, "--to", str(toml))
    assert code == 2 and "cannot be written in this file's format" in err
    assert not toml.exists() and json.loads(path.read_text()) == doc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj", "state"]
