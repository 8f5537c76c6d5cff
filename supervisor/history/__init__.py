"""The run history on disk: runs, their frames as sent and their artifacts, in a SQLite
database that outlives the supervisor (`store.py`). Below `run`, which records to it.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "faults": ("HistoryBusy", "HistoryFault"),
        "probing": ("probe", "room"),
        "search": ("MATCHES", "MAX_MATCHES", "MAX_QUERY", "SEARCHED", "frame_text", "query"),
        "store": (
            "OWNER_MARK",
            "History",
            "StoredArtifact",
            "Written",
            "default_path",
        ),
    },
)
