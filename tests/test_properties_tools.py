"""Properties (Hypothesis) of the tools' side: a plugin hook's `args` with hostile placeholders
(`core/placeholders.resolve`), and floods of hostile tool-call lines a script may write
(`run/calls.ScriptCalls`, each answered once).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from props import hostile_text, plain_json, plain_text

from mcpx_hooks.supervisor.core.placeholders import BUILT_INS, PlaceholderError, resolve

# ---- Tool servers: plugin hooks' args, scripts' call lines ----------------------------------

placeholder_text = st.one_of(
    hostile_text,
    st.builds(
        "".join,
        st.lists(
            st.one_of(
                st.sampled_from(["@", "@@", ".", "@input", "@input.a.0", "@team", "@run.", "@9"]),
                plain_text,
            ),
            max_size=6,
        ),
    ),
)
placeholder_args = st.recursive(
    st.one_of(placeholder_text, st.none(), st.integers(), st.booleans()),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(placeholder_text, kids, max_size=4)
    ),
    max_leaves=12,
)


@given(
    args=placeholder_args,
    names=st.dictionaries(st.sampled_from([*BUILT_INS, "team", "a"]), plain_json, max_size=5),
)
def test_plugin_args_resolve_or_say_which_placeholder(args: Any, names: dict[str, Any]) -> None:
    """Any args with any placeholders: a JSON value, or a `PlaceholderError` naming it."""
    try:
        value = resolve(args, names)
    except PlaceholderError as exc:
        assert str(exc).startswith("@") and "Traceback" not in str(exc)
        return
    json.dumps(value)


call_line = st.fixed_dictionaries(
    {"type": st.just("call")},
    optional={
        "id": st.one_of(st.integers(), plain_text, plain_json),
        "tool": st.one_of(st.sampled_from(["h.echo", "nope.x", "h.", ".x", "h"]), hostile_text),
        "args": st.one_of(plain_json, st.just({"big": "x" * (1024 * 1024 + 1)})),
    },
)


@given(lines=st.lists(call_line, max_size=200))
def test_script_call_lines_each_get_one_answer_and_stay_bounded(
    lines: list[dict[str, Any]],
) -> None:
    """Every call line a script may write gets exactly one answer line (JSON, `ok` false
    here: no tool server is declared), and what waits is bounded whatever the flood."""
    import trio.testing

    from mcpx_hooks.supervisor.core.hooks import Config
    from mcpx_hooks.supervisor.run.asking import Asks
    from mcpx_hooks.supervisor.run.bus import Bus
    from mcpx_hooks.supervisor.run.calls import MAX_PENDING, ScriptCalls
    from mcpx_hooks.supervisor.run.hookcontext import HookContext
    from mcpx_hooks.supervisor.run.journal import RunJournal
    from mcpx_hooks.supervisor.run.phases import PhaseHooks

    async def main() -> list[dict[str, Any]]:
        journal = RunJournal("r")
        hooks = PhaseHooks(
            Config(),
            None,
            Bus(),
            journal=journal,
            run_id="r",
            asks=Asks(),  # type: ignore[arg-type]
        )
        calls = ScriptCalls(config=Config(), hooks=hooks, ctx=HookContext(None), journal=journal)
        send, receive = trio.testing.memory_stream_one_way_pair()
        got = bytearray()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(calls.serve, send)
            for line in lines:
                calls.submit(line)
            assert calls._pending.statistics().current_buffer_used <= MAX_PENDING
            with trio.fail_after(30):
                while got.count(b"\n") < len(lines):
                    got.extend(await receive.receive_some())
            nursery.cancel_scope.cancel()
        return [json.loads(line) for line in got.splitlines()]

    answers = trio.run(main)
    assert len(answers) == len(lines)
    assert all(a["ok"] is False and isinstance(a["error"], str) for a in answers)
