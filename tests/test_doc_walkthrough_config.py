"""docs/config.md run for real, in a scratch git repository with an `origin` of its own: the
page's `lint` hook (`when.files`) as it writes it, and its CI line `git diff --name-only
origin/main... | mcpx-hooks exec --files-from - -- pytest -q` as written: the hook runs when
the branch changed a Python file and not otherwise; and the validation messages the page
shows, printed by `validate` for files holding what they name.

Substituted: `origin` is a bare repository beside the clone (no network); `pytest -q` is a
stand-in on PATH (what is tested is exec's file list, not pytest). The page's `ruff` is the
ruff of this checkout's environment. In the `parallel` example, `codespell` is a stand-in on
PATH and `tools/check-links.sh` (not shown on the page) the smallest script; that the two run
at once is not observed here (tests/test_parallel_hooks.py does), their frames' order and the
refusal of a parallel hook that could ask are. The reference table of every key is validated
by tests/test_doc_configs.py, not run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from docpage import DOCS, Scratch, block, commands, normal

PAGE = "config.md"


def git(s: Scratch, *args: str, cwd: Path | None = None) -> None:
    done = s.sh("git " + " ".join(args), cwd=cwd)
    assert done.returncode == 0, (args, done.stderr)


def test_files_from_stdin_in_ci(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    if None in (shutil.which("ruff", path=s.env["PATH"]), shutil.which("git")):
        pytest.skip("the page's hook runs ruff, in a git checkout")
    s.env.update(
        GIT_AUTHOR_NAME="dev", GIT_AUTHOR_EMAIL="dev@example.org",
        GIT_COMMITTER_NAME="dev", GIT_COMMITTER_EMAIL="dev@example.org",
        GIT_CONFIG_GLOBAL="/dev/null",
    )  # fmt: skip
    s.stand_in("pytest", 'echo "1 passed in 0.01s"')
    git(s, "init", "-q", "--bare", "-b", "main", str(s.root / "origin.git"), cwd=s.root)
    git(s, "init", "-q", "-b", "main")
    s.write(".gitignore", ".bin/\n")
    s.write(".mcpx-hooks.toml", block(PAGE, 'name = "lint"', "toml").body)
    s.write("README.md", "# the project\n")
    git(s, "add", "-A")
    git(s, "commit", "-qm", "start")
    git(s, "remote", "add", "origin", "../origin.git")
    git(s, "push", "-q", "origin", "main")
    assert s.sh("mcpx-hooks trust").returncode == 0
    (ci,) = commands(block(PAGE, "--files-from -", "sh").body)

    # A branch that changed only the README: the lint hook does not run.
    git(s, "checkout", "-q", "-b", "docs")
    s.write("README.md", "# the project, told better\n")
    git(s, "commit", "-qam", "docs")
    done = s.sh(ci)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hook lint" not in done.stdout and "| 1 passed in 0.01s" in done.stdout

    # A branch that added a Python file: it runs, and passes on a clean file...
    s.write("app.py", "x = 1\n")
    git(s, "add", "app.py")
    git(s, "commit", "-qm", "app")
    done = s.sh(ci)
    assert done.returncode == 0, done.stdout + done.stderr
    assert normal(done.stdout)[1:3] == [
        "hook lint (script.before, run, sandbox strict): ok in N ms",
        "  effect ask",
    ]
    # ... and refuses the run (fail-closed) on a file ruff finds fault with.
    s.write("app.py", "import os\n")
    git(s, "commit", "-qam", "unused")
    done = s.sh(ci)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "ERROR refused by lint: lint failed (failed): exited with status 1" in done.stdout
    assert "1 passed" not in done.stdout


def test_validation_messages_as_the_page_shows(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    s.write(
        ".mcpx-hooks.toml",
        '[[hooks]]\non = "script"\nphase = "before"\nrun = "echo hi"\n\n'
        '[[hooks]]\non = "script"\nphase = "before"\nrun = ["true"]\ntimeoutMS = 5000\n',
    )
    done = s.sh("mcpx-hooks validate .mcpx-hooks.toml")
    assert done.returncode == 2
    assert normal(done.stdout) == normal(block(PAGE, "/hooks/1/timeoutMS", "").body)

    s.write("c.toml", '[[hooks]]\non = "script"\nphase = "before"\nrun = ["echo", "x\\u0000y"]\n'
            'env = { "A=B" = "1" }\n')  # fmt: skip
    done = s.sh("mcpx-hooks validate c.toml")
    assert done.returncode == 2
    assert normal(done.stdout) == normal(block(PAGE, "c.toml:/hooks/0/env/A=B", "").body)


def test_parallel_hooks_keep_declaration_order(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    s.stand_in("codespell", "echo no misspellings")
    s.write("tools/check-links.sh", "echo every link answers\n")
    config = block(PAGE, 'name = "spelling"', "toml").body
    s.write(".mcpx-hooks.toml", config)
    assert s.sh("mcpx-hooks trust").returncode == 0
    done = s.sh("mcpx-hooks exec -- true")
    assert done.returncode == 0, done.stdout + done.stderr
    hooks = [line for line in normal(done.stdout) if line.startswith(("hook ", "  advice"))]
    assert hooks == [
        "hook spelling (script.onSuccess, run, sandbox strict): ok in N ms",
        "  advice: no misspellings",
        "hook links (script.onSuccess, run, sandbox strict): ok in N ms",
        "  advice: every link answers",
        "  advice: 2 pieces, shown under the hooks that gave it",
    ], done.stdout
    # A parallel hook whose effect could be more than advise is refused, as the page says.
    s.write(
        ".mcpx-hooks.toml", config.replace("parallel = true", 'parallel = true\neffect = "ask"', 1)
    )
    done = s.sh("mcpx-hooks validate")
    assert done.returncode == 2
    said = re.search(r"\(`(/hooks/0/parallel: [^`]+)`\)", (DOCS / PAGE).read_text())
    assert said
    head, _, tail = " ".join(said[1].split()).partition(" … ")  # wrapped on the page
    (line,) = [x for x in done.stdout.splitlines() if "/hooks/0/parallel" in x]
    assert head in line and tail in line.partition(head)[2], line


def test_what_is_refused_names_every_point_a_hook_may_take() -> None:
    """ "A point nothing fires" is refused: the page names the points that something fires, as
    `validate`'s message does (it said "today only `script`", though `call` and `server.start`
    hooks are declared on the same page and on tool-servers.md)."""
    from mcpx_hooks.supervisor.core.points import POINTS

    text = " ".join((DOCS / PAGE).read_text().split())
    said = re.search(r"a point nothing fires \(([^)]*)\)", text)
    assert said is not None
    named = set(re.findall(r"`([a-z.]+)`", said[1].split(";")[0]))
    assert named == set(POINTS), said[0]
