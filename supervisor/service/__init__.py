"""The service: HTTP and WebSocket on one port (a sans-IO protocol under a thin trio layer),
who may use it, the wire's messages, a run's frames streamed to every client at its own
pace, and the client side for `exec --remote`, `events`, `hooks list --remote` and `runs`.
pace, the answering of asks, and the client side for `exec --remote`, `events` and
`hooks list --remote`.

The names below are loaded on first use (`core/exports.py`), so the remote client loads
the wire, not the server.
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "access": (
            "TOKEN_ENV",
            "TokenFileError",
            "client_token",
            "create_token_file",
            "default_token_path",
            "first_token",
            "kept_token",
            "remove_token_file",
        ),
        "connection": ("ServerConnection",),
        "admission": (
            "Admitted",
            "Caller",
            "RULES",
            "Rules",
            "Way",
            "admit",
            "declared_vars",
            "run_profile",
        ),
        "endpoints": ("CLIENT_GONE", "Endpoints"),
        "execrequest": (
            "EXEC_FIELDS",
            "ExecRequest",
            "field_table",
            "parse_exec",
            "wire_request",
        ),
        "roots": ("release_cwd", "remove_made", "roots_in_force"),
        "httpclient": ("artifact_path", "get_json", "open_get"),
        "logredact": ("open_logged_runtime",),
        "mcpexec": ("EXEC_TOOL", "exec_tool", "run_exec", "summary"),
        "mcpcalls": ("applied_result", "tool_result"),
        "mcpface": ("Gateway", "serve_stdio"),
        "mcplimits": ("CallLimiter",),
        "mcprelay": ("RESOURCE_NOT_FOUND", "Relay"),
        "mcpsession": ("SESSION_ARGV0", "SessionCounts", "SessionRun"),
        "mcpstdio": ("LineTooLong", "open_stdio"),
        "answering": ("AskWatcher", "Deliver", "Responder"),
        "options": ("Limits", "Listening", "ServiceOptions"),
        "remote": (
            "DEFAULT_URL",
            "Remote",
            "beside",
            "exec_remote",
            "open_remote",
            "watched_remote",
        ),
        "remoteread": ("RemoteError", "Unreachable", "messages"),
        "routes": ("ArtifactSource", "SourceDown"),
        "server": ("Service", "run_service"),
        "streams": ("Wake",),
        "targets": (
            "Target",
            "check_from",
            "check_query",
            "parse_events",
            "parse_from",
            "shown_seq",
        ),
        "wire": (
            "DEFAULT_HOST",
            "DEFAULT_PORT",
            "Close",
            "ConnectionClosed",
            "WireError",
            "encode",
            "parse_control",
            "parse_json_object",
        ),
    },
)
