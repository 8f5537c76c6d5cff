"""`init --from`: pre-commit's and lefthook's files converted to run hooks, what was not
converted listed with why, hostile YAML refused naming the file; and the whole story: a
repository with local pre-commit hooks, converted, then `exec` running a hook only when its
files changed, and `MCPX_HOOKS_SKIP` leaving it out."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from operator_day import git, hook_frames, mcpx, new_repo, warnings

from mcpx_hooks.supervisor.config.regexglob import brace_globs, regex_globs

PRE_COMMIT = r"""
repos:
  - repo: local
    hooks:
      - id: lint
        name: Lint the Python
        entry: python3 -c "print('lint ran')"
        language: system
        files: \.py$
        pass_filenames: false
      - id: docs
        entry: tools/check-docs --strict
        language: script
        files: ^docs/
      - id: types
        entry: mypy
        args: [--strict]
        language: system
        types: [python]
        exclude: ^tests/
      - id: odd
        entry: odd
        language: system
        files: '[a-z]+\.py$'
      - id: env
        entry: black
        language: python
      - id: msg
        entry: check-msg
        language: system
        stages: [commit-msg]
  - repo: https://github.com/psf/black
    rev: 24.1.0
    hooks:
      - id: black
"""

LEFTHOOK = """
min_version: 1.5.0
pre-commit:
  parallel: true
  commands:
    eslint:
      glob: "*.{js,ts}"
      run: npx eslint {staged_files}
    pipes:
      run: git diff --cached --name-only | grep -q . && echo changed
      root: frontend/
    types:
      root: web/
      glob: "*.ts"
      run: npx tsc --noEmit
      exclude: "*.min.js"
  scripts:
    "hello.sh":
      runner: bash
commit-msg:
  commands:
    lint-msg:
      run: commitlint --edit
"""


def convert(where: Path, name: str, text: str):  # type: ignore[no-untyped-def]
    (where / name).write_text(text)
    out = mcpx("init", "--from", name, cwd=where, home=where / "home")
    return out


def written(where: Path) -> dict[str, dict[str, object]]:
    doc = tomllib.loads((where / ".mcpx-hooks.toml").read_text())
    return {h["name"]: h for h in doc["hooks"]}


def test_pre_commit_local_system_hooks_become_run_hooks(tmp_path: Path) -> None:
    out = convert(tmp_path, ".pre-commit-config.yaml", PRE_COMMIT)
    assert out.returncode == 0, out.stdout + out.stderr
    hooks = written(tmp_path)
    assert list(hooks) == ["lint", "docs", "types", "odd"]
    lint = hooks["lint"]
    assert lint["run"] == ["python3", "-c", "print('lint ran')"]
    assert lint["when"] == {"files": ["*.py"]}
    assert (lint["on"], lint["phase"], lint["effect"], lint["failure"]) == (
        "script", "before", "ask", "closed",
    )  # fmt: skip
    assert hooks["docs"]["run"] == ["./tools/check-docs", "--strict"]
    assert hooks["docs"]["when"] == {"files": ["docs/**"]}
    assert hooks["types"]["run"] == ["mypy", "--strict"]
    assert hooks["types"]["when"] == {"files": ["*.py", "*.pyi"]}
    assert "when" not in hooks["odd"]
    # What was not converted, and why, on stdout and in the file.
    said = out.stdout
    assert "not converted (3):" in said
    assert "repos[0].hooks[4] (env): language 'python' needs an environment" in said
    assert "repos[0].hooks[5] (msg): stages ['commit-msg'] have no moment" in said
    assert "repos[1].hooks[0] (black): from https://github.com/psf/black" in said
    assert "files regex '[a-z]+\\\\.py$' has no exact glob" in said
    assert "exclude '^tests/' not converted" in said
    assert "# Not converted:" in (tmp_path / ".mcpx-hooks.toml").read_text()
    check = mcpx("validate", ".mcpx-hooks.toml", cwd=tmp_path, home=tmp_path / "home")
    assert check.returncode == 0, check.stdout + check.stderr


PRE_COMMIT_MORE = r"""
default_stages: [pre-push]
exclude: ^(docs/|vendor/)
repos:
  - repo: local
    hooks:
      - id: typed
        entry: mypy
        language: system
        types_or: [python, pyi]
        stages: [pre-commit]
      - id: pushed
        entry: make check
        language: system
        pass_filenames: false
      - id: no-orig
        name: no .orig files
        entry: do not commit .orig files
        language: fail
        files: \.orig$
      - id: no-breakpoints
        entry: 'breakpoint\(\)'
        language: pygrep
        types: [python]
"""


def test_pre_commit_s_stages_filters_of_every_hook_and_fail_hooks(readable_tmp: Path) -> None:
    out = convert(readable_tmp, ".pre-commit-config.yaml", PRE_COMMIT_MORE)
    assert out.returncode == 0, out.stdout + out.stderr
    hooks = written(readable_tmp)
    assert list(hooks) == ["typed", "pushed", "no-orig"]
    assert hooks["typed"]["when"] == {"files": ["*.py", "*.pyi"]}  # *.pyi once
    said = out.stdout
    # The config's default stage is pre-push: said for the hooks that take it, not the other.
    assert said.count("pre-commit ran it before a push; here it runs before every run") == 2
    assert "before a push" not in said.partition("  typed:")[2].partition("  pushed:")[0]
    assert "pushed: make check on every run\n    pre-commit ran it before a push" in said
    # Its exclude of every hook is listed, not lost.
    assert "exclude '^(docs/|vendor/)' (of every hook): not converted" in said
    # A `fail` hook prints its entry and fails, where its files changed.
    assert hooks["no-orig"]["when"] == {"files": ["*.orig"]}
    assert hooks["no-orig"]["run"][-1] == "do not commit .orig files"
    assert "language 'pygrep' searches the files pre-commit passes it" in said
    home = readable_tmp / "home"
    assert mcpx("trust", ".mcpx-hooks.toml", cwd=readable_tmp, home=home).returncode == 0
    test = mcpx("hook", "test", "no-orig", cwd=readable_tmp, home=home)
    assert test.returncode == 3, test.stdout + test.stderr
    assert "| do not commit .orig files" in test.stdout


def test_lefthook_commands_and_scripts(tmp_path: Path) -> None:
    out = convert(tmp_path, "lefthook.yml", LEFTHOOK)
    assert out.returncode == 0, out.stdout + out.stderr
    hooks = written(tmp_path)
    assert list(hooks) == ["eslint", "pipes", "types", "hello.sh"]
    assert hooks["types"]["when"] == {"files": ["web/**/*.ts"]}
    assert hooks["eslint"]["run"] == ["npx", "eslint"]  # the file template dropped
    assert hooks["eslint"]["when"] == {"files": ["*.js", "*.ts"]}
    assert hooks["pipes"]["run"] == [
        "sh", "-c", "git diff --cached --name-only | grep -q . && echo changed",
    ]  # fmt: skip
    assert hooks["pipes"]["cwd"] == "frontend"
    assert "when" not in hooks["pipes"]
    assert hooks["hello.sh"]["run"] == ["bash", ".lefthook/pre-commit/hello.sh"]
    said = out.stdout
    assert "commit-msg: a git hook with no moment in a script run" in said
    assert "its file templates were dropped" in said
    assert "it needs a shell, as lefthook runs it: sh -c" in said
    assert "exclude not converted" in said
    assert "pre-commit.parallel: its hooks may refuse the run, so they run in turn" in said


LEFTHOOK_MORE = """
extends: [./other.yml]
remotes:
  - git_url: https://github.com/example/hooks
pre-push:
  commands:
    test:
      run: go test ./...
      fail_text: tests failed
pre-commit:
  commands:
    gofmt:
      glob: "*.go"
      files: git diff --name-only HEAD
      run: gofmt -l {files}
"""


def test_lefthook_s_hooks_from_elsewhere_and_what_a_hook_loses_are_said(tmp_path: Path) -> None:
    out = convert(tmp_path, "lefthook.yml", LEFTHOOK_MORE)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(written(tmp_path)) == ["test", "gofmt"]
    said = out.stdout
    assert "not converted (2):" in said
    assert "extends: the hooks of the files it extends are not converted" in said
    assert "remotes: the hooks of remote repositories" in said
    test, gofmt = said.partition("  test:")[2].partition("  gofmt:")[::2]
    assert "lefthook ran it before a push; here it runs before every run" in test
    assert "fail_text not converted" in test
    assert "before a push" not in gofmt
    assert "files (its own command listing the files) not converted" in gofmt


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("repos: [\n  - {", "not valid YAML at line"),
        ("a: &x [*x]\nrepos: !!python/object:os.system {}\n", "not valid YAML"),
        ("- just\n- a list\n", "not a pre-commit config"),
        ("repos: " + "[" * 5000 + "]" * 5000 + "\n", "not valid YAML: nested too deeply"),
        (
            "h: &h {id: x, entry: x, language: system}\n"
            "hs: &hs [" + ",".join(["*h"] * 200) + "]\n"
            "r: &r {repo: local, hooks: *hs}\n"
            "repos: [" + ",".join(["*r"] * 200) + "]\n",
            "over 10000 hook entries",
        ),
    ],
)
def test_hostile_yaml_is_a_clear_error_naming_the_file(
    tmp_path: Path, text: str, expected: str
) -> None:
    out = convert(tmp_path, ".pre-commit-config.yaml", text)
    assert out.returncode == 2
    assert ".pre-commit-config.yaml" in out.stderr
    assert expected in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / ".mcpx-hooks.toml").exists()


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lefthook.yml").write_bytes(b"\xff\xfe")
    out = mcpx("init", "--from", "lefthook.yml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 2
    assert "mcpx-hooks init: lefthook.yml: not UTF-8 text (byte 0)" in out.stderr


INJECTED = r"""
repos:
  - repo: local
    hooks:
      - id: lint
        entry: ruff check
        language: system
      - id: "fmt\n[[hooks]]\nname = \"zz\"\non = \"script\"\nphase = \"before\"\nrun = [\"sh\"]\n#"
        entry: black .
        language: python
      - id: "a\u2028b\u001b[2J"
        entry: black .
        language: python
"""


def test_a_source_s_names_stay_in_their_comment_and_out_of_the_terminal(tmp_path: Path) -> None:
    # An id of a hook not converted is named in a comment: a line break in it would end
    # the comment and start TOML of the source's choosing (a hook, a ceiling raised).
    out = convert(tmp_path, ".pre-commit-config.yaml", INJECTED)
    assert out.returncode == 0, out.stderr
    assert list(written(tmp_path)) == ["lint"]
    text = (tmp_path / ".mcpx-hooks.toml").read_text()
    assert "fmt\\n[[hooks]]" in text and "a\\u2028b\\x1b[2J" in text
    assert "\x1b" not in out.stdout + out.stderr and "\u2028" not in out.stdout


def test_a_command_that_is_not_unicode_is_refused_and_nothing_written(tmp_path: Path) -> None:
    lone = 'repos:\n- repo: local\n  hooks:\n  - {id: a, entry: "echo \\ud800", language: system}\n'
    out = convert(tmp_path, ".pre-commit-config.yaml", lone)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "not Unicode (a lone surrogate); nothing written" in out.stderr
    assert not (tmp_path / ".mcpx-hooks.toml").exists()


def test_never_over_a_project_file_nor_from_a_file_with_nothing_to_convert(
    tmp_path: Path,
) -> None:
    (tmp_path / "lefthook.yml").write_text("pre-push:\n  commands: {}\n")
    out = mcpx("init", "--from", "lefthook.yml", cwd=tmp_path, home=tmp_path / "home")
    assert out.returncode == 2
    assert "no hook could be converted; nothing written" in out.stderr
    (tmp_path / ".mcpx-hooks.toml").write_text("# mine\n")
    out = convert(tmp_path, ".pre-commit-config.yaml", PRE_COMMIT)
    assert out.returncode == 2
    assert (tmp_path / ".mcpx-hooks.toml").read_text() == "# mine\n"


def test_regex_and_brace_conversions() -> None:
    assert regex_globs(r"^src/.*\.py$") == ["src/**/*.py"]
    assert regex_globs(r"\.(js|ts)$") == ["*.js", "*.ts"]
    assert regex_globs(r"^setup\.py$") == ["/setup.py"]
    assert regex_globs(r"^docs/.*\.md$|^README\.md$") == ["docs/**/*.md", "/README.md"]
    assert regex_globs(r"\.py") is None  # unanchored: also .pyc, .pyx: no exact glob
    assert regex_globs(r"^src") is None
    assert brace_globs("{a,b}/*.{c,d}") == ["a/*.c", "a/*.d", "b/*.c", "b/*.d"]
    assert brace_globs("*.{a,b,{c,d}}") == ["*.a", "*.b", "*.c", "*.d"]  # nested: once each


LINT_CHECK = r"""
repos:
  - repo: local
    hooks:
      - id: lint
        name: lint
        entry: sh lint.sh
        language: system
        files: \.py$
"""


def test_the_whole_story_from_pre_commit_to_exec(readable_tmp: Path) -> None:
    repo = new_repo(
        readable_tmp / "repo",
        {
            ".pre-commit-config.yaml": LINT_CHECK,
            "lint.sh": """echo '{"advise": "lint ran"}'\n""",
            "app.py": "x = 1\n",
            "README.md": "hi\n",
        },
    )
    repo.chmod(0o755)
    home = readable_tmp / "home"
    out = mcpx("init", "--from", ".pre-commit-config.yaml", cwd=repo, home=home)
    assert out.returncode == 0, out.stdout + out.stderr
    git(repo, "add", ".mcpx-hooks.toml")
    git(repo, "commit", "-q", "-m", "mcpx-hooks")
    trusted = mcpx("trust", ".mcpx-hooks.toml", cwd=repo, home=home)
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr

    def exec_names(**env: str) -> tuple[list[str], list[str]]:
        done = mcpx("exec", "--json", "--", "true", cwd=repo, home=home, **env)
        assert done.returncode == 0, done.stdout + done.stderr
        return [f["name"] for f in hook_frames(done)], warnings(done)

    assert exec_names()[0] == []  # nothing changed
    (repo / "README.md").write_text("docs only\n")
    assert exec_names()[0] == []  # a change its files do not match
    (repo / "app.py").write_text("x = 2\n")
    names, _ = exec_names()
    assert names == ["lint"]
    ran = mcpx("exec", "--json", "--", "true", cwd=repo, home=home)
    assert [f["advice"] for f in hook_frames(ran)] == [["lint ran"]]
    names, said = exec_names(MCPX_HOOKS_SKIP="lint")
    assert names == []
    assert "hooks left out of this run: lint (MCPX_HOOKS_SKIP)" in said


def test_alternatives_that_multiply_past_a_bound_are_not_expanded() -> None:
    """Each group of alternatives multiplies the globs: a lefthook glob of `{a,b}` 24 times
    took minutes and a regex of `(a|b)` 24 times some 9 GB to expand (16,777,216 globs).
    Past `MAX_GLOBS` neither is converted (the hook runs on every change, and it is said)."""
    from mcpx_hooks.supervisor.config.regexglob import MAX_GLOBS

    assert MAX_GLOBS == 64
    assert brace_globs("src/{a,b}{c,d}{e,f}/*.{x,y,z}") is not None
    assert brace_globs("{a,b}" * 7) is None  # 128
    assert brace_globs("{a,b}" * 40) is None
    assert regex_globs(r"^src/(a|b)(c|d)(e|f)/.*\.py$") is not None
    assert regex_globs("^" + "(a|b)" * 7 + r"\.py$") is None
    assert regex_globs("^" + "(a|b)" * 40 + r"\.py$") is None
    assert regex_globs("|".join(rf"^x{n}\.py$" for n in range(65))) is None


def test_a_lefthook_glob_of_too_many_alternatives_is_said_and_left_out(tmp_path: Path) -> None:
    glob = "{a,b}" * 30
    text = f'pre-commit:\n  commands:\n    x:\n      glob: "{glob}"\n      run: "true"\n'
    out = convert(tmp_path, "lefthook.yml", text)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "when" not in written(tmp_path)["x"]
    assert f"glob {glob!r} makes over 64 globs: write when.files by hand" in out.stdout
