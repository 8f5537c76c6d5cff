"""docs/security.md run for real, in a scratch project with a home of its own: the trust
commands as the page writes them, the state file they write against the page's, the CI
variable and flag, and each line the page shows (a file skipped as not trusted, a ceiling a
nearer file tried to raise, a locked hook disabled or skipped, a `${NAME}` in `env`)
compared with what the product prints, the page's paths (/src/repo, /home/me) put for the
scratch's.

Substituted: the page's farther file for a locked hook is `/etc/mcpx-hooks/config.toml`; a test
may not write /etc, so the user's config (the next layer, trusted by where it is as /etc is)
holds it, and its path is put back for /etc's when comparing. The page's project file and
`make test` are not shown: the test writes the smallest (a Makefile whose `test` echoes).

Not run here: the `callerEnv` request (a request to `serve`; tests/test_secrets.py sends it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from docpage import Scratch, block, commands, normal

PAGE = "security.md"
HOOK = '[[hooks]]\nname = "hi"\non = "script"\nphase = "before"\nrun = ["echo", "hi"]\n'


def scratch(tmp_path: Path) -> tuple[Scratch, dict[str, str]]:
    s = Scratch(tmp_path)
    s.write(".mcpx-hooks.toml", HOOK)
    return s, {str(s.proj): "/src/repo", str(s.home): "/home/me"}


def test_trust_commands_and_the_state_file(tmp_path: Path) -> None:
    s, paths = scratch(tmp_path)
    shown = block(PAGE, "a project config file is applied only once trusted").body
    # (on stderr from `exec --json`, as the page lists; `hooks list` says it on stdout)
    done = s.sh("mcpx-hooks exec --json -- true")
    assert normal(shown) == [line for line in normal(done.stderr, paths) if "warning" in line]

    trust, named, listing, untrust = commands(block(PAGE, "mcpx-hooks trust --list", "sh").body)
    done = s.sh(trust)
    assert done.returncode == 0, done.stderr
    assert normal(done.stdout, paths) == ["trusted /src/repo/.mcpx-hooks.toml (sha256 SHA)"]
    assert s.sh(named).returncode == 0
    state = json.loads((s.home / ".local" / "state" / "mcpx-hooks" / "trust.json").read_text())
    page = json.loads(block(PAGE, '"trustedAt"', "json").body)
    assert state.keys() == page.keys() and state["version"] == page["version"]
    (entry,) = state["files"].values()
    assert list(state["files"]) == [str(s.proj / ".mcpx-hooks.toml")]
    assert entry.keys() == page["files"]["/src/repo/.mcpx-hooks.toml"].keys()
    assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["trustedAt"])
    done = s.sh(listing)
    assert done.returncode == 0 and done.stdout.startswith("ok "), done.stdout
    assert "warning" not in s.sh("mcpx-hooks exec --json -- true").stderr
    done = s.sh(untrust)
    assert done.returncode == 0, done.stderr
    assert normal(done.stdout, paths) == ["untrusted /src/repo/.mcpx-hooks.toml"]
    assert s.sh(untrust).returncode == 2  # a file not trusted


def test_ci_trusts_for_one_command_and_writes_nothing(tmp_path: Path) -> None:
    s, _ = scratch(tmp_path)
    s.write("Makefile", "test:\n\t@echo tested\n")
    for command in commands(block(PAGE, "MCPX_HOOKS_TRUST=all", "sh").body):
        done = s.sh(command)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "hook hi (script.before" in done.stdout and "| tested" in done.stdout
        assert "warning" not in done.stdout + done.stderr, done.stdout
    assert not (s.home / ".local" / "state" / "mcpx-hooks" / "trust.json").exists()


def locked(tmp_path: Path) -> tuple[Scratch, dict[str, str], str]:
    s, paths = scratch(tmp_path)
    gate = block(PAGE, 'name = "org-gate"', "toml").body
    s.user_config.parent.mkdir(parents=True)  # for /etc/mcpx-hooks/config.toml, see above
    s.user_config.write_text(gate)
    paths[str(s.user_config)] = "/etc/mcpx-hooks/config.toml"
    return s, paths, gate


def test_a_locked_hook_cannot_be_disabled_nor_skipped(tmp_path: Path) -> None:
    s, paths, gate = locked(tmp_path)
    s.write(".mcpx-hooks.toml", gate.replace("locked = true", "enabled = false"))
    shown = block(PAGE, "a nearer file may not disable it").body
    # `trust` refuses such a file, saying the problem as `validate` there says it.
    for command in ("mcpx-hooks trust", "mcpx-hooks validate"):
        done = s.sh(command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert normal(shown)[0] in normal(done.stdout + done.stderr, paths), done.stdout

    s.write(".mcpx-hooks.toml", HOOK)
    assert s.sh("mcpx-hooks trust").returncode == 0
    done = s.sh("mcpx-hooks exec --skip org-gate -- true")
    assert done.returncode == 2 and "run " not in done.stdout, done.stdout
    shown = block(PAGE, "it cannot be left out of a run").body
    assert normal(done.stderr, paths) == normal(shown)


def test_a_ceiling_a_nearer_file_would_raise_stays(tmp_path: Path) -> None:
    s, paths = scratch(tmp_path)
    s.user_config.parent.mkdir(parents=True)
    s.user_config.write_text('[autonomy]\nmax = "advise"\n')
    s.write(".mcpx-hooks.toml", '[autonomy]\nmax = "run"\n\n' + HOOK)
    assert s.sh("mcpx-hooks trust").returncode == 0
    done = s.sh("mcpx-hooks hooks list")
    assert done.returncode == 0, done.stderr
    shown = block(PAGE, "would raise the ceiling").body
    assert normal(done.stderr, paths) == normal(shown)


def test_a_dollar_name_in_env_is_refused_as_the_page_shows(tmp_path: Path) -> None:
    s, paths = scratch(tmp_path)
    s.write("c.toml", HOOK + 'env = { GITHUB_TOKEN = "${GITHUB_TOKEN}" }\n')
    done = s.sh("mcpx-hooks validate c.toml")
    assert done.returncode == 2
    shown = block(PAGE, "is never\nexpanded").body  # wrapped on the page, one line printed
    assert normal(done.stdout, paths) == [" ".join(normal(shown))]
