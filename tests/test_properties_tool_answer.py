"""Properties (Hypothesis) of how a plugin hook reads its tool's answer (`run/pluginhook.py`
`tool_answer`), for any tool result (text and other content, any structured content, text
that is JSON of any shape): it never raises but `InvalidOutput` with `answer = "hook"`; what
it gives is nothing or one JSON object (standard JSON, as a hook's stdout is read) whose
keys are answer keys; an answer object the tool gave is taken as it is, and `advice` always
makes advice of the text. Pure: no server.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from mcp import types
from props import hostile_json, hostile_text, render

from mcpx_hooks.supervisor.core.effects import KEY_EFFECT
from mcpx_hooks.supervisor.core.hooks import PluginAnswer
from mcpx_hooks.supervisor.core.jsontext import loads
from mcpx_hooks.supervisor.run.output import TEXT_KEY, InvalidOutput
from mcpx_hooks.supervisor.run.pluginhook import tool_answer

#: A value as the MCP client reads it from a server's JSON (which takes NaN and Infinity).
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), hostile_text),
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(hostile_text, kids, max_size=3)
    ),
    max_leaves=8,
)
answer_keys = st.sampled_from(sorted(KEY_EFFECT))
answer_object = st.dictionaries(answer_keys, values, max_size=3)
any_object = st.dictionaries(st.one_of(answer_keys, hostile_text), values, max_size=4)
texts = st.one_of(
    hostile_text,
    st.builds(json.dumps, st.one_of(answer_object, any_object, values)),
    st.builds(render, hostile_json),
    st.sampled_from(["", "  ", "{", '{"advise": NaN}', '{"advise": 1, "advise": 2}']),
)
content = st.one_of(
    st.builds(lambda t: types.TextContent(type="text", text=t), texts),
    st.builds(
        lambda d: types.ImageContent(type="image", data=d, mimeType="image/png"),
        st.text(max_size=8),
    ),
)
structured = st.one_of(st.none(), answer_object, any_object)


def not_json(value: Any) -> bool:
    """Whether `value` holds a number JSON cannot say (NaN, an infinity)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return True
    return False


# An answer object holding NaN was given on as `{"advise": NaN}`, which no hook's stdout may
# be: the hook then failed saying its "stdout starts like JSON but is not one JSON object".
@example(parts=[], found={"advise": float("nan")}, mode=PluginAnswer.AUTO)
@example(parts=[], found={"refuse": float("inf")}, mode=PluginAnswer.HOOK)
@given(
    parts=st.lists(content, max_size=3),
    found=structured,
    mode=st.sampled_from(list(PluginAnswer)),
)
def test_a_tool_answer_is_nothing_or_an_answer_object(
    parts: list[Any], found: dict[str, Any] | None, mode: PluginAnswer
) -> None:
    result = types.CallToolResult(content=parts, structuredContent=found)
    text = "".join(p.text for p in parts if p.type == "text")
    try:
        data = tool_answer(result, mode)
    except InvalidOutput as exc:
        said = str(exc)
        if mode is PluginAnswer.AUTO or not said.startswith('answer = "hook": the tool answered'):
            assert mode is not PluginAnswer.ADVICE, exc
            assert not_json(found), exc
            assert "NaN" in said and "stdout" not in said, said
        return
    if not data:
        assert mode is not PluginAnswer.HOOK
        assert not text.strip() and found is None
        return
    answer = loads(data)  # (standard JSON: no NaN, as a hook's stdout is read)
    assert isinstance(answer, dict) and answer.keys() <= KEY_EFFECT.keys(), answer
    if mode is PluginAnswer.ADVICE:
        assert answer == {TEXT_KEY: text.strip() or json.dumps(found)}
    elif found is not None and found.keys() <= KEY_EFFECT.keys():
        assert answer == found
