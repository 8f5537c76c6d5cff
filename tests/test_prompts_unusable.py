"""`prompts list|show|clear` on a cache directory that is there but cannot be read or
believed: said, exit 1, rather than "no cached prompt answers" and "removed 0"."""

from __future__ import annotations

import os

import pytest
from test_prompts_cli import cache, cached, cli

from mcpx_hooks.supervisor.models.promptcache import PromptCache, PromptCacheError

__all__ = ["cache"]  # (the fixture, used here)


@pytest.mark.parametrize("action", [["list"], ["clear"], ["show", "abcdef"]])
def test_a_cache_that_cannot_be_believed_is_said(
    cache: PromptCache, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    cache.directory.mkdir(parents=True)
    cache.directory.chmod(0o777)  # (others may write: its entries are not believed)
    code, out, err = cli(capsys, *action)
    assert (code, out) == (1, "")
    assert err == (
        f"mcpx-hooks prompts {action[0]}: the cache of prompt answers {cache.directory} is not"
        " a directory of yours that only you may write\n"
    )
    cache.directory.chmod(0o700)
    assert cli(capsys, "list")[0] == 0
    if os.geteuid() == 0:  # (root searches any directory: another user's is what it can test)
        os.chown(cache.directory, 65534, 65534)
        assert cli(capsys, *action)[0] == 1
        os.chown(cache.directory, 0, 0)
    else:
        cache.directory.parent.chmod(0o000)
        try:
            code, _, err = cli(capsys, *action)
        finally:
            cache.directory.parent.chmod(0o700)
        assert code == 1 and err.endswith("cannot be read: Permission denied\n")


@pytest.mark.parametrize("action", [["list"], ["clear"], ["show", "abcdef"]])
def test_a_cache_that_is_a_symlink_is_said_to_be_one(
    cache: PromptCache, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    # The cache is kept only in a directory of its own (a symlink is never followed to
    # it): one that is a symlink to a directory was said to be "not a directory".
    cache.directory.parent.mkdir(parents=True)
    cache.directory.symlink_to("/etc")
    code, out, err = cli(capsys, *action)
    assert (code, out) == (1, "")
    assert err == (
        f"mcpx-hooks prompts {action[0]}: the cache of prompt answers {cache.directory} is a"
        " symlink (to /etc), not a directory of its own: remove it, and the cache is made"
        " again\n"
    )
    assert os.path.isdir("/etc")  # (nothing there touched)


@pytest.mark.parametrize("action", [["list"], ["clear"], ["show", "abcdef"]])
def test_a_cache_in_a_state_directory_others_may_write_to_is_said(
    cache: PromptCache, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    # Its entries are not believed there (another user could have put them there): `list`
    # said "1 cache file ... cannot be read" without why, and `show` that there was none.
    cache.directory.mkdir(parents=True, mode=0o700)
    entry = cache.directory / ("a" * 64 + ".json")
    entry.write_text("{}")
    entry.chmod(0o600)
    cache.directory.parent.chmod(0o777)
    try:
        code, out, err = cli(capsys, *action)
        with pytest.raises(PromptCacheError, match="another user could have put its answers"):
            cached(cache, None)  # (a run's answer: its warning says why it was not cached)
    finally:
        cache.directory.parent.chmod(0o700)
    assert (code, out) == (1, "")
    assert err == (
        f"mcpx-hooks prompts {action[0]}: the cache of prompt answers {cache.directory} is in"
        f" {cache.directory.parent}, which others may write to (mode 0777; chmod go-w), so"
        " another user could have put its answers there\n"
    )
    assert entry.exists()
