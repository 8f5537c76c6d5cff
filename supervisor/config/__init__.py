"""The config: files found, read, validated and layered into the `Config` in force; the JSON
Schemas and the docs generated from the tables; other hook managers' files converted
(`importers`, for `init --from`). Pure: no trio, no processes.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "closest": ("did_you_mean",),
        "docgen": ("GENERATED", "write"),
        "files": (
            "LOCAL_NAMES",
            "NO_DISCOVERY_ENV",
            "Found",
            "discover",
            "discover_files",
            "not_utf8",
            "read_bytes",
            "read_file",
        ),
        "hookrewrite": ("PROMPT_KEYS", "PromoteError", "Promoted", "promote_answer"),
        "importers": (
            "Converted",
            "SourceFileError",
            "from_lefthook",
            "from_precommit",
            "read_yaml",
        ),
        "layering": ("merge", "merge_all", "splice"),
        "loading": ("Alone", "check_files", "load_config", "validate_files"),
        "modelschema": ("answer_schema", "models_schema", "prompt_rules"),
        "passrules": ("withheld_warnings",),
        "pluginrules": (
            "exposed_name_warnings",
            "pinned_tool_warnings",
            "server_name_warnings",
            "unknown_server_warnings",
        ),
        "privatefile": ("write_private",),
        "problems": ("describe", "in_words", "pointer"),
        "schemaparts": ("DIALECT", "SCRIPT_PHASES"),
        "schemas": ("SCHEMA_NAMES", "quick_check", "schema_text", "validator"),
        "trust": (
            "TRUST_ENV",
            "ServerPin",
            "TrustEntry",
            "TrustState",
            "Verdict",
            "decide",
            "digest",
            "pin_key",
            "tools_sha256",
            "trust_command",
        ),
        "statefiles": (
            "StateError",
            "checkout_holding",
            "checkout_said",
            "denied_said",
            "exposed",
            "make_state_dir",
            "read_private",
            "said_os_error",
            "state_home",
            "state_path",
            "unmade",
        ),
        "truststore": ("load_state", "locked_state", "save_state", "trust_key"),
    },
)
