"""The core: the tables and models everything else is built on. Pure: no trio, no I/O.

Points and phases (`points`), effects and their clamp (`effects`), hooks as they are in force
(`hooks`), frames and their order (`frames`), hook answers (`answers`), bus events
(`events`), the hook variables (`hookenv`), variables passed by name (`passenv`) and
secrets' redaction (`redact`), resource limits as data (`limits`), a run's
script (`scripts`), the JSON policy (`jsontext`), what `execve` can take (`spawntext`), the
one converter to JSON (`convert`), the exception tree (`errors`).

The names below are loaded on first use (`core/exports.py`).
"""

from .exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "answers": ("Answer", "Ask", "Dropped", "Refusal", "bound_answer"),
        "convert": ("KEEP", "to_json"),
        "effects": (
            "Clamp",
            "ClampSource",
            "DEFAULT_MAX",
            "EFFECT_MEANING",
            "Effect",
            "PHASE_CEILING",
            "REFUSING",
            "clamp",
        ),
        "errors": (
            "ConfigError",
            "DEBUG_ENV",
            "Problem",
            "ProfileUnavailable",
            "SandboxUnavailable",
            "SpawnError",
            "bug_summary",
        ),
        "events": ("Event", "EventKind", "Gap", "KINDS", "kind_matches"),
        "frames": (
            "ArtifactFrame",
            "EmitFrame",
            "EndFrame",
            "ErrorCause",
            "ErrorFrame",
            "Frame",
            "FrameType",
            "HookFrame",
            "HookStatus",
            "LogFrame",
            "OutputFrame",
            "Ran",
            "Resources",
            "ResultFrame",
            "StartFrame",
            "WarningFrame",
            "blank",
            "check_order",
            "now_rfc3339",
            "stamp",
        ),
        "hookenv": (
            "ARTIFACTS_DIR_VAR",
            "BASE_ENV",
            "FRAMES_FD_VAR",
            "HookFacts",
            "INPUT_VAR",
            "PROTOCOL",
            "SCRIPT_VARIABLES",
            "VARIABLES",
            "base_environment",
            "hook_variables",
        ),
        "hooks": (
            "at_least_as_strict",
            "hook_json",
            "Action",
            "Config",
            "DEFAULTS",
            "DEFAULT_OBSERVE_DRAIN_MS",
            "DEFAULT_RETAIN_BYTES",
            "DEFAULT_RUNS_RETAIN",
            "DEFAULT_RUN_BYTES",
            "DEFAULT_RUN_SANDBOX",
            "DEFAULT_SERVICE_SANDBOXES",
            "Defaults",
            "Failure",
            "HOOK_SETTINGS",
            "Hook",
            "HookSetting",
            "NOT_YET_RUNNABLE",
            "PROCESS_ACTIONS",
            "Profile",
            "Provenance",
            "STDERR_TAIL_BYTES",
            "SandboxPaths",
            "SkippedFile",
            "SourceKind",
        ),
        "jsontext": ("JsonError", "dumps", "is_unicode", "loads", "wire_safe"),
        "limits": ("DEFAULT_LIMITS", "LIMIT_DOCS", "LIMIT_KEYS", "Limits", "MB"),
        "passenv": (
            "MIN_SECRET_CHARS",
            "NOTHING_PASSED",
            "PASS_ENV_KEY",
            "SECRETS_KEY",
            "Passed",
            "pass_environment",
            "reference_problem",
            "wanted",
        ),
        "points": ("PHASES", "POINTS", "Phase", "PointInfo"),
        "redact": ("NO_SECRETS", "Redactor"),
        "scripts": ("Script",),
        "spawntext": (
            "ENV_NAME_PATTERN",
            "TEXT_PATTERN",
            "argv_problems",
            "env_problems",
            "text_problem",
        ),
    },
)
