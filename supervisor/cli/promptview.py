"""Prompt hooks at the command line: `hook test --show-request` (the request a prompt hook
would send, for review, sending nothing) and the warnings `validate` and `hooks list` give
about prompt hooks whose model is not configured or whose answer could never be used."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from ..config import Alone
    from ..core.hooks import Config, Hook
    from ..core.servers import ServerSpec
    from ..run.hookcontext import HookContext


def say_model_warnings(hooks: Iterable[Hook]) -> None:
    """On stderr, one line for each prompt hook of `hooks` whose model is not configured, or
    whose effect is off (its model is then never asked)."""
    from ..core.models import answer_unused, unconfigured
    from .common import say

    hooks = list(hooks)
    for warning in [*answer_unused(hooks), *unconfigured(hooks)]:
        say(f"mcpx-hooks: warning: {warning}")


def say_pinned_tool_warnings(config: Config, hooks: Sequence[Hook]) -> None:
    """On stderr, each `when.tool` pattern of `hooks` that no tool of its servers, as they
    are pinned in the trust state, matches (`pinned_tool_warnings`)."""
    from ..config import pinned_tool_warnings
    from ..config.statefiles import state_path
    from ..config.truststore import load_state
    from .common import say

    if not any(h.when for h in hooks):
        return
    state, _ = load_state(state_path(os.environ))  # (unreadable: nothing pinned to say of)
    for warning in pinned_tool_warnings(hooks, config.servers, state):
        say(f"mcpx-hooks: warning: {warning}")


def files_model_warnings(
    args: argparse.Namespace, files: list[str], alone: Sequence[Alone] = ()
) -> None:
    """`validate FILE…`: the prompt hooks of these files whose model neither they nor the
    layers in force here declare (nothing said where the layers do not load: the problems
    are printed instead). `alone`: the files as already checked, not checked again."""
    from ..config.loading import load_config
    from ..core.errors import ConfigError

    try:
        config = load_config(
            files,
            cwd=Path.cwd(),
            environ=os.environ,
            trust_project=args.trust_project,
            alone=alone,
        )
    except ConfigError:
        return
    given = {os.path.abspath(f) for f in files}
    dirs = {os.path.dirname(f) for f in given}
    servers = {n: s for n, s in config.servers.items() if s.declaring_dir in dirs}
    say_hook_warnings(config, [h for h in config.hooks if h.source.file in given], servers)


def say_hook_warnings(
    config: Config, hooks: list[Hook], servers: Mapping[str, ServerSpec] | None = None
) -> None:
    """`validate`: what is said of `hooks` and `servers` when they run (a model not
    configured, a `when.tool`, `hide` or `tools` key written as a client sees the tool, a
    `when.server` matching no server, a `when.tool` matching no pinned tool),
    said now."""
    from ..config import (
        exposed_name_warnings,
        server_name_warnings,
        unknown_server_warnings,
        withheld_warnings,
    )
    from .common import say

    say_model_warnings(hooks)
    for warning in withheld_warnings(config, hooks, servers):
        say(f"mcpx-hooks: warning: {warning}")
    for warning in exposed_name_warnings(hooks, config.servers, config.mcp_separator):
        say(f"mcpx-hooks: warning: {warning}")
    for warning in server_name_warnings(servers or {}, config.mcp_separator):
        say(f"mcpx-hooks: warning: {warning}")
    for warning in unknown_server_warnings(hooks, config.servers):
        say(f"mcpx-hooks: warning: {warning}")
    say_pinned_tool_warnings(config, hooks)


def request_shown(config: Config, hook: Hook, ctx: HookContext) -> dict[str, Any]:
    """What the prompt hook would send in `ctx`: where, and the body; the API key as
    `[secret NAME]`, never its value."""
    from ..core.effects import Effect
    from ..core.hooks import effect_in_force
    from ..core.models import Provider
    from ..core.redact import Redactor
    from ..models.modelclient import request_body, shown_url
    from ..run.hookcontext import hook_secrets
    from ..run.prompthook import prompt_request

    effect = effect_in_force(hook, ctx.caller_autonomy, ctx.supervisor_max).effect
    request = prompt_request(hook, effect, ctx)
    model = hook.prompt.model if hook.prompt is not None else None
    shown: dict[str, Any] = {"hook": hook.name, "effect": effect.word}
    if model is None:
        name = hook.prompt.model_name if hook.prompt is not None else "default"
        shown["model"] = None
        shown["note"] = f"no model configured: declare [models.{name}] to send this"
        shown["messages"] = request.messages()
    else:
        shown["model"] = model.shown()
        if model.provider is Provider.OPENAI:
            shown["url"] = shown_url(f"{model.url}/chat/completions")
            if model.api_key_env:
                shown["headers"] = {"authorization": f"Bearer [secret {model.api_key_env}]"}
        else:
            shown["command"] = list(model.command)
        shown["body"] = request_body(model, request)
    if effect is Effect.OFF:
        shown["note"] = (
            "the effect in force is off: nothing a model answered could be used, so this"
            " request is never sent"
        )
    redacted: dict[str, Any] = Redactor(hook_secrets((hook,), None, os.environ)).value(shown)
    return redacted


def show_request(config: Config, hook: Hook, ctx: HookContext) -> int:
    """Prints the request (JSON) and sends nothing; 2 when the hook is not a prompt hook."""
    from ..core.hooks import Action
    from .common import EXIT_OK, EXIT_USAGE

    if hook.action != Action.PROMPT:
        print(
            f'mcpx-hooks hook test: --show-request: "{hook.name}" is a {hook.action} hook;'
            " only a prompt hook sends a request",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(json.dumps(request_shown(config, hook, ctx), indent=2, ensure_ascii=False))
    return EXIT_OK
