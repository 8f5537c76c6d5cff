"""docs/prompt-hooks.md run for real, in a scratch project with a home of its own: the page's
hooks and `[models.default]` tables taken from its text, `hook test --show-request` and `exec`
as written, and what they print compared with the page's blocks (the request, the readable
view, each way a model can fail).

Substituted: the page's model server (llama.cpp on 127.0.0.1:8080, Ollama on :11434, a LiteLLM
proxy on :4000) is tests/loopmodel.py, a real OpenAI-compatible HTTP server on a loopback port
of its own, answering what the page shows the model answering (its token counts included);
its URL is put back for the page's when comparing; the LiteLLM key is a made-up one. "The
server is not running" is a loopback port bound and not listening. In the promote session,
`pytest -q` is a stand-in on PATH (what is tested is the prompt cache, not pytest) and the
project is a scratch git repository. Not run: `llama-server` and `ollama pull` (they fetch or
serve a real model), and `make demo` (a target of this repository's Makefile, running the same
demo)."""

from __future__ import annotations

import json
import re
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from docpage import Scratch, block, blocks, commands, normal
from loopmodel import LoopModel, Reply

PAGE = "prompt-hooks.md"
PAGE_URL = "http://127.0.0.1:8080/v1"
ANSWER = '{"advise": "Check the JSON the job parses first."}'


@pytest.fixture
def model() -> Iterator[LoopModel]:
    with LoopModel() as server:
        yield server


def with_model(s: Scratch, url: str, extra: str = "") -> None:
    """The page's Ollama table as the user's config, its URL the loopback model's."""
    table = block(PAGE, "127.0.0.1:11434/v1", "toml").body
    s.user_config.parent.mkdir(parents=True, exist_ok=True)
    s.user_config.write_text(table.replace("http://127.0.0.1:11434/v1", url) + extra)


def trusted(s: Scratch, config: str) -> None:
    s.write(".mcpx-hooks.toml", config)
    done = s.sh("mcpx-hooks trust")
    assert done.returncode == 0, done.stdout + done.stderr


def test_first_prompt_hook_walkthrough(tmp_path: Path, model: LoopModel) -> None:
    s = Scratch(tmp_path)
    with_model(s, model.url)
    model.replies.append(Reply(ANSWER, usage=(412, 31)))
    # The page's block: a heredoc writing the hook, trust, the request shown, a failing job.
    script = block(PAGE, "cat > .mcpx-hooks.toml <<'EOF'", "sh").body
    heredoc, _, rest = script.partition("EOF\n" + "mcpx-hooks trust")
    done = s.sh(heredoc + "EOF\n")
    assert done.returncode == 0, done.stderr
    trust, show, run = commands("mcpx-hooks trust" + rest)
    assert show.startswith("mcpx-hooks hook test explain-failure --show-request")
    assert s.sh(trust).returncode == 0
    done = s.sh(show)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["url"] == f"{model.url}/chat/completions"
    assert model.requests == []  # --show-request sends nothing
    done = s.sh(run)
    assert done.returncode == 1, done.stdout
    assert len(model.requests) == 1
    # The readable view the page shows for this hook.
    shown = normal(block(PAGE, "hook explain-failure (script.onError, prompt", "console").body)
    out = normal(done.stdout)
    at = out.index(shown[0])  # after the script's own stderr lines
    assert out[at : at + len(shown)] == shown, out


def test_the_request_is_the_pages(tmp_path: Path, model: LoopModel) -> None:
    s = Scratch(tmp_path)
    with_model(s, model.url)
    trusted(s, block(PAGE, 'name = "explain-failure"', "toml").body)
    # The page's error: the script's stderr ended with an instruction-looking line.
    said = re.search(r"stderr ended with\n?`([^`]+)`", text())
    assert said
    # The error a hook is given when a script writes that line on stderr and exits 1, taken
    # from a real run (an onError hook keeping its input), not written by hand.
    s.write("said.txt", said[1])
    keep = {
        "name": "keep",
        "on": "script",
        "phase": "onError",
        "sandbox": "workspace",
        "run": ["sh", "-c", "cat > input.json"],
    }
    done = s.sh(f"mcpx-hooks exec --hook '{json.dumps(keep)}' -- sh -c 'cat said.txt >&2; exit 1'")
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads((s.proj / "input.json").read_text())["error"]
    s.write("failure.json", json.dumps({"error": error}))
    _, with_event = block(PAGE, "--show-request --event failure.json", "sh").body.splitlines()
    done = s.sh(with_event)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["model"] == {
        "name": "default",
        "provider": "openai",
        "model": "qwen2.5-coder:7b",
    }
    body = printed["body"]
    # The page shortens the schema to `…` (in the system message and in response_format).
    schema = body["response_format"]["json_schema"]["schema"]
    advise = schema["properties"]["advise"]
    schema["properties"]["advise"] = "…"
    system = body["messages"][0]
    system["content"] = system["content"].replace(json.dumps(advise, sort_keys=True), "…")
    page_text = block(PAGE, '"model": "qwen2.5-coder:7b"', "json").body
    page = json.loads(page_text.replace('{"advise": …}', '{"advise": "…"}'))
    nonce = re.compile(r"\b[0-9a-f]{32}\b")
    assert json.loads(nonce.sub("N", json.dumps(body))) == json.loads(
        nonce.sub("N", json.dumps(page))
    )


def text() -> str:
    return (Path(__file__).resolve().parent.parent / "docs" / PAGE).read_text()


def transcript() -> list[tuple[str, list[str]]]:
    """The page's console block of failures: (command, the lines shown after it)."""
    body = block(PAGE, "# no [models.default]", "console").body
    parts = re.split(r"^\$ ", body, flags=re.MULTILINE)[1:]
    return [(commands(p.splitlines()[0])[0], normal(p.partition("\n")[2])) for p in parts]


def in_order(shown: list[str], out: list[str]) -> bool:
    """Every line shown is printed, in the page's order (the page may leave lines out)."""
    at = 0
    for line in shown:
        try:
            at = out.index(line, at) + 1
        except ValueError:
            return False
    return True


GATE = (
    '[[hooks]]\nname = "gate"\non = "script"\nphase = "before"\n'
    'prompt = "May this deploy run?"\neffect = "ask"\nfailure = "closed"\ntimeoutMs = 500\n'
)
SECOND = (
    '[[hooks]]\nname = "first"\non = "script"\nphase = "onSuccess"\nprompt = "Any advice?"\n\n'
    '[[hooks]]\nname = "second"\non = "script"\nphase = "onSuccess"\nprompt = "More?"\n'
)


# The page's transcript, case by case: (its hooks, its model: None for none, "down" for a
# server not running, and what the model answers). `echo $?` is checked with the case before.
CASES = {
    0: ("explain", None, None),
    1: ("explain", "down", None),
    2: ("explain", "up", Reply("overloaded", status=503)),
    3: ("explain", "up", Reply("{not json")),
    4: (GATE, "up", Reply(ANSWER, delay=30)),
    6: (SECOND, "up", Reply(ANSWER)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_failure_prints_what_the_page_shows(
    tmp_path: Path, model: LoopModel, case: int
) -> None:
    s = Scratch(tmp_path)
    s.write("deploy.sh", "#!/bin/sh\necho deployed\n", mode=0o755)  # the page's, not shown
    cases = transcript()
    assert len(cases) == 7
    assert [c for c, _ in cases][-2:] == ["echo $?", "mcpx-hooks exec -- true"]
    config, where, reply = CASES[case]
    if config == "explain":
        config = block(PAGE, 'name = "explain-failure"', "toml").body
    closed = socket.socket()  # bound, never listening: "the server is not running"
    closed.bind(("127.0.0.1", 0))
    down = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    with closed:
        if where is not None:
            budget = "\n[models]\nrunBudgetTokens = 10\n" if config is SECOND else ""
            with_model(s, down if where == "down" else model.url, budget)
        trusted(s, config)
        if reply is not None:
            model.replies.append(reply)
        command, shown = cases[case]
        done = s.sh(command)
    out = normal(done.stdout, {model.url: PAGE_URL, down: PAGE_URL})
    assert in_order(shown, out), (command, shown, out)
    if case + 1 < len(cases) and cases[case + 1][0] == "echo $?":
        assert cases[case + 1][1] == [str(done.returncode)]
    else:
        assert done.returncode == (1 if "false" in command else 0), done.returncode


def test_the_pages_model_tables_validate_with_the_loopback_model(tmp_path: Path) -> None:
    """Each `[models…]` table of the page, as the user's config, with a prompt hook."""
    s = Scratch(tmp_path)
    tables = [b.body for b in blocks(PAGE) if b.lang == "toml" and "[models" in b.body]
    assert len(tables) == 3
    for table in tables:
        s.user_config.parent.mkdir(parents=True, exist_ok=True)
        s.user_config.write_text(table)
        done = s.sh("mcpx-hooks validate")
        assert done.returncode == 0, (table, done.stdout, done.stderr)


PROMOTED = [
    "sh",
    "-c",
    'command -v jq >/dev/null || { echo "jq is missing"; exit 1; }; '
    'python3.11 -V >/dev/null || { echo "python3.11 is missing"; exit 1; }',
]


def test_the_promote_session(tmp_path: Path, model: LoopModel) -> None:
    """The page's worked session: ask once, the second run cached, list, promote, the diff."""
    s = Scratch(tmp_path)
    if None in (shutil.which("jq"), shutil.which("python3.11"), shutil.which("git")):
        pytest.skip("the model's command checks for jq and python3.11; the diff needs git")
    s.env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_AUTHOR_NAME="dev",
                 GIT_AUTHOR_EMAIL="dev@example.org", GIT_COMMITTER_NAME="dev",
                 GIT_COMMITTER_EMAIL="dev@example.org")  # fmt: skip
    s.stand_in("pytest", 'echo "1 passed in 0.01s"')
    with_model(s, model.url)
    # What the page shows the model writing.
    model.replies.append(Reply(json.dumps({"run": {"argv": PROMOTED}})))
    config = block(PAGE, 'name = "deps"', "toml").body
    assert config.startswith("# .mcpx-hooks.toml\n")
    s.write(".mcpx-hooks.toml", config)
    s.write(".gitignore", ".bin/\n")
    for command in ("git init -q -b main", "git add -A", "git commit -qm start"):
        assert s.sh(command).returncode == 0
    session = block(PAGE, "$ mcpx-hooks prompts promote", "console").body
    steps = [(commands(p.splitlines()[0])[0], p.partition("\n")[2]) for p in
             re.split(r"^\$ ", session, flags=re.MULTILINE)[1:]]  # fmt: skip
    paths = {str(s.proj): "/home/me/proj"}
    seen: dict[str, list[str]] = {}
    for written, shown in steps:
        command = written  # the page's key is its own run's: ours, its first 4 digits
        if written == "mcpx-hooks prompts promote 3f9a":
            command = written.replace("3f9a", seen["mcpx-hooks prompts list"][0][:4])
        done = s.sh(command)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        out = normal(done.stdout, paths)
        seen[command] = out
        want = normal(shown)
        if command.startswith("mcpx-hooks exec -- "):
            assert out[1] == want[0].replace("1412 ms", "N ms"), out
        elif "--json" in command:
            (frame,) = (json.loads(line) for line in done.stdout.splitlines())
            assert frame["status"] == "ok" and frame["cached"] is True, frame
        elif command == "mcpx-hooks prompts list":
            (line,) = out
            assert re.sub(r"^[0-9a-f]{12}  deps  +\d+s  ", "KEY  deps    2m  ", line) == (
                re.sub(r"^[0-9a-f]{12}", "KEY", want[0])
            ), line
        elif command.startswith("mcpx-hooks prompts promote"):
            assert [re.sub(r"sh -c '.*'$", "sh -c '…'", line) for line in out] == want, out
        elif command.startswith("git diff"):
            assert [
                line for line in out if line[:1] in "-+" and line[:3] not in {"---", "+++"}
            ] == want
        elif command == "mcpx-hooks trust":
            assert (
                re.sub(r"\(sha256 \w+\)", "(sha256 …)", " ".join(out)) == " ".join(want) or not want
            )
    assert len(model.requests) == 1  # the second run asked no model
    assert len(seen) == len(steps) - 1  # `mcpx-hooks trust` twice


def demo_lines() -> list[str]:
    lines = commands(block(PAGE, "MCPX_HOOKS_DEMO_MODEL_URL=http://127.0.0.1:8080/v1", "sh").body)
    keyed = commands(block(PAGE, "MCPX_HOOKS_DEMO_MODEL_KEY_ENV=LITELLM_KEY", "sh").body)
    return [lines[0], *keyed]


def test_the_demo_with_a_model(tmp_path: Path, model: LoopModel) -> None:
    s = Scratch(tmp_path)
    demo = demo_lines()[0].replace(PAGE_URL, model.url)
    done = s.sh(demo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model default (openai qwen2.5-coder:7b): 10+5 tokens in " in done.stdout
    assert model.requests and model.requests[0]["model"] == "qwen2.5-coder:7b"


def test_the_demo_with_a_keyed_model(tmp_path: Path, model: LoopModel) -> None:
    s = Scratch(tmp_path)
    export, demo = demo_lines()[1:]
    key = "sk-made-up-key-for-the-test"
    assert export.startswith("export LITELLM_KEY=")
    done = s.sh(f"export LITELLM_KEY={key}; " + demo.replace("http://127.0.0.1:4000/v1", model.url))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "model default (openai gpt-4o-mini): 10+5 tokens in " in done.stdout
    assert model.headers[0]["authorization"] == f"Bearer {key}"
    assert key not in done.stdout + done.stderr  # a secret the demo never prints
