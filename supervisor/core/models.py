"""The models prompt hooks talk to: `[models.<name>]` tables as data, `[models]
runBudgetTokens`, and what a prompt hook declares beside its text (`model`, `vars`).

Pure: no trio, no I/O. The schema (`config/modelschema.py`) and the docs are made from the
tables here (`PROVIDERS`, `MODEL_KEYS`); `config/build.py` builds `Models` and each prompt
hook's `PromptSpec`; `run/prompthook.py` runs them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from .effects import Effect, phase_ceiling
from .points import Phase
from .records import Record

if TYPE_CHECKING:
    from .hooks import Hook


class Provider(enum.StrEnum):
    """How a model is reached."""

    #: An OpenAI-compatible `/v1/chat/completions` endpoint (a hosted API, llama.cpp's
    #: server, Ollama, vLLM): `url` is its base, ending before `/chat/completions`.
    OPENAI = "openai"
    #: An argv run through the spawn path: the request JSON on stdin, the reply text on
    #: stdout (under the `net` profile unless the model names a `sandbox`).
    COMMAND = "command"


#: What each provider is, for the schema and the docs.
PROVIDERS: Final[dict[Provider, str]] = {
    Provider.OPENAI: "an OpenAI-compatible `/v1/chat/completions` endpoint at `url`",
    Provider.COMMAND: "an argv (`command`): the request JSON on stdin, the reply text on stdout",
}

#: The model a prompt hook uses when it names none.
DEFAULT_MODEL_NAME: Final = "default"
#: `[models] runBudgetTokens`: the tokens one run's prompt hooks may spend together.
DEFAULT_RUN_BUDGET_TOKENS: Final = 100_000
#: A prompt hook's `timeoutMs` when it sets none: its own budget, never the script's (and
#: not `[defaults] timeoutMs`, which is the process hooks').
PROMPT_TIMEOUT_MS: Final = 30_000
DEFAULT_MAX_TOKENS: Final = 1024
DEFAULT_MAX_CONCURRENT: Final = 4
DEFAULT_TEMPERATURE: Final = 0.0
#: The key of `[models]` that is not a model table.
BUDGET_KEY: Final = "runBudgetTokens"
#: A model's name (a key of `[models]`) and a placeholder's name.
NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_-]*$"
#: An `openai` model's `url`: a base, which `/chat/completions` is added to (the endpoint's
#: full URL pasted there would be requested with it twice: HTTP 404 at every call).
URL_PATTERN: Final = r"^(?!\S*/chat/completions/?$)https?://\S+$"


def is_name(text: str) -> bool:
    """Whether `text` is a model's or a placeholder's name."""
    return re.fullmatch(NAME_PATTERN[1:-1], text) is not None


@attrs.frozen(repr=False, eq=False)
class ModelKey(Record):
    """One key of a `[models.<name>]` table: its kind (for the schema), its default, what it
    is, and the providers that take it."""

    key: str
    kind: str
    meaning: str
    default: Any = None
    providers: tuple[Provider, ...] = (Provider.OPENAI, Provider.COMMAND)
    required: bool = False


#: Every key of a `[models.<name>]` table.
MODEL_KEYS: Final = (
    ModelKey("provider", "provider", "How the model is reached", required=True),
    ModelKey(
        "url",
        "url",
        "The endpoint's base URL (`http://…` or `https://…`, up to `/v1`)",
        providers=(Provider.OPENAI,),
        required=True,
    ),
    ModelKey(
        "model", "text", "The model's id, as the endpoint names it", providers=(Provider.OPENAI,)
    ),
    ModelKey(
        "apiKeyEnv",
        "env",
        "The variable of the supervisor's environment that holds the API key (sent as a"
        " bearer token; to a `command`, passed in its environment); a secret, redacted"
        " wherever the supervisor writes",
    ),
    ModelKey("maxTokens", "count", "The most tokens one answer may take", DEFAULT_MAX_TOKENS),
    ModelKey(
        "maxConcurrent",
        "count",
        "Requests in flight to this model at once, over all the supervisor's runs",
        DEFAULT_MAX_CONCURRENT,
    ),
    ModelKey("temperature", "temperature", "Sampling temperature", DEFAULT_TEMPERATURE),
    ModelKey(
        "command",
        "argv",
        "The argv to run",
        providers=(Provider.COMMAND,),
        required=True,
    ),
    ModelKey(
        "sandbox",
        "sandbox",
        "The command's sandbox profile (default `net`)",
        providers=(Provider.COMMAND,),
    ),
)


@attrs.frozen(repr=False, eq=False)
class Model(Record):
    """One `[models.<name>]` table as it is in force."""

    name: str
    provider: Provider
    url: str = ""
    #: The id sent as `model` (openai); for a `command`, its argv's first item by default.
    model: str = ""
    api_key_env: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    temperature: float = DEFAULT_TEMPERATURE
    command: tuple[str, ...] = ()
    #: A profile's word (`core/hooks.Profile`); None: `net`.
    sandbox: str | None = None

    @property
    def model_id(self) -> str:
        """What the frame's `model.model` and the cache key call this model."""
        return self.model or (self.command[0] if self.command else "")

    def shown(self) -> dict[str, str]:
        """The frame's `model`: `{name, provider, model}`."""
        return {"name": self.name, "provider": self.provider.value, "model": self.model_id}


@attrs.frozen(repr=False, eq=False)
class Models(Record):
    """`[models]` in force: the named models and the run budget."""

    models: Mapping[str, Model] = attrs.field(factory=dict)
    run_budget_tokens: int = DEFAULT_RUN_BUDGET_TOKENS

    @property
    def key_names(self) -> frozenset[str]:
        """The variables holding the models' keys (`apiKeyEnv`): the supervisor's own
        secrets, which no `passEnv` glob passes (`passenv.OWN_SECRETS`)."""
        return frozenset(m.api_key_env for m in self.models.values() if m.api_key_env)


#: A config without `[models]`.
NO_MODELS: Final = Models()


@attrs.frozen(repr=False, eq=False)
class PromptSpec(Record):
    """What a `prompt` hook declares beside its text, resolved against `[models]`."""

    model_name: str = DEFAULT_MODEL_NAME
    #: `vars`: the hook's own placeholders (any JSON values); a run's `placeholders` give
    #: other values for the same names.
    vars: Mapping[str, Any] = attrs.field(factory=dict)
    #: The model in force under `model_name`; None: no such model is configured (the hook is
    #: skipped, "no model configured").
    model: Model | None = None
    run_budget_tokens: int = DEFAULT_RUN_BUDGET_TOKENS


def build_models(table: Mapping[str, Any]) -> Models:
    """`Models` from a validated, merged `[models]` table."""
    models = {
        name: _model(name, value)
        for name, value in table.items()
        if name != BUDGET_KEY and isinstance(value, Mapping)
    }
    return Models(models, int(table.get(BUDGET_KEY, DEFAULT_RUN_BUDGET_TOKENS)))


def _model(name: str, table: Mapping[str, Any]) -> Model:
    return Model(
        name=name,
        provider=Provider(table["provider"]),
        url=str(table.get("url", "")).rstrip("/"),
        model=str(table.get("model", "")),
        api_key_env=table.get("apiKeyEnv"),
        max_tokens=int(table.get("maxTokens", DEFAULT_MAX_TOKENS)),
        max_concurrent=int(table.get("maxConcurrent", DEFAULT_MAX_CONCURRENT)),
        temperature=float(table.get("temperature", DEFAULT_TEMPERATURE)),
        command=tuple(table.get("command", ())),
        sandbox=table.get("sandbox"),
    )


def prompt_spec(hook: Mapping[str, Any], models: Models) -> PromptSpec:
    """A validated prompt hook declaration's `PromptSpec` against the `Models` in force."""
    name = str(hook.get("model", DEFAULT_MODEL_NAME))
    return PromptSpec(
        name, dict(hook.get("vars", {})), models.models.get(name), models.run_budget_tokens
    )


def unconfigured(hooks: Iterable[Hook]) -> list[str]:
    """A warning for each prompt hook (of the `Hook`s given) whose model is not configured
    (one whose effect is off asks no model: `answer_unused` says that instead)."""
    return [
        f'prompt hook "{h.name}" names model "{h.prompt.model_name}", which no'
        f" [models.{h.prompt.model_name}] table declares: it will be skipped (no model"
        " configured)"
        for h in hooks
        if h.prompt is not None and h.prompt.model is None and h.enabled and not _off(h)
    ]


def answer_unused(hooks: Iterable[Hook]) -> list[str]:
    """A warning for each enabled prompt hook (of the `Hook`s given) whose effect, as its file
    declares it, is off wherever it fires: an observe hook's always is. Nothing its model
    answered could be used, so the model is never asked (`run/prompthook.py`)."""
    said = []
    for h in hooks:
        if h.prompt is None or not h.enabled or not _off(h):
            continue
        if h.phase is Phase.OBSERVE:
            said.append(
                f'prompt hook "{h.name}" observes (phase "observe", which a hook that names no'
                " phase gets): an observe hook's effect is always off, so nothing a model"
                " answered could be used, and its model is never asked; give it the phase"
                " whose answer you want (before, onSuccess, onError or suffix)"
            )
        else:
            said.append(
                f'prompt hook "{h.name}" has effect "off": nothing a model answered could be'
                " used, so its model is never asked; give it the effect its answer needs"
                ' ("advise" or more)'
            )
    return said


def _off(hook: Hook) -> bool:
    """Whether `hook`'s effect is off wherever it fires (by its phase, or as declared)."""
    return min(hook.effect, phase_ceiling(hook.on, hook.phase)) is Effect.OFF
