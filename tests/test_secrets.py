"""Secrets as a user passes them: real `mcpx-hooks exec` and `serve` processes, a hook and a
script that print the secret they were given everywhere they can (stdout, stderr, advice, an
applied value, a log line, the script's argv), and every byte of what the supervisor wrote
or sent searched for it: `exec --json` output, `/v1/exec`, `/v1/runs/{id}` replays,
`/v1/events`, the server's log."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from service_client import arun, open_ws, start_server
from websockets.exceptions import ConnectionClosed

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
PY = sys.executable
HOOK_TOKEN = "hook-secret-Zq81xW"
RUN_TOKEN = "run-secret-Kp27vB"
CALL_TOKEN = "call-secret-Jm93tC"
SECRETS = (HOOK_TOKEN, RUN_TOKEN, CALL_TOKEN)


def digest(value: str) -> str:
    """What a process prints to show it had the secret, without printing it."""
    return hashlib.sha256(value.encode()).hexdigest()


#: A script that prints its secret everywhere: stdout, stderr, a log line, its result.
SCRIPT = """
import hashlib, json, os, sys
t = os.environ["RUN_TOKEN"]
assert sys.argv[1] == t and os.environ["PLAIN"] == "literal"
print("digest", hashlib.sha256(t.encode()).hexdigest())
print("stdout", t)
print("stderr", t, file=sys.stderr)
fd = int(os.environ["MCPX_FRAMES_FD"])
os.write(fd, (json.dumps({"type": "log", "level": "info", "message": t}) + "\\n").encode())
os.write(fd, (json.dumps({"type": "result", "value": {"token": t}}) + "\\n").encode())
"""


#: `exec`'s flags for the script: its secret, a literal variable, and the secret in argv.
RUN_ARGS = (
    *("--secret", "RUN_TOKEN", "--env", "PLAIN=literal", "--sandbox", "none"),
    *("--", PY, "-c", SCRIPT, RUN_TOKEN),
)


def hook_code(var: str, answer: str) -> str:
    """A hook that prints its secret on stderr and answers `answer` (a JSON text with `T`
    standing for the secret and `D` for its digest)."""
    return (
        f"import hashlib, json, os, sys; sys.stdin.read(); t = os.environ[{var!r}];"
        " print('stderr', t, file=sys.stderr);"
        " d = hashlib.sha256(t.encode()).hexdigest();"
        f" print({answer!r}.replace('T', t).replace('D', d))"
    )


CONFIG = f"""
[defaults]
sandbox = "none"

[service]
sandboxes = ["none"]

[[hooks]]
name = "leaky"
on = "script"
phase = "before"
run = [{json.dumps(PY)}, "-c", {json.dumps(hook_code("HOOK_TOKEN", '{"advise": "saw T D"}'))}]
secrets = ["HOOK_TOKEN"]

[[hooks]]
name = "replace"
on = "script"
phase = "onSuccess"
effect = "apply"
run = [{json.dumps(PY)}, "-c", {json.dumps(hook_code("HOOK_TOKEN", '{"apply": {"value": "T"}}'))}]
secrets = ["HOOK_TOKEN"]

[[hooks]]
name = "watcher"
on = "run.finished"
phase = "observe"
run = [{json.dumps(PY)}, "-c", {json.dumps(hook_code("HOOK_TOKEN", "{}") + "; sys.exit(1)")}]
secrets = ["HOOK_TOKEN"]
"""

CALL_HOOK = {
    "on": "script",
    "phase": "suffix",
    "run": [PY, "-c", hook_code("CALL_TOKEN", '{"advise": "call saw T D"}')],
    "secrets": ["CALL_TOKEN"],
    "sandbox": "none",
}


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", **extra}


def assert_clean(where: str, data: str | bytes) -> None:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    for secret in SECRETS:
        assert secret not in text, f"{secret} in {where}"


def check_run(frames: list[dict[str, Any]], *, call: bool = False) -> None:
    """The run went as it would with the secrets, and says where each was."""
    start = frames[0]
    assert start["type"] == "start" and start["argv"][-1] == "[secret RUN_TOKEN]"
    texts = [f.get("text") for f in frames if f["type"] in ("stdout", "stderr")]
    assert f"digest {digest(RUN_TOKEN)}" in texts
    assert "stdout [secret RUN_TOKEN]" in texts and "stderr [secret RUN_TOKEN]" in texts
    logs = [f["message"] for f in frames if f["type"] == "log"]
    assert logs == ["[secret RUN_TOKEN]"]
    hooks = {f["name"]: f for f in frames if f["type"] == "hook"}
    assert hooks["leaky"]["status"] == "ok", hooks["leaky"]
    assert hooks["leaky"]["advice"] == [f"saw [secret HOOK_TOKEN] {digest(HOOK_TOKEN)}"]
    assert hooks["leaky"]["stderrTail"] == "stderr [secret HOOK_TOKEN]\n"
    assert hooks["replace"]["original"] == {"token": "[secret RUN_TOKEN]"}
    assert hooks["replace"]["value"] == "[secret HOOK_TOKEN]"
    result = next(f for f in frames if f["type"] == "result")
    assert result["value"] == "[secret HOOK_TOKEN]"
    if call:
        suffix = next(f for f in frames if f["type"] == "hook" and f["phase"] == "suffix")
        assert suffix["advice"] == [f"call saw [secret CALL_TOKEN] {digest(CALL_TOKEN)}"]


def test_exec_json_output_holds_no_secret(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG)
    done = subprocess.run(
        [*CLI, "exec", "--config", "c.toml", "--json", *RUN_ARGS],
        cwd=tmp_path,
        env=env(HOOK_TOKEN=HOOK_TOKEN, RUN_TOKEN=RUN_TOKEN),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert_clean("exec stdout", done.stdout)
    assert_clean("exec stderr", done.stderr)
    assert done.returncode == 0, done.stderr
    check_run([json.loads(line) for line in done.stdout.splitlines()])
    # the readable view too (and the observe hook's failure it reports on stderr)
    view = subprocess.run(
        [*CLI, "exec", "--config", "c.toml", *RUN_ARGS],
        cwd=tmp_path,
        env=env(HOOK_TOKEN=HOOK_TOKEN, RUN_TOKEN=RUN_TOKEN),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert view.returncode == 0, view.stderr
    assert_clean("exec view", view.stdout + view.stderr)
    assert b"[secret RUN_TOKEN]" in view.stdout


async def _raw(ws: Any) -> str:
    """Every message of a socket to its close, as text."""
    out = []
    try:
        while True:
            out.append(await ws.recv())
    except ConnectionClosed:
        return "\n".join(out)


async def _service(srv: Any) -> tuple[str, str, str]:
    request = {
        "argv": [PY, "-c", SCRIPT, RUN_TOKEN],
        "env": {"PLAIN": "literal"},
        "secrets": ["RUN_TOKEN"],
        "callerEnv": {"RUN_TOKEN": RUN_TOKEN, "CALL_TOKEN": CALL_TOKEN},
        "sandbox": "none",
        "hooks": [CALL_HOOK],
    }
    async with open_ws(srv, "/v1/exec") as ws:
        await ws.send(json.dumps(request))
        streamed = await _raw(ws)
    run_id = json.loads(streamed.split("\n")[0])["runId"]
    async with open_ws(srv, f"/v1/runs/{run_id}?from=0") as ws:
        replayed = await _raw(ws)
    events: list[str] = []
    async with open_ws(srv, "/v1/events?since=0") as ws:
        # until the observe hook on this run's `run.finished` has been reported
        while not any(
            e["kind"] == "hook.finished" and e["data"].get("name") == "watcher"
            for m in events
            for e in map(json.loads, m.split("\n"))
        ):
            events.append(await ws.recv())
    return streamed, replayed, "\n".join(events)


def test_the_service_streams_replays_events_and_log_hold_no_secret(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG)
    srv = start_server(
        tmp_path,
        "--config",
        "c.toml",
        env={"HOOK_TOKEN": HOOK_TOKEN, "MCPX_HOOKS_DEBUG": "1"},  # every log line
    )
    try:
        streamed, replayed, events = arun(_service(srv), timeout=120)
        hook = ("--hook", json.dumps(CALL_HOOK), *RUN_ARGS)
        remote = subprocess.run(
            [*CLI, "exec", "--remote", srv.url, "--token-file", "token", "--json", *hook],
            cwd=tmp_path,
            env=env(RUN_TOKEN=RUN_TOKEN, CALL_TOKEN=CALL_TOKEN),
            capture_output=True,
            timeout=120,
            check=False,
        )
    finally:
        srv.stop()
    for where, data in (("/v1/exec", streamed), ("/v1/runs", replayed), ("/v1/events", events)):
        assert_clean(where, data)
    assert_clean("exec --remote", remote.stdout + remote.stderr)
    assert_clean("the server's log", srv.log())
    frames = [json.loads(line) for line in streamed.split("\n")]
    check_run(frames, call=True)
    assert replayed == streamed
    assert remote.returncode == 0, remote.stderr
    check_run([json.loads(line) for line in remote.stdout.splitlines()], call=True)
    parsed = [json.loads(line) for line in events.split("\n")]
    started = next(e for e in parsed if e["kind"] == "run.started")
    assert started["data"]["argv"][-1] == "[secret RUN_TOKEN]"
    watcher = next((e for e in parsed if e["kind"] == "hook.failed"), None)
    assert watcher is not None, [e for e in parsed if e["kind"].startswith("hook")]
    assert watcher["data"]["stderrTail"] == "stderr [secret HOOK_TOKEN]\n"


def _cli(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """`mcpx-hooks ARGS` in `tmp_path`, with `extra` in its environment."""
    return subprocess.run(
        [*CLI, *args],
        cwd=tmp_path,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _exec(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return _cli(tmp_path, "exec", "--json", "--sandbox", "none", *args, **extra)


def test_an_unset_secret_fails_its_hook_or_run_and_never_runs_without_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = {
        "on": "script",
        "phase": "before",
        "run": [PY, "-c", f"open({str(marker)!r}, 'w')"],
        "secrets": ["UNSET_ONE"],
        "sandbox": "none",
    }
    done = _exec(tmp_path, "--hook", json.dumps(hook), "--", "true")
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (frame,) = (f for f in frames if f["type"] == "hook")
    assert (frame["status"], frame["reason"]) == ("failed", "secret UNSET_ONE is not set")
    assert not marker.exists() and done.returncode == 0  # fail-open: the run carried on
    closed = {**hook, "effect": "ask", "failure": "closed"}
    done = _exec(tmp_path, "--hook", json.dumps(closed), "--", "true")
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (error,) = (f for f in frames if f["type"] == "error")
    assert "secret UNSET_ONE is not set" in error["message"] and error["refusedBy"]
    assert done.returncode != 0 and not marker.exists()
    script = f"open({str(marker)!r}, 'w'); print('ran')"
    done = _exec(tmp_path, "--secret", "UNSET_TWO", "--", PY, "-c", script)
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (error,) = (f for f in frames if f["type"] == "error")
    assert error["message"] == "secret UNSET_TWO is not set"
    assert [f for f in frames if f["type"] == "stdout"] == [] and not marker.exists()
    assert done.returncode == 1
    # A value no hex digest holds (the `end` frame's chain is hex: "abc" could be in it).
    done = _exec(tmp_path, "--secret", "SHORT", "--", "true", SHORT="xyz")
    assert "secret SHORT is too short to redact" in done.stdout and "xyz" not in done.stdout


def test_an_env_reference_is_refused_with_what_to_write(tmp_path: Path) -> None:
    done = _exec(tmp_path, "--env", "TOKEN=${GITHUB_TOKEN}", "--", "true")
    assert done.returncode == 2 and done.stdout == ""
    assert "--pass-env GITHUB_TOKEN" in done.stderr and "--secret GITHUB_TOKEN" in done.stderr
    (tmp_path / "c.toml").write_text(
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\n'
        'env = { GITHUB_TOKEN = "${GITHUB_TOKEN}" }\n'
    )
    done = subprocess.run(
        [*CLI, "validate", "c.toml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "c.toml:/hooks/0/env/GITHUB_TOKEN:" in done.stdout + done.stderr
    assert 'passEnv = ["GITHUB_TOKEN"]' in done.stdout + done.stderr


def test_pass_env_copies_globs_from_the_callers_environment(tmp_path: Path) -> None:
    script = "import os; e = os.environ; print(e.get('CI_A'), e.get('CI_B'), 'HOME_X' in e)"
    done = _exec(
        tmp_path, "--pass-env", "CI_*", "--", PY, "-c", script, CI_A="1", CI_B="2", HOME_X="3"
    )
    texts = [json.loads(line).get("text") for line in done.stdout.splitlines()]
    assert "1 2 False" in texts, done.stdout
    done = _exec(tmp_path, "--secret", "CI_*", "--", "true", CI_A="1234")
    assert done.returncode == 2 and done.stdout == ""  # (a secret is one variable, named)
    assert "--secret: 'CI_*' is a glob: a secret is one variable, named" in done.stderr


#: A secret with a backslash and a quote: its repr (`'s3cr"et\\\\value'`) and its JSON form
#: differ from it, and a message that names the program must still not give it away.
ODD_SECRET = 's3cr"et\\value-Wq5'


def _odd_forms() -> list[str]:
    return [ODD_SECRET, repr(ODD_SECRET)[1:-1], json.dumps(ODD_SECRET)[1:-1], "s3cr"]


def test_a_program_that_cannot_start_is_named_without_its_secret(tmp_path: Path) -> None:
    # The secret as the program: it cannot start, and the error naming it is redacted in the
    # readable view, in --json, in the history (runs show) and through a server.
    argv = ("--secret", "ODD", "--", ODD_SECRET)
    outputs = {}
    for sandbox in ("none", "workspace"):
        view = _cli(tmp_path, "exec", "--sandbox", sandbox, *argv, ODD=ODD_SECRET)
        assert view.returncode == 1, view.stderr
        assert "cannot start '[secret ODD]': not found on PATH" in view.stdout + view.stderr
        outputs[f"exec --sandbox {sandbox}"] = view.stdout + view.stderr
    done = _exec(tmp_path, *argv, ODD=ODD_SECRET)
    (error,) = (json.loads(line) for line in done.stdout.splitlines() if '"error"' in line)
    assert error["message"].endswith("cannot start '[secret ODD]': not found on PATH")
    run_id = error["runId"]
    outputs["exec --json"] = done.stdout + done.stderr
    for args in (("runs", "show", run_id), ("runs", "show", "--json", run_id), ("runs", "list")):
        shown = _cli(tmp_path, *args)
        assert shown.returncode == 0, shown.stderr
        outputs[" ".join(args)] = shown.stdout + shown.stderr
    srv = start_server(tmp_path)
    try:
        remote = _cli(
            tmp_path, "exec", "--remote", srv.url, "--token-file", "token", "--json", *argv,
            ODD=ODD_SECRET,
        )  # fmt: skip
    finally:
        srv.stop()
    assert "cannot start '[secret ODD]'" in remote.stdout, remote.stderr
    outputs["exec --remote"] = remote.stdout + remote.stderr
    outputs["the server's log"] = srv.log()
    for where, text in outputs.items():
        for form in _odd_forms():
            assert form not in text, f"{form!r} in {where}: {text}"


def test_a_start_failure_cut_short_in_a_secret_gives_none_of_it_away(tmp_path: Path) -> None:
    # A report the spawner cannot send whole is cut after a few hundred characters; where the
    # cut falls inside a secret, its start is dropped with the rest. Padded so that the cut
    # falls somewhere in the secret whatever the message's words before the program.
    secret = "s3cretvalue-abcdefghij0123456789"
    for pad in (280, 300, 310):
        program = f"/nonexistent/{'a' * pad}{secret}{'b' * 4000}"
        done = _exec(tmp_path, "--secret", "CUT_ME", "--", program, CUT_ME=secret)
        (error,) = (json.loads(line) for line in done.stdout.splitlines() if '"error"' in line)
        message = error["message"]
        assert message.endswith("a [...]") and secret[:1] + " [...]" not in message, message
        assert "s3cr" not in done.stdout + done.stderr


def test_explain_shows_what_the_run_would_redact(tmp_path: Path) -> None:
    for view in ((), ("--json",)):
        done = subprocess.run(
            [*CLI, "exec", "--explain", *view, "--secret", "RUN_TOKEN", "--", "echo", RUN_TOKEN],
            cwd=tmp_path,
            env=env(RUN_TOKEN=RUN_TOKEN),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert_clean(f"exec --explain {view}", done.stdout + done.stderr)
        assert "[secret RUN_TOKEN]" in done.stdout


def test_a_key_pasted_where_a_secret_s_name_goes_is_not_repeated(tmp_path: Path) -> None:
    """`secrets = ["sk-proj-…"]` (or `apiKeyEnv`: `core/passenv.shown_name`) names no variable
    that is set: the message saying so went into the run's frames, the history and every
    follower with the key in it. A name not written as a variable's is not repeated."""
    for pasted in (
        "sk-proj-Q1w2E3r4T5y6U7i8",
        # Keys that could be variables' names, by their issuers' published shapes.
        "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "AKIA" + "IOSFODNN7EXAMPLE",
    ):
        hook = {"on": "script", "phase": "before", "run": ["true"], "secrets": [pasted]}
        for args in (["--hook", json.dumps({**hook, "sandbox": "none"}), "--", "true"],
                     ["--secret", pasted, "--", "true"]):  # fmt: skip
            done = _exec(tmp_path, *args)
            assert pasted not in done.stdout + done.stderr
            assert "is it the value itself?" in done.stdout


def test_a_pass_env_glob_never_passes_the_service_token_or_a_model_key(tmp_path: Path) -> None:
    """`passEnv = ["MCPX_*"]` once gave hooks `MCPX_HOOKS_TOKEN`, the service token; a glob
    over a model's `apiKeyEnv` gave them the model's key, unredacted. Neither is passed now,
    and `validate` says which pattern would have matched which."""
    names = "('MCPX_HOOKS_TOKEN', 'OPENAI_API_KEY')"
    show = f"import os; print('got', [k for k in {names} if k in os.environ])"
    (tmp_path / "c.toml").write_text(
        '[[hooks]]\nname = "leak"\non = "script"\nphase = "before"\nsandbox = "none"\n'
        f'run = [{json.dumps(PY)}, "-c", {json.dumps(show)}]\npassEnv = ["MCPX_*", "OPENAI_*"]\n'
        '[models.default]\nprovider = "openai"\nurl = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        'apiKeyEnv = "OPENAI_API_KEY"\n[script]\npassEnv = ["*"]\n'
    )
    given = {"MCPX_HOOKS_TOKEN": HOOK_TOKEN, "OPENAI_API_KEY": RUN_TOKEN}
    tested = _cli(tmp_path, "hook", "test", "--config", "c.toml", "--json", "leak", **given)
    assert json.loads(tested.stdout)["advice"] == ["got []"], tested.stdout
    script = "import os; print('MCPX_HOOKS_TOKEN' in os.environ, 'OPENAI_API_KEY' in os.environ)"
    done = _exec(tmp_path, "--config", "c.toml", "--", PY, "-c", script, **given)
    texts = [json.loads(line).get("text") for line in done.stdout.splitlines()]
    assert "False False" in texts, done.stdout
    assert_clean("exec --json", done.stdout + done.stderr)
    checked = _cli(tmp_path, "validate", "c.toml")
    assert checked.returncode == 0, checked.stderr
    said = checked.stderr
    assert f'hook "leak" ({tmp_path / "c.toml"}:/hooks/0/passEnv/0): "MCPX_*" matches' in said
    assert "MCPX_HOOKS_TOKEN, the supervisor's own secret" in said
    assert '/hooks/0/passEnv/1): "OPENAI_*" matches OPENAI_API_KEY' in said
    assert '[script] passEnv: "*" matches MCPX_HOOKS_TOKEN' in said
    assert "name it in secrets" in said
    flagged = _exec(tmp_path, "--pass-env", "MCPX_*", "--", PY, "-c", script, **given)
    assert "False False" in flagged.stdout
    assert (
        "mcpx-hooks exec: warning: --pass-env MCPX_*: MCPX_HOOKS_TOKEN is the supervisor's own"
        " secret, never passed by --pass-env; pass it with --secret MCPX_HOOKS_TOKEN"
    ) in flagged.stderr
