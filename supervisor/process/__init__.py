"""Processes: the one spawn path (the resident spawner and its client), a child while it runs,
the egress proxy, sandbox profiles and the mechanisms that enforce them here, scratch
directories, resource limits, and the signal policy of a command in the foreground.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "child": ("Child", "Outcome"),
        "denied": ("READ_ONLY_NAMES", "deny_own_files", "never_granted", "own_files"),
        "egress": ("EgressProxy", "LOOPBACK_PORT", "Lease", "doctor_lines"),
        "egressca": ("RunCA", "TRUST_ENV", "upstream_context"),
        "egresschild": ("egress_spec", "open_egress", "refusal", "refusal_frames", "refusals"),
        "launch": (
            "HIDE_ENV",
            "RUNNER_FLAGS",
            "SPAWN_MODE_ENV",
            "discard_prestarted",
            "prestart",
            "prestarted",
        ),
        "rlimits": ("child_rlimits",),
        "runnerside": ("libc", "runner_path"),
        "programs": ("ProgramHidden", "check_program"),
        "sandbox": ("plan", "real_path", "require", "memory_bound", "under"),
        "scratch": (
            "ROOT_ENV",
            "held_dir",
            "leave_scratch",
            "release_held",
            "remove_tree",
            "scratch_dir",
        ),
        "signals": ("STOP_SIGNALS", "serve_stop_signals"),
        "spawner": ("Spawner", "WARM_ENV", "open_spawner"),
        "spawnspec": ("ChildSpec", "ModuleCall", "SandboxPlan"),
    },
)
