"""Each command imports only what it uses: `exec` (in process), `hook test`, `validate` and
`hooks list`, run in a fresh interpreter on a valid config, with the schemas' quick checks
already kept on disk (`config/schemacache.py`), as every start after the first finds them.

A command's weight is mostly its imports (`bench/startup.py` times them); a heavy module that
creeps into a command that never uses it fails here, named. `--version` and `--help` are held
in `test_cli.py`, the remote client in `test_rooms.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from importset import imported_by

P = "mcpx_hooks.supervisor"


CONFIG = """\
[defaults]
timeoutMs = 5000

[[hooks]]
name = "check"
on = "script"
phase = "before"
run = ["true"]
sandbox = "none"
"""
HOOK = json.dumps({"run": ["true"], "sandbox": "none"})

#: What none of the four commands uses: the service's server and client, the cluster, the
#: MCP and model clients, OpenTelemetry, the docs generator, the schema libraries (a valid
#: config is checked by the compiled check kept on disk; jsonschema only says what is wrong),
#: and the standard modules only a problem's "did you mean" (difflib) or a `when` filter on
#: a command line (shlex) needs.
NEVER = {
    "difflib",
    "shlex",
    "mcp",
    # Telemetry's SDK and exporters load only with OTEL_EXPORTER_OTLP_ENDPOINT set (the API
    # only with the MCP SDK, which none of these commands loads).
    "opentelemetry",
    f"{P}.run.otel",
    "httpx",
    "nats",
    "cryptography",
    "trio_websocket",
    "wsproto",
    "jsonschema",
    "fastjsonschema",
    f"{P}.cluster",
    f"{P}.service.server",
    f"{P}.service.remote",
    f"{P}.service.httpclient",
    f"{P}.service.console",
    f"{P}.service.streams",
    f"{P}.tools.mcpclient",
    f"{P}.tools.serverproc",
    f"{P}.models.modelclient",
    f"{P}.models.promptcache",
    f"{P}.models.promptreuse",
    f"{P}.run.prompthook",
    f"{P}.run.modulehook",
    f"{P}.run.pluginhook",
    f"{P}.run.sourcehook",
    f"{P}.config.docgen",
}
#: What reading and showing a config needs none of: no run, no process, no event loop.
NO_RUN = NEVER | {
    "trio",
    "cattrs",
    f"{P}.run",
    f"{P}.process",
    f"{P}.service",
    f"{P}.models",
    f"{P}.tools",
    f"{P}.core.frames",
}

COMMANDS = {
    "exec": (
        ["exec", "--config", "hooks.toml", "--sandbox", "none", "--", "true"],
        NEVER | {"mimetypes", f"{P}.cli.artifacts"},
    ),
    "hook test": (
        ["hook", "test", "--phase", "before", "--hook", HOOK],
        NEVER | {f"{P}.service", f"{P}.run.runtime", f"{P}.run.scriptrun", f"{P}.models"},
    ),
    # A run with no hook loads no hook runner, reads no schema and builds none of the hooks'
    # frame or answer classes; its frames are made without cattrs (`convert.frame_json`);
    # and none keeps an artifact, so none reads the MIME types table, or copies one out.
    "exec, no hooks": (
        ["exec", "--sandbox", "none", "--", "true"],
        NEVER
        | {
            "cattrs",
            "mimetypes",
            f"{P}.cli.artifacts",
            f"{P}.config.schemas",
            f"{P}.core.answers",
            f"{P}.core.hookframes",
            f"{P}.run.hookrun",
            f"{P}.run.hookframe",
            f"{P}.run.output",
            # The metrics' table loads with the first hook frame.
            f"{P}.core.telemetry",
            # No tool server, observe hook or tool call: none of what runs them.
            f"{P}.tools",
            f"{P}.run.callpoint",
            f"{P}.run.observe",
            f"{P}.run.serverhooks",
        },
    ),
    "validate": (["validate", "hooks.toml"], NO_RUN),
    "hooks list": (["hooks", "list", "--config", "hooks.toml"], NO_RUN),
    "hooks list --json": (["hooks", "list", "--config", "hooks.toml", "--json"], NO_RUN),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_imports_only_what_it_uses(tmp_path: Path, command: str) -> None:
    (tmp_path / "hooks.toml").write_text(CONFIG)
    args, heavy = COMMANDS[command]
    modules = imported_by(args, tmp_path)
    assert f"{P}.config.loading" in modules  # it did read the config
    assert sorted(modules & heavy) == []


def test_the_probe_sees_what_a_run_loads(tmp_path: Path) -> None:
    (tmp_path / "hooks.toml").write_text(CONFIG)
    modules = imported_by(COMMANDS["exec"][0], tmp_path)
    assert {"trio", f"{P}.run.scriptrun", f"{P}.process.spawner"} <= modules
