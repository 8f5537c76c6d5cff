"""Runs: one hook run by its kind (the kinds' table, `hookrun.py`, and the frame every kind
ends in, `hookframe.py`), a script run with its phases in their fixed order, tool calls
through the `call` point (a script's, an MCP client's), the files git counts as changed for
`when.files`, the journal that keeps a run's frames, the runs retained (in memory and in the
history on disk) and their recording, the asks a run waits on, the event bus, observe hooks,
the tool servers' start hooks, the runs' telemetry (counted here, sent over OTLP when asked:
`telemetry`, `otel`), and the runtime that holds them in one process.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "artifacts": ("ArtifactGone", "ArtifactStore", "Stored"),
        "asking": ("Asks", "Settled"),
        "bus": ("Bus", "Subscription"),
        "callpoint": (
            "CALL_PHASES",
            "CANCELLED",
            "ENDED",
            "Call",
            "CallOutcome",
            "CallPoint",
            "EgressMark",
            "answer_outcome",
            "args_sha256",
            "call_frame",
            "destructive_hint",
            "too_slow",
        ),
        "gitchanges": ("DEFAULT_BRANCHES", "GIT_TIMEOUT_S", "git_changes"),
        "hookcontext": ("HookContext", "RunInfo", "hook_secrets", "new_run_id"),
        "hookframe": ("FrameBuilder", "HookReport", "child_spec", "granted", "run_process"),
        "hookrun": ("HookKind", "kind_of", "run_hook"),
        "journal": ("FRAME_OVERHEAD", "Follower", "RunJournal"),
        "interrupted": ("as_sealed", "orphaned"),
        "journals": ("Journals", "UnknownRun", "newest_first", "to_forget"),
        "recording": ("Recorder",),
        "observe": ("serve_observers",),
        "observerstats": ("ObserverStats", "Unwell", "observe_hooks"),
        "output": ("InvalidOutput", "read_output"),
        "phases": ("PhaseHooks", "RunState", "together_groups"),
        "prompthook": ("placeholder_values", "prompt_request"),
        "runtime": ("Runtime", "open_runtime"),
        "scriptrun": ("DEFAULT_SCRIPT_TIMEOUT_MS", "Run", "RunRequest", "execute"),
        "serverhooks": ("ServerStartHooks", "open_servers"),
        "storedrun": ("RunGone", "StoredRun"),
        "telemetry": ("OTLP_ENDPOINT_ENV", "Telemetry", "open_telemetry", "otlp_wanted"),
    },
)
