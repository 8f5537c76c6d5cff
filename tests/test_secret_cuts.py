"""Where the supervisor itself cuts what a hook or script printed (a hook's kept stderr, the
head of an invalid answer, stdout over `maxOutputBytes`, a script's line over 64 KiB cut into
frames), a secret the cut falls in gives none of itself away: neither the part before the
cut nor the part after it. Real processes through `exec --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcpx_hooks.supervisor.core.redact import Redactor

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
SECRET = "AbCdEfGhIjKlMnOp-qrstuvwxyz-0123456789WXYZ"
HALF = len(SECRET) // 2

#: Each prints the secret where the supervisor's cut falls in its middle.
PRINTS = {
    # an ok hook's stderr is kept to its last 64 KiB
    "okerr": f"sys.stderr.write(S + 'x' * (65536 - {HALF})); print('fine')",
    # an invalid answer's first KiB is shown
    "head": f"sys.stdout.write('{{' + 'x' * (1023 - {HALF}) + S + '}}')",
    # stdout is kept up to maxOutputBytes, and the hook killed
    "over": f"sys.stdout.write('x' * (100000 - {HALF}) + S); sys.stdout.flush()",
}


def _hook(name: str, code: str) -> str:
    return json.dumps(
        {
            "name": name,
            "on": "script",
            "phase": "before",
            "sandbox": "none",
            "secrets": ["TOK"],
            "maxOutputBytes": 100000,
            "run": [sys.executable, "-c", f"import os, sys; S = os.environ['TOK']; {code}"],
        }
    )


def test_a_cut_in_a_secret_gives_neither_half_away(tmp_path: Path) -> None:
    script = (
        "import os, sys; S = os.environ['TOK'];"
        f" sys.stdout.write('x' * (65536 - {HALF}) + S + '\\n');"
        f" sys.stderr.write('y' * (65536 - {HALF}) + S + '\\n')"
    )
    hooks = [a for name, code in PRINTS.items() for a in ("--hook", _hook(name, code))]
    done = subprocess.run(
        [
            *CLI,
            "exec",
            "--json",
            "--sandbox",
            "none",
            "--secret",
            "TOK",
            *hooks,
            "--",
            sys.executable,
            "-c",
            script,
        ],
        cwd=tmp_path,
        env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "TOK": SECRET},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    hooks_seen = {f["name"]: f for f in frames if f["type"] == "hook"}
    assert hooks_seen["okerr"]["status"] == "ok", hooks_seen["okerr"]
    assert hooks_seen["head"]["status"] == "invalid-output", hooks_seen["head"]
    assert hooks_seen["over"]["status"] == "killed", hooks_seen["over"]
    outputs = [f for f in frames if f["type"] in ("stdout", "stderr")]
    assert len(outputs) == 4, [f["type"] for f in outputs]  # each line in two pieces
    for half in (SECRET[:HALF], SECRET[HALF:]):
        assert half not in done.stdout + done.stderr, half


def test_cut_leaves_out_a_secret_s_start_or_end_only_at_a_cut() -> None:
    r = Redactor({"T": "s3cret-value"})
    assert r.cut("abc s3cr", end=True) == "abc "
    assert r.cut("value def", start=True) == " def"
    assert r.cut("abc s3cr value def") == "abc s3cr value def"  # no cut: nothing to leave out
    assert r.cut("s3cret-value and s3c", end=True) == "[secret T] and "
