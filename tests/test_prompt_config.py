"""Prompt hooks in the config: `[models]` built and refused with file and pointer, a prompt
hook's `model`, `vars` and its own default timeout, its placeholders checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.core.errors import ConfigError
from mcpx_hooks.supervisor.core.hooks import hook_json
from mcpx_hooks.supervisor.core.models import (
    DEFAULT_RUN_BUDGET_TOKENS,
    PROMPT_TIMEOUT_MS,
    Model,
    Provider,
)


def problems(tmp_path: Path, doc: dict[str, Any]) -> list[tuple[str, str]]:
    (tmp_path / "c.json").write_text(json.dumps(doc))
    return [(p.pointer, p.message) for p in validate_files([str(tmp_path / "c.json")])]


def load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    (tmp_path / "c.json").write_text(json.dumps(doc))
    return load_config(["c.json"], cwd=tmp_path, environ={}, discover=False)


def prompt(**more: Any) -> dict[str, Any]:
    return {"name": "p", "on": "script", "phase": "onError", "prompt": "@error", **more}


def test_models_are_built_with_their_defaults(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        {
            "models": {
                "default": {"provider": "openai", "url": "http://h:1/v1/", "model": "m"},
                "cli": {"provider": "command", "command": ["llm", "-m", "x"], "sandbox": "none"},
            },
            "hooks": [prompt(), prompt(name="q", model="cli", vars={"team": [1, 2]})],
        },
    )
    models = cfg.models.models
    assert models["default"] == Model("default", Provider.OPENAI, url="http://h:1/v1", model="m")
    assert models["cli"].command == ("llm", "-m", "x") and models["cli"].model_id == "llm"
    assert cfg.models.run_budget_tokens == DEFAULT_RUN_BUDGET_TOKENS
    p, q = cfg.hooks
    assert p.prompt is not None and p.prompt.model is models["default"]
    assert q.prompt is not None and q.prompt.model is models["cli"]
    assert q.prompt.vars == {"team": [1, 2]}
    assert hook_json(q)["model"] == "cli" and hook_json(q)["vars"] == {"team": [1, 2]}


def test_a_prompt_hook_s_own_timeout(tmp_path: Path) -> None:
    run_hook = {"name": "r", "on": "script", "phase": "onError", "run": ["true"]}
    hooks = [prompt(), prompt(name="own", timeoutMs=5000), run_hook]
    cfg = load(tmp_path, {"defaults": {"timeoutMs": 1000}, "hooks": hooks})
    timeouts = {h.name: h.timeout_ms for h in cfg.hooks}
    assert timeouts == {"p": PROMPT_TIMEOUT_MS, "own": 5000, "r": 1000}


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        (
            {"models": {"a": {"provider": "openai", "command": ["x"], "url": "http://h"}}},
            ("/models/a/command", 'unknown key "command"; expected one of: provider, url'),
        ),
        ({"models": {"b": {"provider": "command"}}}, ("/models/b", 'required key "command"')),
        ({"models": {"a": {"provider": "openai"}}}, ("/models/a", 'required key "url"')),
        (
            {"models": {"c": {"provider": "openai", "url": "ftp://h"}}},
            ("/models/c/url", "expected the endpoint's base URL, http://… or https://…"),
        ),
        ({"models": {"runBudgetTokens": -1}}, ("/models/runBudgetTokens", "≥ 0")),
        ({"models": {"x y": {"provider": "openai"}}}, ("/models/x y", "expected a model name")),
        ({"hooks": [prompt(vars={"error": 1})]}, ("/hooks/0/vars/error", "built-in")),
        ({"hooks": [prompt(prompt="@result")]}, ("/hooks/0/prompt", "@result is not available")),
        ({"hooks": [prompt(prompt="@nope")]}, ("/hooks/0/prompt", "@nope is not a placeholder")),
        (
            {"hooks": [{"on": "script", "phase": "before", "run": ["true"], "model": "m"}]},
            ("/hooks/0/model", "a prompt hook's key"),
        ),
        (  # the key is a secret, one variable named: a glob was taken, then never set
            {"models": {"g": {"provider": "openai", "url": "http://h", "apiKeyEnv": "KEY_*"}}},
            ("/models/g/apiKeyEnv", "a variable name, not a glob"),
        ),
    ],
    ids=["other-provider-key", "no-command", "no-url", "ftp", "budget", "name", "var-builtin",
         "phase", "unknown", "not-prompt", "key-glob"],
)  # fmt: skip
def test_what_is_wrong_is_named_with_its_pointer(
    tmp_path: Path, doc: dict[str, Any], want: tuple[str, str]
) -> None:
    found = problems(tmp_path, doc)
    assert any(p == want[0] and want[1] in m for p, m in found), found


def test_a_command_line_hook_s_placeholders_are_checked_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            cwd=tmp_path,
            environ={},
            discover=False,
            command_line_hooks=[json.dumps(prompt(phase="before", prompt="@error"))],
        )
    (problem,) = caught.value.problems
    assert problem.pointer == "/prompt" and "@error is not available at phase before" in (
        problem.message
    )


def test_a_prompt_hook_naming_no_model_table_is_unresolved_not_refused(tmp_path: Path) -> None:
    cfg = load(tmp_path, {"hooks": [prompt(model="elsewhere")]})
    (hook,) = cfg.hooks
    assert hook.prompt is not None and hook.prompt.model is None
    assert hook_json(hook)["modelConfigured"] is False


def test_the_docs_name_every_model_key_and_built_in_placeholder() -> None:
    from mcpx_hooks.supervisor.core.models import BUDGET_KEY, MODEL_KEYS, PROVIDERS
    from mcpx_hooks.supervisor.core.placeholders import BUILTINS

    text = (Path(__file__).resolve().parent.parent / "docs" / "prompt-hooks.md").read_text()
    missing = [k.key for k in MODEL_KEYS if f"{k.key} =" not in text and f"`{k.key}`" not in text]
    missing += [f"@{b}" for b in BUILTINS if f"`{b}`" not in text]
    missing += [p.value for p in PROVIDERS if f'"{p.value}"' not in text]
    assert BUDGET_KEY in text
    assert not missing, missing


@pytest.mark.parametrize("phase", [[], ["before"], {"a": 1}, 3, None])
def test_a_prompt_hook_whose_phase_is_no_string_is_a_problem_not_a_crash(phase: Any) -> None:
    # Schema and rule problems come in one pass, so the rules see what the schema refuses.
    hook = {"on": "script", "phase": phase, "prompt": "@input"}
    with pytest.raises(ConfigError) as caught:
        load_config([], cwd=Path("/tmp"), environ={}, per_call_hooks=[hook], discover=False)
    assert any(p.pointer == "/phase" for p in caught.value.problems)


@pytest.mark.parametrize("suffix", ["/chat/completions", "/chat/completions/"])
def test_a_model_url_that_is_the_full_endpoint_is_refused_with_where(
    tmp_path: Path, suffix: str
) -> None:
    # It was taken, and every call then went to .../chat/completions/chat/completions: 404.
    url = f"http://127.0.0.1:8080/v1{suffix}"
    doc = {"models": {"local": {"provider": "openai", "url": url}}}
    assert problems(tmp_path, doc) == [
        (
            "/models/local/url",
            "expected the endpoint's base URL, http://… or https://… up to /v1 (without"
            f' /chat/completions, which is added to it), found the string "{url}"',
        )
    ]
    for fine in ("http://127.0.0.1:8080/v1", "https://example.com/v1/chat/completionsx"):
        assert problems(tmp_path, {"models": {"local": {"provider": "openai", "url": fine}}}) == []
