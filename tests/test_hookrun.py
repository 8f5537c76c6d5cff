"""Running one hook as a real process: input, environment, answer, failure, effects, cleanup."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
import trio
from conftest import require_rootless

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hookenv import (
    NAMES,
    VARIABLES,
    HookFacts,
    When,
    fact_of,
    hook_variables,
)
from mcpx_hooks.supervisor.core.hooks import Action, Failure, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.spawner import WARM_ENV, Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookframe import HookReport
from mcpx_hooks.supervisor.run.hookrun import run_hook

PY = sys.executable


@pytest.fixture
async def spawner() -> AsyncIterator[Spawner]:
    async with open_spawner() as sp:
        yield sp
    assert psutil.Process().children(recursive=True) == []


def make_hook(tmp_path: Path, **fields: Any) -> Hook:
    base: dict[str, Any] = {
        "name": "h",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.RUN,
        "target": ("true",),
        "declaring_dir": str(tmp_path),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.NONE,
        "timeout_ms": 5000,
    }
    base.update(fields)
    return Hook(**base)


def py_hook(tmp_path: Path, code: str, **fields: Any) -> Hook:
    return make_hook(tmp_path, target=(PY, "-I", "-S", "-c", textwrap.dedent(code)), **fields)


CTX = HookContext(run=RunInfo("run-1", ("job",), "/", "2026-01-01T00:00:00Z"), input=({"n": 1},))


async def run(spawner: Spawner, hook: Hook, ctx: HookContext = CTX) -> HookReport:
    return await run_hook(spawner, hook, ctx)


def advice_json(report: HookReport) -> Any:
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    return json.loads(report.frame.advice[0])


ECHO = """
    import json, os, sys
    print(json.dumps({"advise": json.dumps({"stdin": json.load(sys.stdin),
        "env": dict(os.environ), "cwd": os.getcwd()})}))
"""


async def test_input_environment_and_cwd(spawner: Spawner, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SUPERVISOR_SECRET", "hunter2")
    hook = py_hook(tmp_path, ECHO, env={"LEVEL": "strict"}, effect=Effect.APPLY)
    seen = advice_json(await run(spawner, hook))
    stdin, env = seen["stdin"], seen["env"]
    assert stdin["protocol"] == 1
    assert stdin["hook"] == {
        "name": "h",
        "on": "script",
        "phase": "before",
        "action": "run",
        "effect": "apply",
        "timeoutMs": 5000,
    }
    assert stdin["run"]["runId"] == "run-1"
    assert stdin["input"] == {"n": 1}
    assert "SUPERVISOR_SECRET" not in env
    hook_vars = {k for k in env if k.startswith("MCPX_HOOK_")}
    assert hook_vars <= NAMES
    assert set(env) == {"PATH", "LANG", "TZ", "HOME", "TMPDIR", "LEVEL"} | hook_vars
    assert env["HOME"] == env["TMPDIR"] == env["MCPX_HOOK_SCRATCH"]
    assert env["MCPX_HOOK_EFFECT"] == "apply"
    assert env["MCPX_HOOK_DIR"] == str(tmp_path)
    assert seen["cwd"] == str(tmp_path)  # the declaring directory (SPEC §3)
    assert not Path(env["MCPX_HOOK_SCRATCH"]).exists()  # removed afterwards


async def test_scratch_left_full_is_removed(spawner: Spawner, tmp_path: Path) -> None:
    code = """
        import json, os
        scratch = os.environ["MCPX_HOOK_SCRATCH"]
        os.makedirs(os.path.join(scratch, "a", "b"))
        with open(os.path.join(scratch, "a", "b", "f"), "w") as f:
            f.write("left behind")
        print(json.dumps({"advise": [scratch, oct(os.stat(scratch).st_mode & 0o777)]}))
    """
    report = await run(spawner, py_hook(tmp_path, code))
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    scratch, mode = report.frame.advice
    assert mode == "0o700"
    assert not Path(scratch).exists()


async def test_declared_cwd(spawner: Spawner, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    hook = py_hook(tmp_path, ECHO, cwd=str(tmp_path / "sub"))
    assert advice_json(await run(spawner, hook))["cwd"] == str(tmp_path / "sub")


async def test_suffix_gets_outcome(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(tmp_path, ECHO, phase=Phase.SUFFIX)
    ctx = attrs.evolve(CTX, outcome="error", error={"message": "boom"})
    env = advice_json(await run(spawner, hook, ctx))["env"]
    assert env["MCPX_HOOK_OUTCOME"] == "error"


async def test_bom_output_accepted(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(
        tmp_path,
        """
        import sys
        sys.stdout.buffer.write(b'\\xef\\xbb\\xbf  {"advise": "ok"}  \\n')
    """,
    )
    report = await run(spawner, hook)
    assert report.frame.status is HookStatus.OK
    assert report.frame.advice == ("ok",)


@pytest.mark.parametrize(
    ("printed", "says"),
    [
        ("{not json", "not one JSON object"),
        ("[1]", "found array"),
        ('{"advise": 1}', "hook-output schema"),
    ],
)
async def test_invalid_output_is_a_failure(
    spawner: Spawner, tmp_path: Path, printed: str, says: str
) -> None:
    hook = py_hook(tmp_path, f"print({printed!r})")
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.INVALID_OUTPUT
    assert frame.reason is not None and says in frame.reason
    assert frame.refused is None  # fail-open by default
    assert frame.stdout_head == printed + "\n"  # what caused it, for a person to see


async def test_invalid_output_shows_only_the_first_kib(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(tmp_path, "print('{' + 'x' * 5000)")
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.INVALID_OUTPUT
    assert frame.stdout_head == "{" + "x" * 1023


async def test_plain_text_with_exit_0_is_advice(spawner: Spawner, tmp_path: Path) -> None:
    hook = make_hook(tmp_path, target=("sh", "-c", "command -v sh || exit 1"))
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.OK
    assert len(frame.advice) == 1 and frame.advice[0].endswith("/sh")
    assert frame.stdout_head is None
    failing = make_hook(tmp_path, target=("sh", "-c", "command -v no-such-tool-x || exit 1"))
    frame = (await run(spawner, failing)).frame
    assert frame.status is HookStatus.FAILED and frame.exit_code == 1


async def test_nonzero_exit_fails_whatever_stdout_says(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(
        tmp_path,
        """
        import sys
        print('{"refuse": "no"}'); print("oops", file=sys.stderr); sys.exit(2)
    """,
        effect=Effect.ASK,
    )
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.FAILED
    assert frame.exit_code == 2
    assert frame.refused is None  # exit 2 is not a refusal
    assert frame.stderr_tail == "oops\n"


async def test_apply_under_advise_is_dropped_and_reported(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(tmp_path, 'print(\'{"apply": {"value": 2}, "advise": "a"}\')')
    report = await run(spawner, hook)
    assert report.answer.apply is None
    assert not report.frame.changed
    assert to_json(report.frame)["dropped"] == [
        {"key": "apply", "reason": "needs effect apply; in force: advise"},
    ]


async def test_apply_records_original(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(tmp_path, 'print(\'{"apply": {"value": {"n": 2}}}\')', effect=Effect.APPLY)
    frame = (await run(spawner, hook)).frame
    assert frame.changed and frame.original == {"n": 1} and frame.value == {"n": 2}


async def test_fail_closed_timeout_refuses(spawner: Spawner, tmp_path: Path) -> None:
    hook = make_hook(
        tmp_path,
        target=("sleep", "30"),
        timeout_ms=200,
        kill_grace_ms=100,
        effect=Effect.ASK,
        failure=Failure.CLOSED,
    )
    started = time.monotonic()
    frame = (await run(spawner, hook)).frame
    assert time.monotonic() - started < 2
    assert frame.status is HookStatus.TIMEOUT
    assert frame.refused is not None and to_json(frame)["refused"]["failClosed"] is True


async def test_fail_closed_clamped_below_ask_cannot_refuse(
    spawner: Spawner, tmp_path: Path
) -> None:
    hook = make_hook(tmp_path, target=("false",), effect=Effect.ASK, failure=Failure.CLOSED)
    ctx = attrs.evolve(CTX, caller_autonomy=Effect.ADVISE)
    frame = (await run(spawner, hook, ctx)).frame
    assert frame.status is HookStatus.FAILED
    assert frame.refused is None
    assert frame.failure_note is not None and "cannot refuse" in frame.failure_note


async def test_refusal_is_not_a_failure(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(tmp_path, 'print(\'{"refuse": {"reason": "nope"}}\')', effect=Effect.ASK)
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.OK
    assert to_json(frame)["refused"] == {"reason": "nope", "failClosed": False}


async def test_timeout_kills_setsid_grandchild_within_grace(
    spawner: Spawner, tmp_path: Path
) -> None:
    marker = f"mcpx-test-{os.getpid()}-grandchild"
    hook = py_hook(
        tmp_path,
        f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{marker}"],
                         start_new_session=True)
        print("grandchild started", file=sys.stderr, flush=True)
        time.sleep(60)
    """,
        timeout_ms=300,
        kill_grace_ms=200,
    )
    started = time.monotonic()
    frame = (await run(spawner, hook)).frame
    elapsed = time.monotonic() - started
    assert frame.status is HookStatus.TIMEOUT
    assert elapsed < 0.3 + 0.2 + 1.0
    assert "grandchild started" in (frame.stderr_tail or "")
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


async def test_stdout_over_cap_kills_the_hook(spawner: Spawner, tmp_path: Path) -> None:
    hook = py_hook(
        tmp_path, "import sys\nwhile True: sys.stdout.write('x' * 65536)", max_output_bytes=100_000
    )
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.KILLED
    assert frame.reason is not None and "maxOutputBytes" in frame.reason


async def test_a_module_answer_over_cap_is_said_as_its_return_value(
    spawner: Spawner, tmp_path: Path
) -> None:
    # A module hook whose function returned an answer over maxOutputBytes was said as
    # "stdout over maxOutputBytes (…); killed", though its author never wrote stdout (what
    # it prints goes to stderr): the reason names the kind's answer.
    (tmp_path / "big.py").write_text(
        'def main(hook_input):\n    return {"advise": "x" * 200_000}\n'
    )
    hook = make_hook(tmp_path, action=Action.MODULE, target="big.py:main", max_output_bytes=100_000)
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.KILLED, to_json(frame)
    said = "the function's return value over maxOutputBytes (100000); killed"
    assert frame.reason == said, to_json(frame)
    plain = py_hook(tmp_path, "print('x' * 200_000)", max_output_bytes=100_000)
    frame = (await run(spawner, plain)).frame
    assert frame.reason == "stdout over maxOutputBytes (100000); killed", to_json(frame)


async def test_run_effect_executes_once(spawner: Spawner, tmp_path: Path) -> None:
    answer = {"run": {"argv": ["sh", "-c", "echo ran in $PWD"]}}
    hook = py_hook(tmp_path, f"print({json.dumps(json.dumps(answer))})", effect=Effect.RUN)
    frame = (await run(spawner, hook)).frame
    assert frame.ran is not None
    assert frame.ran.status is HookStatus.OK
    assert frame.ran.stdout == f"ran in {tmp_path}\n"


async def test_missing_program_is_a_failure_not_a_crash(spawner: Spawner, tmp_path: Path) -> None:
    frame = (await run(spawner, make_hook(tmp_path, target=("no-such-hook-xyz",)))).frame
    assert frame.status is HookStatus.FAILED
    assert frame.reason is not None and "no-such-hook-xyz" in frame.reason


@pytest.mark.parametrize("sandbox", [Profile.NONE, Profile.STRICT])
async def test_a_program_that_is_no_program_says_why(
    spawner: Spawner, readable_tmp: Path, sandbox: Profile
) -> None:
    # A script written and not made executable, or a directory named as the program: the
    # reason read "cannot start './check.sh': Permission denied", and nothing said which.
    if sandbox is Profile.STRICT:
        require_rootless()
    (readable_tmp / "check.sh").write_text("#!/bin/sh\necho hi\n")
    (readable_tmp / "check.sh").chmod(0o644)
    (readable_tmp / "hooks").mkdir()
    reasons = []
    for program in ("./check.sh", "./hooks"):
        hook = make_hook(readable_tmp, target=(program,), sandbox=sandbox)
        frame = (await run(spawner, hook)).frame
        assert frame.status is HookStatus.FAILED
        reasons.append(frame.reason)
    assert reasons == [
        "could not start: cannot start './check.sh': Permission denied: the file is not"
        " executable (chmod +x it, or name its interpreter first: sh FILE, python3 FILE)",
        "could not start: cannot start './hooks': Permission denied: it is a directory",
    ]


async def test_with_nothing_to_call_or_disabled_a_hook_says_so(
    spawner: Spawner, tmp_path: Path
) -> None:
    # A plugin hook where no tool server is declared fails (under its `failure`), never hangs.
    plugin = make_hook(tmp_path, action=Action.PLUGIN, target="ns.tool")
    frame = (await run(spawner, plugin)).frame
    assert frame.status is HookStatus.FAILED
    assert frame.reason == "no tool servers where this hook runs"
    prompt = make_hook(tmp_path, action=Action.PROMPT, target="say @x")
    frame = (await run(spawner, prompt)).frame
    assert frame.status is HookStatus.SKIPPED and frame.reason == "no model configured"
    off = make_hook(tmp_path, enabled=False)
    assert (await run(spawner, off)).frame.status is HookStatus.SKIPPED


async def test_strict_is_never_silently_downgraded(
    spawner: Spawner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPX_HOOKS_HIDE", "landlock")  # strict works here: hide a mechanism
    marker = tmp_path / "ran"
    hook = make_hook(tmp_path, target=("touch", str(marker)), sandbox=Profile.STRICT)
    frame = (await run(spawner, hook)).frame
    assert frame.status is HookStatus.FAILED
    assert "cannot be enforced" in (frame.reason or "")
    assert not marker.exists()


MODULE = """
import asyncio

def hook(payload):
    return {"advise": "sync " + payload["hook"]["name"]}

def other(payload):
    return {"advise": "other"}

async def later(payload):
    await asyncio.sleep(0)
    return {"advise": "async"}

def broken(payload):
    raise RuntimeError("kaboom")

def wrong(payload):
    return [1]

def silent(payload):
    return None

def chatty(payload):
    print("checking deps...")
    return {"advise": "chatty"}

VALUE = 3

def nan(payload):
    return {"advise": float("nan")}

def infinite(payload):
    return {"apply": {"value": [float("-inf")]}}

def tuple_key(payload):
    return {"apply": {"value": {(1, 2): "x"}}}

def deep(payload):
    value = []
    for _ in range(200):
        value = [value]
    return {"apply": {"value": value}}

def deeper(payload):
    value = []
    for _ in range(100_000):
        value = [value]
    return {"apply": {"value": value}}
"""


@pytest.mark.parametrize(
    ("spec", "status", "advice", "stderr"),
    [
        ("mods/m.py", HookStatus.OK, ("sync h",), None),
        ("mods/m.py:other", HookStatus.OK, ("other",), None),
        ("mods/m.py:later", HookStatus.OK, ("async",), None),
        ("pkg.mod:other", HookStatus.OK, ("other",), None),
        ("mods/m.py:silent", HookStatus.OK, (), None),
        ("mods/m.py:chatty", HookStatus.OK, ("chatty",), "checking deps..."),  # (a print)
        ("mods/m.py:broken", HookStatus.FAILED, (), "RuntimeError: kaboom"),
        ("mods/m.py:wrong", HookStatus.FAILED, (), "returned list"),
        ("mods/m.py:absent", HookStatus.FAILED, (), "has no function 'absent'"),
        ("mods/m.py:VALUE", HookStatus.FAILED, (), "mods/m.py:VALUE is int, not a function"),
        ("mods/none.py", HookStatus.FAILED, (), "module file not found"),
    ],
)
async def test_module_runner(
    spawner: Spawner,
    tmp_path: Path,
    spec: str,
    status: HookStatus,
    advice: tuple[str, ...],
    stderr: str | None,
) -> None:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "m.py").write_text(MODULE)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    hook = make_hook(tmp_path, action=Action.MODULE, target=spec)
    frame = (await run(spawner, hook)).frame
    assert frame.status is status, to_json(frame)
    assert frame.advice == advice
    if stderr:
        assert stderr in (frame.stderr_tail or "")


@pytest.mark.parametrize(
    ("function", "why"),
    [
        ("nan", "it holds NaN or Infinity, not JSON numbers"),
        ("infinite", "it holds NaN or Infinity, not JSON numbers"),
        ("tuple_key", "keys must be str, int, float, bool or None, not tuple"),
        ("deep", "nested deeper than 128 levels"),
        ("deeper", "nested deeper than 128 levels"),
    ],
)
async def test_a_return_value_that_is_not_json_is_said_as_the_function_s(
    spawner: Spawner, tmp_path: Path, function: str, why: str
) -> None:
    # A function returning NaN or Infinity (which Python's json writes) or a value nested
    # deeper than the supervisor reads was `invalid-output`, "stdout starts like JSON but is
    # not one JSON object", though its author never wrote stdout; one nested past Python's
    # recursion limit failed with a traceback of the runner's own frames.
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "m.py").write_text(MODULE)
    spec = f"mods/m.py:{function}"
    frame = (await run(spawner, make_hook(tmp_path, action=Action.MODULE, target=spec))).frame
    assert frame.status is HookStatus.FAILED, to_json(frame)
    said = f"mcpx-hooks module runner: {spec} returned a dict that is not JSON: {why}\n"
    assert frame.stderr_tail == said, to_json(frame)


@pytest.mark.parametrize("broken", ["raises", "does not compile"])
async def test_a_module_hook_s_traceback_holds_its_own_frames_not_the_runner_s(
    spawner: Spawner, tmp_path: Path, broken: str
) -> None:
    # The stderr tail on the hook's frame led with the runner's and importlib's frames; for a
    # file that does not compile, they pushed its SyntaxError's lines toward the tail's end.
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "m.py").write_text(MODULE)
    (tmp_path / "mods" / "bad.py").write_text("x = 1\ndef hook(:\n")
    spec = "mods/m.py:broken" if broken == "raises" else "mods/bad.py"
    frame = (await run(spawner, make_hook(tmp_path, action=Action.MODULE, target=spec))).frame
    assert frame.status is HookStatus.FAILED
    tail = frame.stderr_tail or ""
    assert "module_runner" not in tail and "<frozen importlib" not in tail, tail
    if broken == "raises":
        assert tail.startswith("Traceback (most recent call last):\n"), tail
        assert f'File "{tmp_path / "mods" / "m.py"}", line 15, in broken' in tail, tail
        assert tail.endswith("RuntimeError: kaboom\n"), tail
    else:
        assert tail.startswith(f'  File "{tmp_path / "mods" / "bad.py"}", line 2\n'), tail
        assert tail.endswith("SyntaxError: invalid syntax\n"), tail


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("pkg.absent", "mcpx-hooks module runner: module not found: pkg.absent"),
        ("nopkg.mod:fn", "mcpx-hooks module runner: module not found: nopkg.mod"),
        ("pkg.imports_absent", "ModuleNotFoundError: No module named 'absent_dependency'"),
    ],
)
async def test_a_dotted_module_not_found_is_said_in_one_line(
    spawner: Spawner, tmp_path: Path, spec: str, said: str
) -> None:
    # A dotted module that is not there failed with a traceback of importlib's frames alone
    # (`importlib/__init__.py`, `<frozen importlib._bootstrap>`), where a file not found says
    # so in a line; a module that is there and fails at its own import keeps its traceback.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "imports_absent.py").write_text("import absent_dependency\n")
    frame = (await run(spawner, make_hook(tmp_path, action=Action.MODULE, target=spec))).frame
    assert frame.status is HookStatus.FAILED
    tail = frame.stderr_tail or ""
    assert "importlib" not in tail, tail
    if spec == "pkg.imports_absent":
        assert tail.startswith("Traceback (most recent call last):\n"), tail
        assert f'File "{tmp_path / "pkg" / "imports_absent.py"}", line 1' in tail, tail
        assert tail.endswith(f"{said}\n"), tail
    else:
        assert tail == f"{said} (no such module in {tmp_path} or the installed packages)\n"


#: A gate whose own children print on its stdout on the way to its answer.
CHILDREN_PRINT = """
import os, subprocess


def hook(given):
    subprocess.run(["echo", "checking the branch"], check=True)
    os.write(1, b"a line written to fd 1\\n")
    return {"refuse": {"reason": "not on main"}}
"""


@pytest.mark.parametrize("warm", ["on", "off"])
async def test_what_a_module_hook_s_children_print_is_not_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: str
) -> None:
    # Only `print` went to stderr: a subprocess the hook ran (git, a linter) and a write to
    # fd 1 landed on stdout before the answer, which made the whole of it plain text: the
    # refusal became advice, and the run went on.
    monkeypatch.setenv(WARM_ENV, warm)
    (tmp_path / "gate.py").write_text(CHILDREN_PRINT)
    hook = make_hook(tmp_path, action=Action.MODULE, target="gate.py", effect=Effect.ASK)
    async with open_spawner() as sp:
        frame = (await run(sp, hook)).frame
    assert frame.status is HookStatus.OK, to_json(frame)
    assert frame.advice == ()
    assert frame.refused is not None and frame.refused.reason == "not on main", to_json(frame)
    assert frame.stderr_tail == "checking the branch\na line written to fd 1\n"
    assert psutil.Process().children(recursive=True) == []


#: A gate that leaves a thread running (a library's worker, a `threading.Timer`) as it answers.
THREAD_LEFT = """
import threading, time


def hook(given):
    threading.Thread(target=time.sleep, args=(60,)).start()
    return {"refuse": {"reason": "not on main"}}
"""


#: A gate that closes its standard error before it answers.
STDERR_CLOSED = """
import sys


def hook(given):
    sys.stderr.close()
    return {"refuse": {"reason": "not on main"}}
"""


@pytest.mark.parametrize("warm", ["on", "off"])
@pytest.mark.parametrize("gate", [THREAD_LEFT, STDERR_CLOSED], ids=["thread", "stderr-closed"])
async def test_a_module_hook_that_leaves_a_thread_answers_when_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: str, gate: str
) -> None:
    # Started cold (keeper mode, MCPX_HOOKS_WARM=off), the runner's interpreter waited at its
    # exit for the hook's threads: the hook ran into its timeout, its answer was lost (a
    # refusal with it) while the same hook run warm answered at once. (And a stream the hook
    # closed must not fail the exit that ends it now.)
    monkeypatch.setenv(WARM_ENV, warm)
    (tmp_path / "gate.py").write_text(gate)
    hook = make_hook(
        tmp_path, action=Action.MODULE, target="gate.py", effect=Effect.ASK, timeout_ms=10_000
    )
    async with open_spawner() as sp:
        frame = (await run(sp, hook)).frame
    assert frame.status is HookStatus.OK, to_json(frame)
    assert frame.refused is not None and frame.refused.reason == "not on main", to_json(frame)
    assert frame.duration_ms < 5_000
    assert psutil.Process().children(recursive=True) == []


@pytest.mark.parametrize("size", [100_000, 3_000_000], ids=["over-a-pipe", "over-1-MiB"])
async def test_an_input_larger_than_a_pipe_costs_no_more_than_its_reading(
    spawner: Spawner, tmp_path: Path, size: int
) -> None:
    # A hook whose input the pipe could not hold whole read it only after the spawner's
    # held "started" (a second): one with a timeout under that always timed out.
    code = "import sys, json; print(json.dumps({'advise': str(len(sys.stdin.read()))}))"
    hook = make_hook(tmp_path, target=(PY, "-c", code), timeout_ms=900)
    ctx = attrs.evolve(CTX, input=({"big": "x" * size},))
    report = await run(spawner, hook, ctx)
    assert report.frame.status is HookStatus.OK, to_json(report.frame)
    assert int(report.frame.advice[0]) > size
    # A program that cannot start, its input still being written: failed, said as ever.
    missing = make_hook(tmp_path, target=(str(tmp_path / "missing"),), timeout_ms=900)
    report = await run(spawner, missing, ctx)
    assert report.frame.status is HookStatus.FAILED, to_json(report.frame)
    assert "cannot start" in (report.frame.reason or ""), to_json(report.frame)


async def test_module_runner_bounds_a_stalled_stdin(tmp_path: Path) -> None:
    """A writer that never closes stdin cannot hang the runner past its total bound."""
    from mcpx_hooks.supervisor.process.spawner import runner_path

    (tmp_path / "m.py").write_text("def hook(p):\n    return None\n")
    proc = await trio.lowlevel.open_process(
        [PY, "-I", "-S", runner_path("module_runner.py"), "m.py"],
        stdin=-1,
        stderr=-1,
        cwd=tmp_path,
        env={"MCPX_HOOK_TIMEOUT_MS": "300"},
    )
    try:
        assert proc.stdin is not None and proc.stderr is not None
        await proc.stdin.send_all(b'{"partial": ')
        with trio.fail_after(5):
            code = await proc.wait()
        err = await proc.stderr.receive_some(4096)
    finally:
        proc.kill()
        await proc.wait()
        for stream in (proc.stdin, proc.stderr):
            if stream is not None:
                await stream.aclose()
    assert code == 1
    assert b"stdin not finished within 0.3 s" in err


def test_the_variables_come_from_the_table_and_its_when() -> None:
    assert {fact_of(v) for v in VARIABLES} == {f.name for f in attrs.fields(HookFacts)}
    common = {
        "name": "h",
        "on": "script",
        "action": "run",
        "effect": "advise",
        "run_id": "r1",
        "timeout_ms": "5000",
        "scratch": "/s",
        "dir": "/d",
        "outcome": "error",
        "event_kind": "run.finished",
        "event_seq": "4",
    }
    always = [v.name for v in VARIABLES if v.when is When.ALWAYS]
    before = hook_variables(HookFacts(phase=Phase.BEFORE, **common))
    assert list(before) == always  # no outcome, no event: those are for other phases
    assert before["MCPX_HOOK_PROTOCOL"] == "1" and before["MCPX_HOOK_PHASE"] == "before"
    suffix = hook_variables(HookFacts(phase=Phase.SUFFIX, **common))
    assert set(suffix) - set(always) == {"MCPX_HOOK_OUTCOME"}
    observe = hook_variables(HookFacts(phase=Phase.OBSERVE, **common))
    assert set(observe) - set(always) == {"MCPX_HOOK_EVENT_KIND", "MCPX_HOOK_EVENT_SEQ"}
    assert observe["MCPX_HOOK_EVENT_SEQ"] == "4"
    unknown = hook_variables(HookFacts(phase=Phase.SUFFIX, **{**common, "outcome": None}))
    assert "MCPX_HOOK_OUTCOME" not in unknown
