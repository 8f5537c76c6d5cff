"""docs/sandbox.md run for real, headless: `mcpx-hooks doctor` as written, its report against
the page's (each line the page shows, versions and the cgroup path aside, for the mechanisms
this machine has); a program under the home the strict profile cannot see, refused with the
line the page shows, then admitted by the page's `[sandbox]` table; and the page's `deny`
table hiding a directory that `read` grants.

The page's first report is root's, its second an ordinary user's (rootless): the first is
compared with `doctor` as the user the tests run as, the second with `doctor` run as an
ordinary user (tests/test_rootless.py's caller: `nobody`, through setpriv, when the tests run
as root; skipped where no Python of this package can run as that user). The page's
`/root/.pyenv` is the scratch home's `.pyenv`, holding a stand-in `pytest`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from docpage import Scratch, block, blocks, commands, normal
from test_rootless import Caller, caller  # noqa: F401 (a fixture)

PAGE = "sandbox.md"
MECHANISM = re.compile(r"^  (\S+)\s+(pidns|mountns|netns|landlock|seccomp|uid|rlimits)\s{2,}")


def machine(lines: list[str]) -> list[str]:
    """Lines with what differs between machines set aside: versions and the cgroup's path."""
    out = []
    for line in lines:
        kept = re.sub(r"Linux \S+ \S+, Python [\d.]+", "Linux K, Python V", line)
        kept = re.sub(r"\(cgroup v(\d) at /sys/fs/cgroup/\S+\)", r"(cgroup v\1 at CG)", kept)
        out.append(kept)
    return out


def test_doctor_reports_as_the_page_shows(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    (command,) = commands(block(PAGE, "mcpx-hooks doctor", "sh").body)
    done = s.sh(command)
    assert done.returncode == 0, done.stdout + done.stderr
    root = os.getuid() == 0
    report = [b for b in blocks(PAGE) if b.body.startswith("mcpx-hooks doctor: the sandbox")]
    shown = machine(normal(report[0 if root else 1].body))
    out = machine(normal(done.stdout))
    assert out[0] == shown[0]
    assert re.sub(r"uid \d+", "uid N", out[1]) == re.sub(r"uid \d+", "uid N", shown[1])
    for line in shown[2:]:
        if line.strip() in {"...", "…"}:
            continue
        name = MECHANISM.match(line)
        if name:
            # A mechanism: the page's line when this machine has it too.
            ours = next(o for o in out if (m := MECHANISM.match(o)) and m[2] == name[2])
            if ours.split()[0] != name[1]:
                pytest.skip(f"{name[2]} is not as on the page's machine here: {ours}")
        assert line in out, (line, out)
    assert any(line.startswith("run history: ") for line in out)


def test_a_program_the_profile_cannot_see_then_admitted(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    bin_ = s.home / ".pyenv" / "versions" / "3.11.7" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "pytest").write_text("#!/bin/sh\necho 1 passed\n")
    (bin_ / "pytest").chmod(0o755)
    s.env["PATH"] = f"{bin_}:{s.env['PATH']}"
    done = s.sh("mcpx-hooks exec --sandbox strict -- pytest")
    assert done.returncode == 1, done.stdout
    shown = block(PAGE, "which the strict sandbox cannot see", "").body
    said = [line for line in normal(done.stdout, {str(s.home): "/root"}) if "cannot run" in line]
    assert said == [f"ERROR the script could not start: {normal(shown)[0]}"]
    # The page's [sandbox] table, as the user's config: `~/.pyenv` admits it.
    s.user_config.parent.mkdir(parents=True)
    s.user_config.write_text(block(PAGE, 'read = ["~/.pyenv", "/opt/tools"]', "toml").body)
    done = s.sh("mcpx-hooks exec --sandbox strict -- pytest")
    assert done.returncode == 0, done.stdout
    assert "| 1 passed" in done.stdout


def test_deny_hides_what_read_grants(tmp_path: Path) -> None:
    s = Scratch(tmp_path)
    vault = s.home / "vault"
    vault.mkdir(parents=True)
    (vault / "key").write_text("the key\n")
    s.user_config.parent.mkdir(parents=True)
    s.user_config.write_text('[sandbox]\nread = ["~/vault"]\n')
    read = f"mcpx-hooks exec --sandbox strict -- cat {vault / 'key'}"
    done = s.sh(read)
    assert done.returncode == 0 and "| the key" in done.stdout, done.stdout
    deny = block(PAGE, 'deny = ["~/vault"', "toml").body
    s.user_config.write_text('[sandbox]\nread = ["~/vault"]\n' + deny.partition("\n")[2])
    done = s.sh(read)
    assert done.returncode != 0 and "the key" not in done.stdout, done.stdout


def test_doctor_as_an_ordinary_user_reports_as_the_page_shows(caller: Caller) -> None:  # noqa: F811
    (command,) = commands(block(PAGE, "mcpx-hooks doctor", "sh").body)
    done = caller.run("-m", "mcpx_hooks.supervisor", *command.split()[1:])
    assert done.returncode == 0, done.stdout + done.stderr
    rootless = [b for b in blocks(PAGE) if "(an ordinary user)" in b.body]
    assert len(rootless) == 1

    def here(lines: list[str]) -> list[str]:
        """Also the uid and the namespace limit, which are this machine's."""
        return [re.sub(r"uid \d+", "uid N", re.sub(r" = \d+$", " = N", x)) for x in machine(lines)]

    shown, out = here(normal(rootless[0].body)), here(normal(done.stdout))
    at = 0
    for line in shown:
        if line.strip() in {"...", "…"}:
            continue
        assert line in out[at:], (line, out)
        at = out.index(line, at) + 1
