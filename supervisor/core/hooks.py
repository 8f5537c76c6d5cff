"""A hook as it is in force: declared, defaulted, validated, with where it came from.

Pure data; `config/build.py` builds these, `run/hookrun.py` runs them by kind.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from .effects import Clamp, Effect, clamp
from .egress import NETWORK_KEY
from .fieldmeta import OMIT
from .limits import DEFAULT_LIMITS, Limits
from .models import NO_MODELS, Models, PromptSpec
from .points import Phase
from .records import Record


class Action(enum.StrEnum):
    """The words of the kinds the supervisor's own code names. Which kinds there are is
    `core/kinds.py`'s table: a hook's `action` is one of its words."""

    SOURCE = "source"
    RUN = "run"
    MODULE = "module"
    PROMPT = "prompt"
    PLUGIN = "plugin"


class PluginAnswer(enum.StrEnum):
    """How a plugin hook reads its tool's answer (`answer`)."""

    AUTO = "auto"
    HOOK = "hook"
    ADVICE = "advice"


#: What each `answer` makes of a tool's answer (the config schema's words).
PLUGIN_ANSWER_MEANING: Final[Mapping[PluginAnswer, str]] = {
    PluginAnswer.AUTO: "its structured content, or its text parsed as JSON, when that is an"
    " object whose keys are a hook's answer keys; otherwise its text content, as advice",
    PluginAnswer.HOOK: "a hook's answer object, always (anything else is `invalid-output`)",
    PluginAnswer.ADVICE: "its text content as advice, always",
}


class Failure(enum.StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class Profile(enum.StrEnum):
    """Sandbox profiles."""

    STRICT = "strict"
    WORKSPACE = "workspace"
    NET = "net"
    NONE = "none"


#: What each profile lets a child do beyond `strict`'s confinement: a profile is at least as
#: strict as another when it grants a subset of what the other grants (`workspace` and `net`
#: are not comparable). A nearer layer may make a default stricter (`config/policy.py`).
PROFILE_GRANTS: Final[Mapping[Profile, frozenset[str]]] = {
    Profile.STRICT: frozenset(),
    Profile.WORKSPACE: frozenset({"write the working directory"}),
    Profile.NET: frozenset({"the host network"}),
    Profile.NONE: frozenset(
        {"write the working directory", "the host network", "everything the user may"}
    ),
}


def at_least_as_strict(profile: Profile, than: Profile) -> bool:
    """Whether `profile` grants nothing that `than` does not."""
    return PROFILE_GRANTS[profile] <= PROFILE_GRANTS[than]


#: What a script run gets unless `[script] sandbox`, the request or `exec --sandbox` says
#: otherwise (hooks: `Defaults.sandbox`).
DEFAULT_RUN_SANDBOX: Final = Profile.WORKSPACE


@attrs.frozen(repr=False, eq=False)
class SandboxPaths(Record):
    """`[sandbox] read`, `write` (added to every profile but `none`) and `deny` (never
    granted, besides `process/denied.py`'s `DEFAULT_DENY`): absolute paths (`~` expanded,
    relative ones resolved against the declaring file), the layers' lists appended, farthest
    first; `deny_at`: where each `deny` item is declared (`FILE:/sandbox/deny/N`)."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    deny_at: tuple[str, ...] = ()


#: The profiles a service's requests may name, for the run and for per-call hooks, unless
#: `[service] sandboxes` says otherwise: none that runs a client's code unconfined.
DEFAULT_SERVICE_SANDBOXES: Final = tuple(p for p in Profile if p.value in ("strict", "workspace"))
#: `[mcp] separator`: what joins a server's and a tool's names (`<server>__<tool>`).
DEFAULT_SEPARATOR: Final = "__"


STDERR_TAIL_BYTES: Final = 64 * 1024
DEFAULT_RUNS_RETAIN: Final = 256
#: A run's frames held, in bytes as they cost (`[runs] runBytes`); past it output is dropped.
DEFAULT_RUN_BYTES: Final = 64 * 1024 * 1024
#: All retained runs' frames, in bytes as they cost (`[runs] retainBytes`).
DEFAULT_RETAIN_BYTES: Final = 1024 * 1024 * 1024
#: All retained runs' artifacts, in bytes (`[runs] artifactBytes`); past it the oldest go.
DEFAULT_ARTIFACT_BYTES: Final = 256 * 1024 * 1024
#: Days a stored run is kept (`[history] retainDays`).
DEFAULT_HISTORY_DAYS: Final = 30
#: What the stored runs may hold on disk together (`[history] retainBytes`).
DEFAULT_HISTORY_BYTES: Final = 1024 * 1024 * 1024
#: How long `exec`, once its run's `end` is written, waits for observe hooks still running
#: (`[observe] drainMs`); past it they are killed, and `exec` says which were cut short.
DEFAULT_OBSERVE_DRAIN_MS: Final = 2000


class SourceKind(enum.StrEnum):
    FILE = "file"
    PER_CALL = "per-call"
    COMMAND_LINE = "command-line"


@attrs.frozen(repr=False, eq=False)
class Provenance(Record):
    """Where a hook in force was declared: a file and its index in that file's `hooks`."""

    kind: SourceKind
    file: str | None = None
    index: int | None = None


@attrs.frozen(repr=False, eq=False)
class Defaults(Record):
    """Per-hook defaults, from a config's `[defaults]` table (the kill grace and the output
    cap: `hooks` itself is the list of hooks, so they live here). The built-in values are
    declared here and nowhere else: `Hook`, the loader, the schema and the docs take them from
    `DEFAULTS` and `HOOK_SETTINGS`."""

    timeout_ms: int = 10_000
    kill_grace_ms: int = 500
    max_output_bytes: int = 1024 * 1024
    effect: Effect = Effect.ADVISE
    sandbox: Profile = Profile.STRICT
    network: tuple[str, ...] | None = None  # (`core/egress.py`; None: no proxy)

    def overridden(self, table: Mapping[str, Any]) -> Defaults:
        """These defaults with the settings `table` (a `[defaults]` table or a hook) names."""
        given = {s.attr: s.parse(table[s.key]) for s in HOOK_SETTINGS if s.key in table}
        given |= {"network": tuple(table[NETWORK_KEY])} if NETWORK_KEY in table else {}
        return attrs.evolve(self, **given) if given else self


#: The built-in defaults (a config without `[defaults]`).
DEFAULTS: Final = Defaults()


@attrs.frozen(repr=False, eq=False)
class HookSetting(Record):
    """One row of the hook defaults table: a setting that `[defaults]` gives every hook and a
    hook may set for itself. `minimum` is an integer's least value (None for a word)."""

    key: str
    attr: str
    parse: Callable[[Any], Any]
    #: What it is, for the schema and the docs.
    meaning: str
    minimum: int | None = None

    @property
    def default(self) -> Any:
        return getattr(DEFAULTS, self.attr)

    @property
    def written(self) -> int | str:
        """The built-in value as a config writes it."""
        value = self.default
        if isinstance(value, Effect):
            return value.word
        return value.value if isinstance(value, enum.Enum) else int(value)


#: The `[defaults]` keys (a hook's own keys too), in `Defaults` order.
HOOK_SETTINGS: Final = (
    HookSetting("timeoutMs", "timeout_ms", int, "The whole life of a hook, in ms", 1),
    HookSetting("killGraceMs", "kill_grace_ms", int, "The grace from SIGTERM to SIGKILL, in ms", 0),
    HookSetting(
        "maxOutputBytes",
        "max_output_bytes",
        int,
        "The cap on a hook's stdout, in bytes: above it the hook is killed and failed",
        1,
    ),
    HookSetting("effect", "effect", Effect.parse, "What a hook's output may do"),
    HookSetting("sandbox", "sandbox", Profile, "A hook's sandbox profile"),
)


@attrs.frozen(repr=False, eq=False)
class Hook(Record):
    """One hook in force. `target` is the action's value: an argv tuple for `run`, a module
    spec for `module`, the text for `prompt`, `"namespace.tool"` for `plugin`."""

    name: str
    on: str
    phase: Phase
    #: The word of its kind (`core/kinds.py`'s `KINDS`).
    action: str = attrs.field(converter=str)
    target: str | tuple[str, ...]
    declaring_dir: str
    source: Provenance
    effect: Effect = DEFAULTS.effect
    failure: Failure = Failure.OPEN
    timeout_ms: int = DEFAULTS.timeout_ms
    kill_grace_ms: int = DEFAULTS.kill_grace_ms
    max_output_bytes: int = DEFAULTS.max_output_bytes
    env: Mapping[str, str] = attrs.field(factory=dict)
    #: `passEnv`: globs of variables copied from where the hook's environment comes from
    #: (the supervisor's, or for a per-call hook the caller's); `secrets`: names copied the
    #: same way and redacted wherever the supervisor writes (`core/passenv.py`); those with
    #: hosts (`secret_hosts`) reach the child as a placeholder only (`core/egress.py`).
    pass_env: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    secret_hosts: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    enabled: bool = True
    #: `locked = true`: nearer layers can neither drop, disable nor redefine it.
    locked: bool = False
    when: Mapping[str, Any] = attrs.field(factory=dict)
    #: `parallel = true`: runs at once with the parallel hooks next to it in its phase.
    parallel: bool = False
    cwd: str | None = None
    sandbox: Profile = DEFAULTS.sandbox
    network: tuple[str, ...] | None = None
    args: Mapping[str, Any] | None = None
    #: A plugin hook's `answer`: how its tool's answer is read.
    answer: PluginAnswer = PluginAnswer.AUTO
    #: The config's `[limits]`.
    limits: Limits = DEFAULT_LIMITS
    #: The config's `[sandbox] read` and `write`.
    paths: SandboxPaths = SandboxPaths()
    #: A `prompt` hook's `model` and `vars`, its model resolved (`core/models.py`).
    prompt: PromptSpec | None = None

    @property
    def workdir(self) -> str:
        """The declared `cwd` (resolved against the declaring directory) or that directory."""
        return self.cwd or self.declaring_dir

    @property
    def floored(self) -> bool:
        """Whether the caller's level (`hooks.autonomy`: config, flag or request) leaves this
        hook alone: it is locked, and a config file declared it (the operator's policy; a
        hook given with the run, on the command line or in a request, is the caller's own)."""
        return self.locked and self.source.kind is SourceKind.FILE


def effect_in_force(hook: Hook, caller: Effect, supervisor: Effect) -> Clamp:
    """`hook`'s effect clamped by its phase (of its point), the caller's level (unless the
    hook is `floored`) and the supervisor's `autonomy.max`."""
    return clamp(hook.effect, hook.phase, caller, supervisor, floor=hook.floored, on=hook.on)


def provenance_json(source: Provenance) -> dict[str, Any] | str:
    if source.kind is SourceKind.FILE:
        return {"file": source.file, "index": source.index}
    return source.kind.value


def hook_json(hook: Hook) -> dict[str, Any]:
    """A hook's resolved fields, as `hooks list --json` and `/v1/hooks` give them: the target
    under its action's name, the effect as its word. Shaped by hand, and registered with the
    one converter (`convert.py`), which this module does not import (no cattrs to load
    a config)."""
    target = hook.target
    out: dict[str, Any] = {
        "name": hook.name,
        "on": hook.on,
        "phase": hook.phase.value,
        "action": hook.action,
        hook.action: list(target) if isinstance(target, tuple) else target,
        "effect": hook.effect.word,
        "failure": hook.failure.value,
        "timeoutMs": hook.timeout_ms,
        "killGraceMs": hook.kill_grace_ms,
        "maxOutputBytes": hook.max_output_bytes,
        "env": dict(hook.env),
        "enabled": hook.enabled,
        "locked": hook.locked,
        "sandbox": hook.sandbox.value,
        "dir": hook.declaring_dir,
        "source": provenance_json(hook.source),
    }
    out |= {"passEnv": list(hook.pass_env)} if hook.pass_env else {}
    out |= {"secrets": list(hook.secrets)} if hook.secrets else {}
    out |= {NETWORK_KEY: list(hook.network)} if hook.network is not None else {}
    if hook.when:
        out["when"] = dict(hook.when)
    if hook.parallel:
        out["parallel"] = True
    if hook.cwd is not None:
        out["cwd"] = hook.cwd
    if hook.args is not None:
        out["args"] = dict(hook.args)
    if hook.action == Action.PLUGIN:
        out["answer"] = hook.answer.value
    if hook.prompt is not None:
        out["model"] = hook.prompt.model_name
        if hook.prompt.vars:
            out["vars"] = dict(hook.prompt.vars)
        if hook.prompt.model is None:
            out["modelConfigured"] = False
    return out


@attrs.frozen(repr=False, eq=False)
class SkippedFile(Record):
    """A project file found and not applied: why, the command that trusts it, the warning."""

    file: str
    reason: str
    trust_command: str
    said: str = attrs.field(default="", metadata=OMIT)


@attrs.frozen(repr=False, eq=False)
class Config(Record):
    """Everything in force after layering, validated."""

    hooks: tuple[Hook, ...] = ()
    #: Inline source phases (action `source`): `script.<phase>` → Python lines.
    script: Mapping[Phase, tuple[str, ...]] = attrs.field(factory=dict)
    autonomy_max: Effect = Effect.RUN
    #: The caller's level (`hooks.autonomy`), clamped by `autonomy_max` where it is used.
    autonomy_hooks: Effect = Effect.RUN
    defaults: Defaults = DEFAULTS
    runs_retain: int = DEFAULT_RUNS_RETAIN
    runs_run_bytes: int = DEFAULT_RUN_BYTES
    runs_retain_bytes: int = DEFAULT_RETAIN_BYTES
    runs_artifact_bytes: int = DEFAULT_ARTIFACT_BYTES
    #: `[history]`: whether runs are stored on disk, where (None: the default path), and
    #: for how long and up to how many bytes.
    history_enabled: bool = True
    history_path: str | None = None
    history_retain_days: int = DEFAULT_HISTORY_DAYS
    history_retain_bytes: int = DEFAULT_HISTORY_BYTES
    #: `[service] sandboxes`: the profiles a request may name or get (run, per-call hooks).
    service_sandboxes: tuple[Profile, ...] = DEFAULT_SERVICE_SANDBOXES
    #: `[service] roots`: the directories a request's `cwd` must lie in (absolute); None
    #: when no layer sets it, and `serve` derives it from where it starts.
    service_roots: tuple[str, ...] | None = None
    #: `[limits]`: every hook's and script's resource limits.
    limits: Limits = DEFAULT_LIMITS
    #: `[sandbox] read` and `write`: paths every profile but `none` adds.
    sandbox_paths: SandboxPaths = SandboxPaths()
    #: `[models]`: the models prompt hooks name, and the run's token budget.
    models: Models = NO_MODELS
    #: `[observe] drainMs`: the wait for observe hooks when a command ends.
    observe_drain_ms: int = DEFAULT_OBSERVE_DRAIN_MS
    script_sandbox: Profile = DEFAULT_RUN_SANDBOX  # (`[script] sandbox`)
    #: `[script] passEnv`, `secrets` (with hosts: `secret_hosts`, as a hook's), `network`.
    script_pass_env: tuple[str, ...] = ()
    script_secrets: tuple[str, ...] = ()
    script_secret_hosts: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    script_network: tuple[str, ...] | None = None
    #: The config files applied, farthest first.
    files: tuple[str, ...] = ()
    #: The project files applied (trusted), by path: the SHA-256 of the bytes applied. A
    #: service that layers its files again for a request applies them only while unchanged.
    pinned: Mapping[str, str] = attrs.field(factory=dict)
    #: Project files found by discovery and not applied (not trusted, or changed since).
    skipped: tuple[SkippedFile, ...] = ()
    #: What loading had to say: each skipped file, each ceiling a nearer file tried to raise.
    #: Every command that loads the config says them (stderr; a run's `warning` frames).
    warnings: tuple[str, ...] = ()
    #: `[servers.<name>]`: the tool servers plugin hooks and scripts' calls use
    #: (`core/servers.py`'s `ServerSpec`; typed loosely here, which that module imports).
    servers: Mapping[str, Any] = attrs.field(factory=dict)
    #: `[mcp] separator`: between a server's name and its tool's, as MCP clients see them.
    mcp_separator: str = DEFAULT_SEPARATOR
    #: `[mcp] exec`: whether `mcpx-hooks mcp` offers its own `mcpx_exec` tool.
    mcp_exec: bool = True
    #: `[when] base`: what `when.files` compares against; None: the default branch's merge base.
    when_base: str | None = None

    def find(self, name: str) -> Hook | None:
        return next((h for h in self.hooks if h.name == name), None)


def caller_autonomy(config: Config, asked: Effect | None) -> Effect:
    """The caller's level in force: the config's `[autonomy] hooks`, lowered by the level the
    caller asked for (`exec --autonomy`, a request's `autonomy`; `off` is one like the
    others). It clamps every hook but those the floor keeps (`Hook.floored`)."""
    return config.autonomy_hooks if asked is None else min(asked, config.autonomy_hooks)
