"""The prompt cache: its key, where it lives, what it keeps, and files it must not believe."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.models.promptcache import (
    MAX_ENTRY_BYTES,
    CachedAnswer,
    PromptCache,
    PromptCacheError,
    cache_key,
    entry_document,
    is_key,
)

BASE: dict[str, Any] = {
    "hook_name": "deps",
    "prompt": "make sure @tool exists",
    "effect": "run",
    "model_name": "default",
    "model_id": "qwen2.5-coder:7b",
    "values": {"tool": "jq", "n": [1, 2]},
}


def entry(hook: str = "deps", created: float = 1000.0, **answer: Any) -> CachedAnswer:
    return CachedAnswer(
        hook=hook,
        file="/p/.mcpx-hooks.toml",
        pointer="/hooks/0",
        prompt="make sure @tool exists",
        effect="run",
        model={"name": "default", "provider": "openai", "model": "qwen2.5-coder:7b"},
        answer=answer or {"run": {"argv": ["sh", "-c", "command -v jq"]}},
        created=created,
    )


@pytest.fixture
def cache(tmp_path: Path) -> PromptCache:
    opened = PromptCache.open({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert opened is not None
    return opened


def test_the_key_is_stable_hex_and_independent_of_the_order_of_values() -> None:
    key = cache_key(**BASE)
    assert is_key(key)
    again = dict(BASE, values={"n": [1, 2], "tool": "jq"})
    assert cache_key(**again) == key
    # Pinned: the same six inputs give this key in every process and every release.
    assert key == cache_key("deps", "make sure @tool exists", "run", "default",
                            "qwen2.5-coder:7b", {"tool": "jq", "n": [1, 2]})  # fmt: skip


@pytest.mark.parametrize(
    ("field", "other"),
    [
        ("hook_name", "deps2"),
        ("prompt", "make sure @tool exists!"),
        ("effect", "propose"),
        ("model_name", "cli"),
        ("model_id", "qwen2.5-coder:14b"),
        ("values", {"tool": "yq", "n": [1, 2]}),
        ("values", {"tool": "jq", "n": [2, 1]}),
        ("values", {"tool": "jq", "n": [1, 2], "extra": None}),
    ],
)
def test_the_key_changes_with_each_of_its_six_inputs(field: str, other: Any) -> None:
    assert cache_key(**dict(BASE, **{field: other})) != cache_key(**BASE)


def test_the_key_keeps_its_inputs_apart() -> None:
    # A boundary moved between two inputs is another key.
    a = cache_key("ab", "c", "run", "m", "x", {})
    b = cache_key("a", "bc", "run", "m", "x", {})
    c = cache_key("a", "b", "run", "mx", "", {})
    d = cache_key("a", "b", "run", "m", "x", {})
    assert len({a, b, c, d}) == 4


def test_the_key_takes_values_json_cannot_write_exactly() -> None:
    odd = {"s": "\ud800", "big": 10**400, "inf": float("inf"), "t": (1, 2)}
    assert is_key(cache_key("h", "p", "run", "m", "x", odd))
    assert cache_key("h", "p", "run", "m", "x", odd) == cache_key("h", "p", "run", "m", "x", odd)


def test_there_is_no_cache_without_a_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as homeless:
        homeless.setattr("pwd.getpwuid", lambda uid: {}[uid])  # no home by the passwd either
        assert PromptCache.open({}) is None
        assert PromptCache.open({"XDG_STATE_HOME": "relative", "HOME": "also-relative"}) is None
    home = PromptCache.open({"HOME": str(tmp_path)})
    assert home is not None
    assert home.directory == tmp_path / ".local" / "state" / "mcpx-hooks" / "prompts"


def test_put_then_get_then_remove(cache: PromptCache) -> None:
    key = cache_key(**BASE)
    assert cache.get(key) is None
    assert cache.entries() == []
    cache.put(key, entry())
    assert cache.get(key) == entry()
    assert cache.get(key).argv == ["sh", "-c", "command -v jq"]  # type: ignore[union-attr]
    assert cache.entries() == [(key, entry())]
    assert cache.remove(key) is True
    assert cache.remove(key) is False
    assert cache.get(key) is None


def test_an_empty_argument_is_kept_but_not_an_empty_program(cache: PromptCache) -> None:
    key = cache_key(**BASE)
    cache.put(key, entry(run={"argv": ["grep", "", "file"]}))
    assert cache.get(key).argv == ["grep", "", "file"]  # type: ignore[union-attr]
    with pytest.raises(PromptCacheError):
        cache.put(key, entry(run={"argv": ["", "x"]}))


def test_a_propose_answer_is_kept_and_has_no_argv(cache: PromptCache) -> None:
    key = cache_key(**dict(BASE, effect="propose"))
    proposed = entry(propose={"value": {"clean": True}, "note": "tidied"})
    cache.put(key, proposed)
    assert cache.get(key) == proposed
    assert proposed.argv is None


def test_files_are_private(cache: PromptCache) -> None:
    key = cache_key(**BASE)
    cache.put(key, entry())
    assert stat.S_IMODE(cache.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.path(key).stat().st_mode) == 0o600
    left = [n for n in os.listdir(cache.directory) if n.endswith(".tmp")]
    assert left == []


def test_placeholder_values_are_hashed_never_stored(cache: PromptCache) -> None:
    values = {"token": "s3cr3t-value-xyz"}
    key = cache_key("deps", "use @token", "run", "default", "m", values)
    cache.put(key, entry())
    assert b"s3cr3t-value-xyz" not in cache.path(key).read_bytes()


def test_the_oldest_entries_are_evicted_past_the_count(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path / "prompts", max_entries=3)
    keys = [cache_key(f"h{i}", "p", "run", "m", "x", {}) for i in range(5)]
    for i, key in enumerate(keys):
        cache.put(key, entry(hook=f"h{i}", created=1000.0 + i))
        os.utime(cache.path(key), ns=(i * 10**9, i * 10**9))  # written in this order
    assert [k for k, _ in cache.entries()] == keys[:1:-1]
    assert cache.get(keys[0]) is None
    assert cache.get(keys[1]) is None


def test_an_entry_too_large_is_refused_and_nothing_is_written(cache: PromptCache) -> None:
    key = cache_key(**BASE)
    huge = entry(run={"argv": ["echo", "x" * MAX_ENTRY_BYTES]})
    with pytest.raises(PromptCacheError, match="more than the cache keeps"):
        cache.put(key, huge)
    assert cache.get(key) is None
    assert not cache.directory.exists()


@pytest.mark.parametrize(
    "answer",
    [{}, {"advise": "x"}, {"run": {"argv": []}}, {"run": {"argv": "sh -c x"}}, {"run": "ls"}],
)
def test_put_refuses_what_is_not_a_run_or_a_propose(cache: PromptCache, answer: Any) -> None:
    bad = CachedAnswer("h", None, None, "p", "run", {}, answer, 1.0)
    with pytest.raises(PromptCacheError):
        cache.put(cache_key(**BASE), bad)


def test_put_refuses_a_key_that_is_not_one(cache: PromptCache) -> None:
    with pytest.raises(PromptCacheError, match="not a cache key"):
        cache.put("../../etc/passwd", entry())
    assert cache.get("../../etc/passwd") is None
    assert cache.remove("../x") is False


def _hostile(cache: PromptCache, key: str, make: str) -> None:
    path = cache.path(key)
    good = json.dumps(entry_document(key, entry()))
    if make == "not-json":
        path.write_text("{not json")
    elif make == "empty":
        path.write_bytes(b"")
    elif make == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif make == "array":
        path.write_text("[1, 2, 3]")
    elif make == "deep":
        path.write_text("[" * 5000 + "]" * 5000)
    elif make == "too-large":
        path.write_text(good[:-1] + ', "pad": "' + "x" * MAX_ENTRY_BYTES + '"}')
    elif make == "other-key":
        path.write_text(json.dumps(entry_document("0" * 64, entry())))
    elif make == "wrong-version":
        path.write_text(json.dumps({**entry_document(key, entry()), "version": 99}))
    elif make == "shell-string":
        doc = {**entry_document(key, entry()), "answer": {"run": {"argv": "rm -rf /"}}}
        path.write_text(json.dumps(doc))
    elif make == "nul-in-argv":
        doc = {**entry_document(key, entry()), "answer": {"run": {"argv": ["a\u0000b"]}}}
        path.write_text(json.dumps(doc))
    elif make == "surrogate":
        doc = entry_document(key, entry())
        path.write_text(json.dumps({**doc, "answer": {"run": {"argv": ["\ud800"]}}}))
    elif make == "created-string":
        path.write_text(json.dumps({**entry_document(key, entry()), "created": "yesterday"}))
    elif make == "created-infinite":
        path.write_text(json.dumps(entry_document(key, entry()))[:-1] + ', "created": 1e999}')
    elif make == "created-negative":
        path.write_text(json.dumps({**entry_document(key, entry()), "created": -1}))
    elif make == "world-writable":
        path.write_text(good)
        path.chmod(0o666)
    elif make == "symlink":
        target = cache.directory.parent / "elsewhere.json"
        target.write_text(good)
        path.symlink_to(target)
    elif make == "fifo":
        os.mkfifo(path)
    elif make == "directory":
        path.mkdir()


HOSTILE = [
    "not-json",
    "empty",
    "binary",
    "array",
    "deep",
    "too-large",
    "other-key",
    "wrong-version",
    "shell-string",
    "nul-in-argv",
    "created-string",
    "created-infinite",
    "created-negative",
    "surrogate",
    "world-writable",
    "symlink",
    "fifo",
    "directory",
]


@pytest.mark.parametrize("make", HOSTILE)
def test_a_hostile_entry_is_none_never_an_exception(cache: PromptCache, make: str) -> None:
    good_key = cache_key(**BASE)
    cache.put(good_key, entry())
    key = cache_key(**dict(BASE, hook_name="other"))
    _hostile(cache, key, make)
    assert cache.get(key) is None
    assert cache.entries() == [(good_key, entry())]
    assert cache.unreadable() == [key]
    # A put over it replaces it (a directory in the way is the one thing it cannot replace).
    if make != "directory":
        cache.put(key, entry(hook="other"))
        assert cache.get(key) == entry(hook="other")


def test_clear_removes_everything_and_says_how_many(cache: PromptCache) -> None:
    assert cache.clear() == 0
    for i in range(3):
        cache.put(cache_key(f"h{i}", "p", "run", "m", "x", {}), entry(hook=f"h{i}"))
    _hostile(cache, cache_key("bad", "p", "run", "m", "x", {}), "not-json")
    (cache.directory / ".x.json.123.tmp").write_text("left over")
    (cache.directory / "README").write_text("not ours")
    assert cache.clear() == 4
    assert cache.entries() == []
    assert sorted(os.listdir(cache.directory)) == [".lock", "README"]


def test_clear_removes_what_it_can_and_says_what_is_left(cache: PromptCache) -> None:
    cache.put(cache_key(**BASE), entry())
    in_the_way = cache.path("cd" * 32)
    in_the_way.mkdir()
    with pytest.raises(PromptCacheError, match=r"removed 1, but cannot remove .*Is a directory"):
        cache.clear()
    assert cache.entries() == [] and in_the_way.is_dir()


def test_a_directory_that_is_not_private_is_not_believed(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path / "prompts")
    key = cache_key(**BASE)
    cache.put(key, entry())
    cache.directory.chmod(0o777)
    try:
        assert cache.get(key) is None
        assert cache.entries() == []
        with pytest.raises(PromptCacheError, match="only you may write"):
            cache.put(key, entry())
    finally:
        cache.directory.chmod(0o700)
    assert cache.get(key) == entry()


def test_a_directory_that_is_a_file_is_an_error_to_write_and_empty_to_read(
    tmp_path: Path,
) -> None:
    (tmp_path / "prompts").write_text("a file")
    cache = PromptCache(tmp_path / "prompts")
    assert cache.entries() == []
    assert cache.clear() == 0
    with pytest.raises(PromptCacheError):
        cache.put(cache_key(**BASE), entry())
