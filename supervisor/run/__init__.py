"""Runs: one hook run and its frame, a script run with its phases in their fixed order, the
journal that keeps a run's frames, the asks it waits on, the event bus, observe hooks, the
tool servers, and the runtime that holds them in one process.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "artifacts": ("ArtifactGone", "ArtifactStore", "Stored"),
        "asking": ("Asks", "Settled"),
        "bus": ("Bus", "Subscription"),
        "hookcontext": ("HookContext", "RunInfo", "hook_secrets", "new_run_id"),
        "hookrun": ("HookReport", "run_hook"),
        "journal": ("FRAME_OVERHEAD", "Follower", "Journals", "RunJournal", "UnknownRun"),
        "modelclient": ("ModelFailed", "Reply", "ask_model", "request_body", "shown_url"),
        "observe": ("ObserverStats", "Unwell", "serve_observers"),
        "output": ("InvalidOutput", "read_output"),
        "prompthook": ("placeholder_values", "prompt_request", "run_prompt"),
        "promptcache": (
            "CachedAnswer",
            "PromptCache",
            "PromptCacheError",
            "cache_key",
            "entry_document",
            "is_key",
        ),
        "runtime": ("Runtime", "open_runtime"),
        "scriptrun": ("DEFAULT_SCRIPT_TIMEOUT_MS", "Run", "RunRequest", "execute"),
        "servers": (
            "ServerEntry",
            "ServerFailing",
            "ServerManager",
            "ToolFailed",
            "ToolServers",
            "entry_json",
            "open_servers",
        ),
    },
)
