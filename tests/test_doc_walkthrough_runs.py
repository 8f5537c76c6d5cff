"""docs/runs.md run for real: each `exec` command of its shell blocks as the page writes it, in
a scratch project (this checkout's `mcpx-hooks` first on PATH, a home of its own), and the lines
the page shows (the skip warning, the observe hooks' stderr) compared with what is printed.

The page names a `job.sh`, a `job.py`, a `data.txt` and a test suite for `pytest -q` without
showing them (`pytest` is a stand-in on PATH), and the hooks `lint`, `typecheck`, `notify`
and `upload` without their config: the test writes the smallest of each (said where)."""

from __future__ import annotations

import re
from pathlib import Path

from docpage import Scratch, block, commands, normal

PAGE = "runs.md"
RUN_LINE = re.compile(r"^run [0-9a-f]{16}: .+  \(sandbox workspace\)$")


def scratch(tmp_path: Path) -> Scratch:
    s = Scratch(tmp_path)
    # What the page's commands name but do not show.
    s.write("job.sh", '#!/bin/sh\necho "job $*"\n', mode=0o755)
    s.write("job.py", 'def main():\n    print("hi")\n    return 1\n')
    s.write("data.txt", "data\n")
    # `pytest -q`: a stand-in printing pytest's last line; the real one takes seconds to start
    # in the sandbox, and what is tested here is exec, not pytest.
    s.stand_in("pytest", 'echo "1 passed in 0.01s"')
    return s


def test_exec_first_block_runs_each_command(tmp_path: Path) -> None:
    s = scratch(tmp_path)
    first = block(PAGE, "mcpx-hooks exec -- ./job.sh arg", "sh")
    lines = commands(first.body)
    assert len(lines) == 6
    printed = []
    for command in lines:
        done = s.sh(command)
        printed.append(done.stdout)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        out = done.stdout.splitlines()
        if "--explain" in command:
            # Runs nothing: says what it would run, here nothing (no config).
            assert out == [f"a run of pytest -q in {s.proj}", "would run no hooks"], out
            continue
        assert RUN_LINE.match(out[0]), (command, out)
        assert out[-1].startswith("end: exit code 0, "), (command, out)
    # The values each command passes, as the readable view shows them.
    assert "| job arg" in printed[0] and "RESULT 1" in printed[1], printed
    assert "RESULT 42" in printed[2], printed


def test_a_closed_stdout_ends_exec_quietly(tmp_path: Path) -> None:
    s = scratch(tmp_path)
    text = (Path(__file__).parent.parent / "docs" / PAGE).read_text()
    command = re.search(r"`(mcpx-hooks exec --json -- \./job\.sh \| head -1)`", text)
    assert command, "the page's `| head -1` example"
    done = s.sh(command[1])
    out = done.stdout.splitlines()
    assert len(out) == 1 and '"type":"start"' in out[0], out
    assert done.stderr == "", done.stderr


def test_failed_and_cut_short_observe_hooks_are_said_as_the_page_shows(tmp_path: Path) -> None:
    s = scratch(tmp_path)
    # The page names two observe hooks without their config: one that exits 3, one still
    # running when drainMs (the default, 2000 ms) has passed.
    s.write(
        ".mcpx-hooks.toml",
        '[[hooks]]\nname = "notify"\non = "run.finished"\nrun = ["sh", "-c", "exit 3"]\n\n'
        '[[hooks]]\nname = "upload"\non = "run.finished"\nrun = ["sh", "-c", "exec sleep 60"]\n',
    )
    assert s.sh("mcpx-hooks trust").returncode == 0
    done = s.sh("mcpx-hooks exec -- ./job.sh")
    assert done.returncode == 0, done.stderr
    shown = block(PAGE, "observe hook notify").body
    assert normal(done.stderr) == normal(shown)


def skipping(tmp_path: Path) -> Scratch:
    s = scratch(tmp_path)
    # The page's hooks `lint` and `typecheck`, the smallest of each.
    s.write(
        ".mcpx-hooks.toml",
        '[[hooks]]\nname = "lint"\non = "script"\nphase = "before"\nrun = ["true"]\n\n'
        '[[hooks]]\nname = "typecheck"\non = "script"\nphase = "before"\nrun = ["true"]\n',
    )
    assert s.sh("mcpx-hooks trust").returncode == 0
    return s


def test_skip_only_and_the_variable_leave_hooks_out(tmp_path: Path) -> None:
    s = skipping(tmp_path)
    skip, only, variable = commands(block(PAGE, "--skip lint --skip typecheck", "sh").body)
    left_out = {
        skip: "warning: hooks left out of this run: lint (--skip), typecheck (--skip)",
        only: "warning: hooks left out of this run: typecheck (not named by --only)",
        variable: "warning: hooks left out of this run: lint (MCPX_HOOKS_SKIP), "
        "typecheck (MCPX_HOOKS_SKIP)",
    }
    for command, warning in left_out.items():
        done = s.sh(command)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        out = done.stdout.splitlines()
        assert out[1] == warning, (command, out)  # right after `start`
        ran = {m[1] for m in re.finditer(r"^hook (\w+) ", done.stdout, flags=re.MULTILINE)}
        assert ran == ({"lint"} if command == only else set()), (command, out)


def test_the_pages_warning_line_is_what_a_mixed_skip_prints(tmp_path: Path) -> None:
    s = skipping(tmp_path)
    shown = block(PAGE, "warning: hooks left out of this run").body
    done = s.sh("mcpx-hooks exec --skip lint -- pytest -q", MCPX_HOOKS_SKIP="typecheck")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == shown.strip()
    # A name no hook has, given by flag, is an error that runs nothing.
    typo = s.sh("mcpx-hooks exec --skip lnit -- ./job.sh")
    assert typo.returncode == 2 and "run " not in typo.stdout, typo.stdout
