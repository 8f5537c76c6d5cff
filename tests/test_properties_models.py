"""Properties (Hypothesis) of the models' side: hostile prompt cache entries and hostile files
to promote into, through `prompts list|show|promote|clear`; and whatever a model server
replies to a prompt hook.
"""

from __future__ import annotations

import binascii
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_service import tracebacks
from props import (
    deep,
    examples,
    hostile_json,
    hostile_text,
    mutate,
    odd_number,
    person_shell,
    render,
    run_cli,
)

from mcpx_hooks.supervisor.config.loading import load_config, validate_files

person = pytest.fixture(person_shell)


# ---- the prompt cache ---------------------------------------------------------------------------

#: The project a cache entry may point at: a prompt hook `promote` can rewrite.
PROMPT_PROJECT = '# keep\n[[hooks]]\nname = "deps"\non = "script"\nphase = "before"\nprompt = "check"\neffect = "run"\n'  # noqa: E501


@st.composite
def prompt_cache_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """A prompt cache entry as a hostile hand (or a model) left it: junk bytes, JSON of any
    shape, an entry near the real document with hostile fields, or not a file at all. The
    text `@project` stands for the project file of the example."""
    argv = draw(
        st.one_of(
            st.lists(st.one_of(hostile_text, st.just("\u001b[2J")), min_size=1, max_size=3),
            hostile_json,
        )
    )
    doc = {
        "version": draw(st.one_of(st.just(1), hostile_json)),
        "key": "@key",
        "hook": draw(st.one_of(st.just("deps"), hostile_text, hostile_json)),
        "file": draw(st.one_of(st.just("@project"), st.none(), hostile_text)),
        "pointer": draw(st.sampled_from(["/hooks/0", "/hooks/9", None, "", "/x"])),
        "prompt": draw(st.one_of(st.just("check"), hostile_text)),
        "effect": draw(st.one_of(st.just("run"), hostile_text)),
        "model": draw(st.one_of(st.just({"name": "default"}), hostile_json)),
        "answer": draw(
            st.one_of(
                st.fixed_dictionaries({"run": st.fixed_dictionaries({"argv": st.just(argv)})}),
                st.fixed_dictionaries({"propose": st.fixed_dictionaries({"value": hostile_json})}),
                hostile_json,
            )
        ),
        "created": draw(st.one_of(st.just(1000.0), odd_number, hostile_json)),
    }
    text = render(doc)
    kind = draw(st.sampled_from(["json", "json", "bytes", "mutated", "fifo", "dir", "0666"]))
    if kind == "bytes":
        return kind, draw(st.binary(max_size=200))
    if kind == "mutated":
        how = draw(st.sampled_from(["cut", "insert", "drop", "quote", "trail"]))
        text = mutate(text, draw(st.integers(0, 400)), how, draw(hostile_text))
    return kind, text.encode("utf-8", "surrogatepass")


# `person` is one directory for all examples (each a project of its own under it).
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(entry=prompt_cache_file())
def test_a_hostile_prompt_cache_entry_never_crashes_a_command(
    person: Path, entry: tuple[str, bytes]
) -> None:
    from mcpx_hooks.supervisor.models.promptcache import CachedAnswer, PromptCache

    kind, data = entry
    project = person / f"p{len(list(person.iterdir()))}" / ".mcpx-hooks.toml"
    project.parent.mkdir()
    project.write_text(PROMPT_PROJECT)
    cache = PromptCache.open(os.environ)
    assert cache is not None
    key = binascii.hexlify(os.urandom(32)).decode()
    cache.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = cache.path(key)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        data = data.replace(b"@key", key.encode()).replace(b"@project", str(project).encode())
        path.write_bytes(data)
        path.chmod(0o666 if kind == "0666" else 0o600)
    try:
        got = cache.get(key)
        assert got is None or isinstance(got, CachedAnswer)
        assert (got is not None) == (key in [k for k, _ in cache.entries()])
        for argv in (["prompts", "list"], ["prompts", "show", key]):
            code, out, err = run_cli(argv)
            assert code == (0 if got is not None or argv[1] == "list" else 2), (code, err)
            assert "\u001b" not in out + err and not tracebacks(out, err), (out, err)
        code, out, err = run_cli(["prompts", "list", "--json"])
        assert code == 0 and len(json.loads(out)) == (got is not None), (code, err)
        code, out, err = run_cli(["prompts", "promote", key])
        assert code in (0, 2), (code, out, err)
        assert "\u001b" not in out + err and not tracebacks(out, err), (out, err)
        if code == 0:  # it was the project's hook, with a command: the file is a run hook now
            assert validate_files([project]) == []
            assert "prompt" not in project.read_text() and project.read_text().startswith("# keep")
        else:
            assert project.read_text() == PROMPT_PROJECT
    finally:
        if path.is_dir():
            code, out, err = run_cli(["prompts", "clear"])  # it cannot remove a directory
            assert code == 1 and "Is a directory" in err, (code, out, err)
            path.rmdir()
        assert run_cli(["prompts", "clear"])[0] == 0
    assert not path.exists()


#: Config texts a prompt hook named `deps` (prompt "check") may sit in, each way TOML and
#: JSON can say it; the property breaks them in one place.
PROMOTE_TEXTS = [
    PROMPT_PROJECT,
    '[[hooks]]\nname = "first"\non = "script"\nphase = "suffix"\nrun = ["true"]\n\n'
    + PROMPT_PROJECT.replace("# keep\n", "")
    + '[hooks.vars]\na = 1\n[hooks.when]\nargv = ["*"]\n',
    'hooks = [ { name = "deps", on = "script", phase = "before", prompt = "check",'
    ' effect = "run", vars.a = 1 } ]  # inline\n',
    '[[hooks]]\nname = "deps"\non = "script"\nphase = "before"\nprompt = """check"""\n'
    'effect = "run"\nvars.a = 1\nvars.b = "x"\ntimeoutMs = 5\n',
]


@st.composite
def promote_target(draw: st.DrawFn) -> tuple[str, str]:
    """A file that holds (or nearly holds) the prompt hook an entry names."""
    if draw(st.booleans()):
        doc = {"hooks": [{"name": "deps", "on": "script", "phase": "before", "prompt": "check",
                          "effect": "run", "vars": draw(hostile_json),
                          draw(hostile_text): draw(hostile_json)}]}  # fmt: skip
        text = render(doc)
        suffix = ".json"
    else:
        text = draw(st.sampled_from(PROMOTE_TEXTS))
        suffix = ".toml"
    if draw(st.booleans()):
        how = draw(st.sampled_from(["cut", "insert", "drop", "quote", "trail", "bom"]))
        text = mutate(text, draw(st.integers(0, 300)), how, draw(hostile_text))
    return suffix, text


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    target=promote_target(),
    to=st.one_of(st.none(), promote_target(), st.just(("", "")), st.just((".json", ""))),
)
def test_promote_on_a_hostile_file_writes_a_valid_file_or_nothing(
    person: Path, target: tuple[str, str], to: tuple[str, str] | None
) -> None:
    from mcpx_hooks.supervisor.models.promptcache import CachedAnswer, PromptCache, cache_key

    suffix, text = target
    directory = person / f"q{len(list(person.iterdir()))}"
    directory.mkdir()
    path = directory / f".mcpx-hooks{suffix}"
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes(data)
    # `--to`: none, a file of its own (hostile too), or one that is not there yet.
    other = directory / f"other{to[0] if to is not None and to[0] else '.toml'}"
    if to is not None and to[1]:
        other.write_bytes(to[1].encode("utf-8", "surrogatepass"))
    other_before = other.read_bytes() if other.exists() else None
    cache = PromptCache.open(os.environ)
    assert cache is not None
    key = cache_key("deps", "check", "run", "default", "m", {})
    answer = {"run": {"argv": ["sh", "-c", "echo '\"ok\"' \\\\ $HOME"]}}
    cache.put(key, CachedAnswer("deps", str(path), "/hooks/0", "check", "run", {}, answer, 1.0))
    flags = [] if to is None else ["--to", str(other)]
    code, out, err = run_cli(["prompts", "promote", key, *flags])
    assert code in (0, 2), (code, out, err)
    assert not tracebacks(out, err), (out, err)
    written = path if to is None else other
    if code == 0:
        assert validate_files([written]) == [], written.read_text()
        config = load_config([written], cwd=directory, environ={}, discover=False)
        commands = [list(h.target) for h in config.hooks if h.name == "deps"]
        assert commands == [answer["run"]["argv"]]
    else:
        assert (other.read_bytes() if other.exists() else None) == other_before
    if to is not None or code != 0:
        assert path.read_bytes() == data
    made = other_before is not None or (to is not None and code == 0)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        {path.name} | ({other.name} if made else set())
    )
    cache.clear()


# ---- model replies: what a model server answers a prompt hook ----------------------------

#: Replies no model should give, as (HTTP status, body or the name of one in `_BIG_REPLIES`):
#: over the cap, nested past any parser's depth, not UTF-8, the protocol's shape with every
#: part wrong.
MODEL_REPLY_CASES: list[tuple[int, bytes | str]] = [
    (200, "huge"),
    (200, "deep-list"),
    (200, "deep-object"),
    (200, "huge-content"),
    (200, "deep-content"),
    (200, b"\xff\xfe{}"),
    (200, json.dumps({"choices": [{"message": {"content": '{"run": 1}'}}]}).encode()),
    (200, b'{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": true}}'),
    (200, b'{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": -5}}'),
    (200, b'{"choices": {"0": 1}}'),
    (500, b'{"error": "sk-in-the-body"}'),
    (204, b""),
]
_BIG_REPLIES: dict[str, Callable[[], bytes]] = {
    "huge": lambda: b"x" * (3 * 1024 * 1024),
    "deep-list": lambda: deep(100_000).encode(),
    "deep-object": lambda: deep(100_000, "{").encode(),
    "huge-content": lambda: (
        b'{"choices": [{"message": {"content": "' + b"a" * (2 * 1024 * 1024) + b'"}}]}'
    ),
    "deep-content": lambda: json.dumps(
        {"choices": [{"message": {"content": deep(10_000)}}]}
    ).encode(),
}


@st.composite
def model_reply(draw: st.DrawFn) -> tuple[int, bytes]:
    status = draw(st.sampled_from([200, 200, 200, 201, 400, 429, 500, 503]))
    kind = draw(st.sampled_from(["bytes", "json", "content", "content"]))
    if kind == "bytes":
        return status, draw(st.binary(max_size=256))
    if kind == "json":
        return status, render(draw(hostile_json)).encode("utf-8", "surrogatepass")
    content = draw(
        st.one_of(
            hostile_text,
            hostile_json.map(render),
            st.sampled_from(['{"advise": 1}', '{"propose": {}}', '```json\n{"advise": "x"}\n```']),
        )
    )
    usage = draw(st.one_of(st.just({"prompt_tokens": 1, "completion_tokens": 2}), hostile_json))
    body = {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": usage}
    return status, render(body).encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def reply_server() -> Iterator[Any]:
    from loopmodel import LoopModel

    with LoopModel() as server:
        yield server


_REPLIES = iter(range(10**9))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@examples("reply", MODEL_REPLY_CASES)
@given(reply=model_reply())
def test_model_replies(person: Path, reply_server: Any, reply: tuple[int, bytes | str]) -> None:
    """Whatever a model server answers, the prompt hook ends in a frame with a status (never
    a raise), a failure says why in our words (never the body), and memory stays bounded
    (the reply is read no further than its cap)."""
    from typing import cast

    from loopmodel import Reply

    from mcpx_hooks.supervisor.core.frames import HookStatus
    from mcpx_hooks.supervisor.process.spawner import Spawner
    from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
    from mcpx_hooks.supervisor.run.hookrun import run_hook

    status, given = reply
    body = _BIG_REPLIES[given]() if isinstance(given, str) else given
    reply_server.default = Reply(status=status, raw=body)
    doc = {
        "models": {"default": {"provider": "openai", "url": reply_server.url}},
        "hooks": [{"name": "p", "on": "script", "phase": "onError", "prompt": "@error",
                   "effect": "apply", "maxOutputBytes": 1024 * 1024}],
    }  # fmt: skip
    (person / "models.json").write_text(json.dumps(doc))
    (hook,) = load_config(["models.json"], cwd=person, environ={}, discover=False).hooks
    # A fresh error each example: a cached answer from an earlier one is never reused.
    ctx = HookContext(
        RunInfo("r", ("job",), str(person), "t"), error={"message": f"boom {next(_REPLIES)}"}
    )
    before = psutil.Process().memory_info().rss
    frame = trio.run(run_hook, cast(Spawner, object()), hook, ctx).frame
    assert isinstance(frame.status, HookStatus) and frame.status is not HookStatus.SKIPPED
    if frame.status.is_failure:
        assert frame.reason and not tracebacks(frame.reason)
        assert "sk-in-the-body" not in frame.reason
    if status >= 400:
        assert frame.status is HookStatus.FAILED and f"HTTP {status}" in (frame.reason or "")
    assert frame.ran is None  # apply: a `run` key is dropped, never executed
    assert psutil.Process().memory_info().rss - before < 64 * 1024 * 1024
