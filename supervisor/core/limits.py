"""Resource limits of hook and script processes: one table, the config's `[limits]`.

Pure data: `process/rlimits.py` turns them into resource limits (bounded by the supervisor's
own) and `process/sandbox.py` into a scratch size; the schema and `docs/sandbox.md` list the
keys from `LIMIT_KEYS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .records import Record

MB: Final = 1 << 20


@attrs.frozen(repr=False, eq=False)
class Limits(Record):
    """Per-child limits under every profile (`none`: soft ones only, `process/rlimits.py`)."""

    memory_mb: int = 1024
    cpu_seconds: int = 300
    processes: int = 128
    open_files: int = 1024
    file_size_mb: int = 256
    scratch_mb: int = 256

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> Limits:
        return cls(**{attr: int(table[key]) for key, attr, _, _ in LIMIT_KEYS if key in table})


#: `[limits]` key, attribute, the resource limit it sets (None: not one), unit. (memoryMb's
#: RLIMIT_DATA is RLIMIT_AS where no memory cgroup bounds the tree: `process/sandbox.py`.)
LIMIT_KEYS: Final[tuple[tuple[str, str, str | None, int], ...]] = (
    ("memoryMb", "memory_mb", "RLIMIT_DATA", MB),
    ("cpuSeconds", "cpu_seconds", "RLIMIT_CPU", 1),
    ("processes", "processes", "RLIMIT_NPROC", 1),
    ("openFiles", "open_files", "RLIMIT_NOFILE", 1),
    ("fileSizeMb", "file_size_mb", "RLIMIT_FSIZE", MB),
    ("scratchMb", "scratch_mb", None, MB),
)
#: What each key bounds, for the schema and the docs.
LIMIT_DOCS: Final[Mapping[str, str]] = {
    "memoryMb": "All the memory the tree of a sandboxed hook or script can pin (private, "
    "shared, memfds, shared memory, tmpfs): a memory cgroup per tree, or where none can be "
    "made RLIMIT_AS per process, tmpfs sizes, shm limits and no memfd_create (`doctor` "
    "says which); under none, RLIMIT_DATA (soft) only; in MiB",
    "cpuSeconds": "CPU time of each process (RLIMIT_CPU), in seconds",
    "processes": "Processes and threads of the hook's own user (RLIMIT_NPROC; every profile"
    " but none)",
    "openFiles": "Open files of each process (RLIMIT_NOFILE)",
    "fileSizeMb": "Largest file a process may write (RLIMIT_FSIZE), in MiB",
    "scratchMb": "Size of the scratch tmpfs (every profile but none), in MiB",
}

DEFAULT_LIMITS: Final = Limits()
