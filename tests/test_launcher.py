"""The Python launcher as a real process: phase order, result and exception lines, the helper."""

from __future__ import annotations

import importlib.resources
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest

LAUNCHER = str(importlib.resources.files("mcpx_hooks.runners") / "launcher.py")
#: A guard against a hung child, never reached by a passing test.
PROCESS_BOUND_S = 30

#: Each phase prints a marker on stdout, so stdout tells the order they ran in.
MARKERS: dict[str, list[str]] = {
    "before": ["print('[before]')"],
    "prefix": ["print('[prefix]')"],
    "onSuccess": ["print('[onSuccess]', repr(result))"],
    "onError": ["print('[onError]', type(error).__name__, error)"],
    "suffix": ["print('[suffix]')"],
}


@attrs.frozen
class Launched:
    returncode: int
    stdout: str
    stderr: str
    frames: list[dict[str, Any]]

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def launch(
    tmp_path: Path,
    script: str | None = None,
    *,
    code: str | None = None,
    sources: dict[str, list[str]] | None = None,
    paths: list[str] | None = None,
    with_frames_fd: bool = True,
) -> Launched:
    """Runs the launcher on `script` (written to tmp_path/job.py) or `code`, cwd tmp_path.

    The frames pipe is read after the process exits, so a test writes well under the pipe's
    64 KiB buffer.
    """
    file = None
    if script is not None:
        job = tmp_path / "job.py"
        job.write_text(textwrap.dedent(script))
        file = str(job)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "file": file,
                "code": None if code is None else textwrap.dedent(code),
                "sources": MARKERS if sources is None else sources,
                "paths": paths or [],
            }
        )
    )
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "MCPX_ARTIFACTS_DIR": str(artifacts)}
    fds_before = open_fds()
    read_end, write_end = os.pipe()
    try:
        if with_frames_fd:
            env["MCPX_FRAMES_FD"] = str(write_end)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-B", LAUNCHER, str(plan)],
                cwd=tmp_path,
                env=env,
                pass_fds=(write_end,),
                capture_output=True,
                text=True,
                timeout=PROCESS_BOUND_S,
                check=False,
            )
        finally:
            os.close(write_end)
        with os.fdopen(read_end, "rb", closefd=False) as reader:
            raw = reader.read().decode()
    finally:
        os.close(read_end)
    assert open_fds() == fds_before
    assert raw == "" or raw.endswith("\n")
    return Launched(
        done.returncode, done.stdout, done.stderr, [json.loads(x) for x in raw.splitlines()]
    )


def test_success_runs_the_phases_in_order_and_sends_mains_result(tmp_path: Path) -> None:
    out = launch(
        tmp_path,
        """
        print("[body]")

        def main():
            print("[main]")
            return {"n": 1}
        """,
    )
    assert out.returncode == 0, out.stderr
    assert out.lines == [
        "[before]",
        "[prefix]",
        "[body]",
        "[main]",
        "[onSuccess] {'n': 1}",
        "[suffix]",
    ]
    assert out.frames == [{"type": "result", "value": {"n": 1}}]
    assert out.stderr == ""


def test_an_async_main_is_awaited(tmp_path: Path) -> None:
    out = launch(
        tmp_path,
        """
        import asyncio

        async def main():
            await asyncio.sleep(0)
            return [1, 2]
        """,
    )
    assert out.returncode == 0, out.stderr
    assert out.lines == ["[before]", "[prefix]", "[onSuccess] [1, 2]", "[suffix]"]
    assert out.frames == [{"type": "result", "value": [1, 2]}]


def test_a_script_without_main_has_a_null_result(tmp_path: Path) -> None:
    out = launch(tmp_path, "print('[body]')\n")
    assert out.returncode == 0, out.stderr
    assert out.lines == ["[before]", "[prefix]", "[body]", "[onSuccess] None", "[suffix]"]
    assert out.frames == [{"type": "result", "value": None}]


def test_the_last_mcpx_result_call_is_the_result_sent_once(tmp_path: Path) -> None:
    out = launch(tmp_path, "import mcpx\nmcpx.result(4)\nmcpx.result(5)\n")
    assert out.returncode == 0, out.stderr
    assert out.lines == ["[before]", "[prefix]", "[onSuccess] 5", "[suffix]"]
    assert out.frames == [{"type": "result", "value": 5}]


def test_main_returning_none_falls_back_to_mcpx_result(tmp_path: Path) -> None:
    out = launch(tmp_path, "import mcpx\n\ndef main():\n    mcpx.result('set')\n")
    assert out.frames == [{"type": "result", "value": "set"}]


def test_on_success_may_rebind_the_result(tmp_path: Path) -> None:
    sources = {"onSuccess": ["result = result * 10"]}
    out = launch(tmp_path, "def main():\n    return 4\n", sources=sources)
    assert out.frames == [{"type": "result", "value": 40}]


def test_failure_in_main_runs_on_error_and_suffix_and_rethrows(tmp_path: Path) -> None:
    script = """\
    def helper():
        raise ValueError("no good")

    def main():
        print("[main]")
        helper()
    """
    out = launch(tmp_path, script)
    assert out.returncode == 1
    assert out.lines == [
        "[before]",
        "[prefix]",
        "[main]",
        "[onError] ValueError no good",
        "[suffix]",
    ]
    assert out.frames == [
        {"type": "exception", "exceptionType": "ValueError", "message": "no good"}
    ]
    job = tmp_path / "job.py"
    assert f'File "{job}", line 6, in main\n    helper()' in out.stderr
    assert f'File "{job}", line 2, in helper\n    raise ValueError("no good")' in out.stderr
    assert out.stderr.rstrip().endswith("ValueError: no good")
    # The traceback is the one Python gives the script run alone: the launcher's own frames
    # leading into it are left out, its program's call of the script too.
    assert LAUNCHER not in out.stderr
    assert "<mcpx-hooks launcher>" not in out.stderr and "run_script" not in out.stderr
    assert out.stderr.startswith(f'Traceback (most recent call last):\n  File "{job}", line 6')


def test_a_failure_from_a_spliced_line_shows_that_line(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text("def fail():\n    raise ValueError('spliced')\n")
    sources = {**MARKERS, "onSuccess": ["from lib import fail", "fail()"]}
    out = launch(tmp_path, "pass\n", sources=sources)
    assert out.returncode == 1
    assert 'File "<mcpx-hooks launcher>", line ' in out.stderr
    assert "\n    fail()\n" in out.stderr  # the spliced line's text, from the program
    assert f'File "{tmp_path / "lib.py"}", line 2, in fail' in out.stderr
    assert "run_script" not in out.stderr


def test_a_top_level_raise_counts_as_the_body_failing(tmp_path: Path) -> None:
    out = launch(tmp_path, "print('[body]')\nraise RuntimeError('at import')\n")
    assert out.returncode == 1
    assert out.lines == [
        "[before]",
        "[prefix]",
        "[body]",
        "[onError] RuntimeError at import",
        "[suffix]",
    ]
    assert out.of_type("exception") == [
        {"type": "exception", "exceptionType": "RuntimeError", "message": "at import"}
    ]
    assert f'File "{tmp_path / "job.py"}", line 2, in <module>' in out.stderr


def test_a_syntax_error_in_the_script_counts_as_the_body_failing(tmp_path: Path) -> None:
    out = launch(tmp_path, "x = 1\ndef broken(:\n")
    assert out.returncode == 1
    assert out.lines[:2] == ["[before]", "[prefix]"]
    assert out.lines[2].startswith("[onError] SyntaxError")
    assert out.lines[3:] == ["[suffix]"]
    [exception] = out.of_type("exception")
    assert exception["exceptionType"] == "SyntaxError"
    assert f'File "{tmp_path / "job.py"}", line 2' in out.stderr


@pytest.mark.parametrize("given", ["file", "code"])
def test_a_script_that_does_not_compile_shows_python_s_error_without_our_frames(
    tmp_path: Path, given: str
) -> None:
    # `exec --python bad.py` (and `-c`) printed a traceback through the launcher's own
    # frames (launcher.py, `<mcpx-hooks launcher>`, run_script) above the SyntaxError.
    text = "x = 1\ndef broken(:\n"
    out = launch(tmp_path, text) if given == "file" else launch(tmp_path, code=text)
    assert out.returncode == 1
    where = str(tmp_path / "job.py") if given == "file" else "<mcpx-hooks -c>"
    assert out.stderr.startswith(f'  File "{where}", line 2\n    def broken(:\n'), out.stderr
    assert out.stderr.rstrip().endswith("SyntaxError: invalid syntax")
    assert "Traceback" not in out.stderr and LAUNCHER not in out.stderr
    assert "<mcpx-hooks launcher>" not in out.stderr and "run_script" not in out.stderr


def test_a_syntax_error_the_script_raises_keeps_the_script_s_frame(tmp_path: Path) -> None:
    out = launch(tmp_path, "def main():\n    compile('(', 'x', 'exec')\n")
    assert out.returncode == 1
    assert out.stderr.startswith("Traceback (most recent call last):\n")
    assert f'File "{tmp_path / "job.py"}", line 2, in main' in out.stderr
    assert LAUNCHER not in out.stderr and "run_script" not in out.stderr


@pytest.mark.parametrize("what", ["gone", "a directory"])
def test_a_script_that_cannot_be_read_is_said_in_one_line_not_a_traceback(
    tmp_path: Path, what: str
) -> None:
    # `exec --python gone.py` printed a traceback of the launcher's own frames.
    job = tmp_path / "job.py"
    if what == "a directory":
        job.mkdir()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"file": str(job), "code": None, "sources": MARKERS, "paths": []}))
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", LAUNCHER, str(plan)],
        cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")},
        capture_output=True, text=True, timeout=PROCESS_BOUND_S, check=False,
    )  # fmt: skip
    error, why = (
        ("FileNotFoundError [Errno 2]", "No such file or directory")
        if what == "gone"
        else ("IsADirectoryError [Errno 21]", "Is a directory")
    )
    # The run fails with the error, its onError lines see it, the suffix runs.
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "[before]",
        "[prefix]",
        f"[onError] {error} {why}: '{job}'",
        "[suffix]",
    ]
    # (without a frames fd, the error's frame goes to stderr too, as `mcpx: {…}`)
    said = [line for line in done.stderr.splitlines() if not line.startswith("mcpx: ")]
    assert said == [f"mcpx-hooks launcher: cannot read the script {job}: {why}"]


def test_a_script_s_own_module_named_as_ours_is_not_mistaken_for_it(tmp_path: Path) -> None:
    # The launcher loads a module of its own folder when it prints a traceback: a script's
    # module of that name, imported already, must neither stand in for it nor be replaced.
    (tmp_path / "module_runner.py").write_text("MINE = True\n")
    script = """\
    import sys
    import module_runner

    def main():
        print("[mine]", module_runner.MINE)
        raise ValueError("no good")
    """
    out = launch(tmp_path, script)
    assert out.returncode == 1
    assert "[mine] True" in out.lines
    assert "Error in sys.excepthook" not in out.stderr, out.stderr
    assert out.stderr.rstrip().endswith("ValueError: no good"), out.stderr
    assert LAUNCHER not in out.stderr


def test_sys_exit_with_a_code_is_a_failure_with_that_exit_code(tmp_path: Path) -> None:
    out = launch(tmp_path, "import sys\n\ndef main():\n    sys.exit(3)\n")
    assert out.returncode == 3
    assert out.lines == ["[before]", "[prefix]", "[onError] SystemExit 3", "[suffix]"]
    assert out.frames == [{"type": "exception", "exceptionType": "SystemExit", "message": "3"}]
    assert out.stderr == ""


def test_sys_exit_zero_is_a_success(tmp_path: Path) -> None:
    out = launch(tmp_path, "import sys, mcpx\nmcpx.result('done')\nsys.exit(0)\nprint('never')\n")
    assert out.returncode == 0, out.stderr
    assert out.lines == ["[before]", "[prefix]", "[onSuccess] 'done'", "[suffix]"]
    assert out.frames == [{"type": "result", "value": "done"}]


def test_keyboard_interrupt_ends_the_process_by_sigint(tmp_path: Path) -> None:
    out = launch(tmp_path, "raise KeyboardInterrupt\n")
    assert out.returncode == -signal.SIGINT
    assert out.lines[-2:] == ["[onError] KeyboardInterrupt ", "[suffix]"]
    assert out.frames == [
        {"type": "exception", "exceptionType": "KeyboardInterrupt", "message": ""}
    ]


def test_the_script_is_not_main(tmp_path: Path) -> None:
    script = """\
    print("[body]", __name__)
    if __name__ == "__main__":
        print("[main block]")
    """
    out = launch(tmp_path, script, sources={})
    assert out.returncode == 0, out.stderr
    assert out.lines == ["[body] __mcpx_script__"]


def test_the_script_sees_its_file_argv_and_path(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "extra_mod.py").write_text("VALUE = 'from paths'\n")
    script = """\
    import sys, extra_mod

    def main():
        return {"file": __file__, "argv": sys.argv, "first": sys.path[0],
                "last": sys.path[-1], "value": extra_mod.VALUE,
                "line_buffering": sys.stdout.line_buffering}
    """
    out = launch(tmp_path, script, sources={}, paths=[str(lib)])
    job = str(tmp_path / "job.py")
    assert out.frames == [
        {
            "type": "result",
            "value": {
                "file": job,
                "argv": [job],
                "first": str(tmp_path),
                "last": str(lib),
                "value": "from paths",
                "line_buffering": True,
            },
        }
    ]


def test_code_runs_like_python_dash_c(tmp_path: Path) -> None:
    code = """\
    import os, sys
    print("[body]", sys.argv, sys.path[0] == os.getcwd(), __name__)
    def main():
        return 7
    """
    out = launch(tmp_path, code=code)
    assert out.returncode == 0, out.stderr
    assert out.lines == [
        "[before]",
        "[prefix]",
        "[body] ['-c'] True __mcpx_script__",
        "[onSuccess] 7",
        "[suffix]",
    ]
    assert out.frames == [{"type": "result", "value": 7}]


def test_a_failure_in_code_shows_its_line(tmp_path: Path) -> None:
    out = launch(tmp_path, code="x = 1\nraise LookupError(x)\n", sources={})
    assert out.returncode == 1
    assert 'File "<mcpx-hooks -c>", line 2, in <module>\n    raise LookupError(x)' in out.stderr


def test_log_and_emit_lines(tmp_path: Path) -> None:
    script = """\
    import mcpx

    def main():
        mcpx.log("starting", step=1, tags=["a"])
        mcpx.emit({"progress": 0.5})
        mcpx.log("careful", "warning")
        mcpx.log("odd attr", thing=object)
        return mcpx.artifacts_dir()
    """
    out = launch(tmp_path, script, sources={"prefix": ["mcpx.log('from prefix')"]})
    assert out.returncode == 0, out.stderr
    assert out.frames == [
        {"type": "log", "level": "info", "message": "from prefix", "attrs": {}},
        {
            "type": "log",
            "level": "info",
            "message": "starting",
            "attrs": {"step": 1, "tags": ["a"]},
        },
        {"type": "emit", "value": {"progress": 0.5}},
        {"type": "log", "level": "warning", "message": "careful", "attrs": {}},
        {
            "type": "log",
            "level": "info",
            "message": "odd attr",
            "attrs": {"thing": "<class 'object'>"},
        },
        {"type": "result", "value": str(tmp_path / "artifacts")},
    ]


def test_an_unknown_log_level_is_refused(tmp_path: Path) -> None:
    out = launch(tmp_path, "import mcpx\nmcpx.log('x', 'loud')\n", sources={})
    assert out.returncode == 1
    [exception] = out.frames
    assert exception["exceptionType"] == "ValueError"
    assert "'loud'" in exception["message"]


def test_names_from_before_are_visible_later(tmp_path: Path) -> None:
    sources = {
        "before": ["import os", "SEEN = []", "def note(x):", "    SEEN.append(x)"],
        "prefix": ["note('prefix')"],
        "onSuccess": ["note('onSuccess')", "print(os.sep, SEEN, result)"],
    }
    out = launch(tmp_path, "def main():\n    return 'r'\n", sources=sources)
    assert out.returncode == 0, out.stderr
    assert out.lines == ["/ ['prefix', 'onSuccess'] r"]


def test_a_result_that_is_not_json_is_sent_as_its_repr(tmp_path: Path) -> None:
    script = """\
    class Point:
        def __repr__(self):
            return "Point(1, 2)"

    def main():
        return Point()
    """
    out = launch(tmp_path, script, sources={})
    assert out.returncode == 0, out.stderr
    [warning, result] = out.frames
    assert warning["type"] == "log"
    assert warning["level"] == "warning"
    assert "not JSON-serialisable" in warning["message"]
    assert warning["attrs"] == {"valueType": "Point"}
    assert result == {"type": "result", "value": "Point(1, 2)"}


def test_nan_is_not_json(tmp_path: Path) -> None:
    out = launch(tmp_path, "def main():\n    return float('nan')\n", sources={})
    assert out.of_type("result") == [{"type": "result", "value": "nan"}]
    assert len(out.of_type("log")) == 1


def test_without_a_frames_fd_lines_go_to_stderr(tmp_path: Path) -> None:
    out = launch(
        tmp_path,
        "import mcpx\n\ndef main():\n    mcpx.emit(1)\n    return 2\n",
        sources={},
        with_frames_fd=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.frames == []
    assert out.stderr.splitlines() == [
        'mcpx: {"type":"emit","value":1}',
        'mcpx: {"type":"result","value":2}',
    ]


def test_a_failing_on_success_line_fails_the_run(tmp_path: Path) -> None:
    sources = {**MARKERS, "onSuccess": ["assert result > 10, 'too small'"]}
    out = launch(tmp_path, "def main():\n    return 4\n", sources=sources)
    assert out.returncode == 1
    assert out.lines == ["[before]", "[prefix]", "[onError] AssertionError too small", "[suffix]"]
    assert out.frames == [
        {"type": "exception", "exceptionType": "AssertionError", "message": "too small"}
    ]


def test_a_failing_on_error_line_does_not_replace_the_error(tmp_path: Path) -> None:
    sources = {**MARKERS, "onError": ["print('[onError]')", "undefined_name"]}
    out = launch(tmp_path, "raise ValueError('original')\n", sources=sources)
    assert out.returncode == 1
    assert out.lines == ["[before]", "[prefix]", "[onError]", "[suffix]"]
    [log, exception] = out.frames
    assert log["level"] == "error"
    assert log["attrs"] == {"phase": "onError", "exceptionType": "NameError"}
    assert exception == {"type": "exception", "exceptionType": "ValueError", "message": "original"}
    assert "script.onError lines failed" in out.stderr
    assert out.stderr.rstrip().endswith("ValueError: original")


def test_a_failing_suffix_line_does_not_change_a_success(tmp_path: Path) -> None:
    sources = {"suffix": ["print('[suffix]')", "1 / 0"]}
    out = launch(tmp_path, "def main():\n    return 1\n", sources=sources)
    assert out.returncode == 0
    assert out.lines == ["[suffix]"]
    [result, log] = out.frames
    assert result == {"type": "result", "value": 1}
    assert log["attrs"] == {"phase": "suffix", "exceptionType": "ZeroDivisionError"}
    assert 'File "<mcpx-hooks launcher>"' in out.stderr
    assert "1 / 0" in out.stderr


def test_a_failing_before_line_stops_everything(tmp_path: Path) -> None:
    sources = {**MARKERS, "before": ["raise OSError('no deps')"]}
    out = launch(tmp_path, "print('[body]')\n", sources=sources)
    assert out.returncode == 1
    assert out.lines == []
    assert out.frames == [{"type": "exception", "exceptionType": "OSError", "message": "no deps"}]


def test_a_phase_that_is_not_python_is_a_launcher_error(tmp_path: Path) -> None:
    out = launch(tmp_path, "print('[body]')\n", sources={"onError": ["print(error"]})
    assert out.returncode == 2
    assert out.lines == []
    assert out.stderr.startswith("mcpx-hooks launcher: script.onError line 1:")
    [exception] = out.frames
    assert exception["exceptionType"] == "LauncherError"


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"sources": {}}, "exactly one of `file` and `code`"),
        ({"code": "1", "sources": {"observe": []}}, "no phase 'observe'"),
        ({"code": "1", "sources": {"before": "import os"}}, "must be a list of strings"),
        ({"code": "1", "extra": 1}, "unknown plan keys: extra"),
    ],
)
def test_a_bad_plan_is_a_launcher_error(tmp_path: Path, plan: dict[str, Any], message: str) -> None:
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", LAUNCHER, str(tmp_path / "plan.json")],
        env={},
        capture_output=True,
        text=True,
        timeout=PROCESS_BOUND_S,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines()[0].startswith("mcpx-hooks launcher: ")
    assert message in done.stderr


def test_lines_from_threads_stay_whole(tmp_path: Path) -> None:
    script = """\
    import threading, mcpx

    def chatter(n):
        for i in range(50):
            mcpx.log("x" * 100, thread=n, i=i)

    def main():
        threads = [threading.Thread(target=chatter, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    """
    out = launch(tmp_path, script, sources={})
    assert out.returncode == 0, out.stderr
    logs = out.of_type("log")
    assert sorted((f["attrs"]["thread"], f["attrs"]["i"]) for f in logs) == [
        (n, i) for n in range(4) for i in range(50)
    ]


def test_the_script_module_is_importable_by_its_name(tmp_path: Path) -> None:
    script = """\
    import dataclasses, pickle

    @dataclasses.dataclass
    class Point:
        x: "int"

    def main():
        return pickle.loads(pickle.dumps(Point(3))).x
    """
    out = launch(tmp_path, script, sources={})
    assert out.frames == [{"type": "result", "value": 3}], out.stderr
