"""Tools: the MCP tool servers of one supervisor, behind plugin hooks and scripts' calls.
Their manager (started on first use, shared, stopped when idle, restarted with backoff), one
server's life in its sandbox, and the MCP client over its pipes. A server's `server.start`
hooks are given to the manager (`StartHooks`); they run in `run/serverhooks.py`.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "hearing": ("GONE", "HEAR_WAIT_S", "Progress", "hear_within"),
        "serverentry": (
            "AnswerTooLarge",
            "LogHearer",
            "ServerEntry",
            "ServerFailing",
            "StartHooks",
            "ToolFailed",
            "answer_text",
            "backoff_s",
            "entry_json",
            "tool_json",
            "where_json",
        ),
        "jsonlines": (
            "BorrowedSend",
            "LineReader",
            "LineWriter",
            "TooLong",
            "an_answer",
            "batch_ids",
            "json_line",
            "top_level_id",
            "unread_id",
        ),
        "listings": ("ListingSession", "as_listed", "redacted_tool", "renamed"),
        "mcpclient": ("ServerBroken", "every_page", "not_mcp", "problems"),
        "rawasks": ("ask_as_written",),
        "rawchannel": ("cancellation",),
        "pins": (
            "OFF",
            "REQUIRE",
            "PinVerdict",
            "change_items",
            "change_line",
            "key_of",
            "listing",
            "pin",
            "pinned_names",
            "seen_changes",
            "state_stamp",
            "verdict",
        ),
        "servers": (
            "ServerManager",
            "ToolServers",
            "done_using",
            "error_answer",
            "gone_reason",
            "not_a_result",
            "open_manager",
            "strict_json",
        ),
        "wireresult": ("WrittenResult", "as_written", "log_as_written"),
    },
)
