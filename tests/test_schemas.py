"""The schema files: valid 2020-12, generated from the tables, and saying what they mean."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import jsonschema
import pytest

from mcpx_hooks.supervisor.config import schemas
from mcpx_hooks.supervisor.config.schemaparts import MAX_INTEGER
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.events import kind_prefixes
from mcpx_hooks.supervisor.core.hooks import (
    DEFAULTS,
    HOOK_SETTINGS,
    Action,
    Defaults,
    Failure,
    Hook,
    Profile,
)
from mcpx_hooks.supervisor.core.points import POINTS, Phase
from mcpx_hooks.supervisor.core.spawntext import ENV_NAME_PATTERN, TEXT_PATTERN


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_schema_files_are_valid_2020_12(name: str) -> None:
    document = schemas.schema(name)
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["$id"].endswith(name)
    assert document["title"]


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_committed_files_are_what_the_tables_build(name: str) -> None:
    # Regenerate with: python -m mcpx_hooks.supervisor.config.schemas --write
    assert schemas.schema_text(name) == schemas.render(name)


def _properties(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, sub in node.get("properties", {}).items():
            yield f"{where}/{key}", sub
        for key, sub in node.items():
            yield from _properties(sub, f"{where}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _properties(sub, f"{where}/{i}")


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_every_key_is_described(name: str) -> None:
    undescribed = [
        where for where, sub in _properties(schemas.schema(name)) if "description" not in sub
    ]
    # `oneOf` branches and `if`/`then` restate keys already described.
    restated = ("/oneOf/", "/if/", "/then/", "/else/")
    assert [w for w in undescribed if not any(r in w for r in restated)] == []


def test_config_enums_come_from_the_tables() -> None:
    config = schemas.schema("config")
    defs = config["$defs"]
    assert defs["phase"]["enum"] == [p.value for p in Phase]
    assert len(defs["phase"]["enum"]) == 6
    assert defs["effect"]["enum"] == ["off", "advise", "ask", "propose", "apply", "run"]
    assert defs["effect"]["enum"] == [e.word for e in Effect]
    assert defs["point"]["enum"] == list(POINTS)
    assert defs["eventKind"]["enum"] == list(kind_prefixes())
    assert defs["sandbox"]["enum"] == [p.value for p in Profile]
    hook = defs["hook"]
    assert hook["properties"]["failure"]["enum"] == [f.value for f in Failure]
    assert [b["required"][0] for b in hook["oneOf"]] == [
        a.value for a in Action if a.value != "source"
    ] + ["source"]
    assert list(config["properties"]["script"]["properties"]) == [
        "before",
        "prefix",
        "onSuccess",
        "onError",
        "suffix",
        "sandbox",
        "passEnv",
        "secrets",
        "network",
    ]
    assert config["properties"]["script"]["properties"]["sandbox"]["$ref"] == "#/$defs/sandbox"
    assert list(config["properties"]["sandbox"]["properties"]) == ["read", "write", "deny"]


def test_validators_are_compiled_once() -> None:
    assert schemas.validator("config") is schemas.validator("config")
    assert schemas.hook_validator() is schemas.hook_validator()
    assert schemas.quick_check("hook-output") is schemas.quick_check("hook-output")


def test_unknown_schema_name_is_refused() -> None:
    with pytest.raises(KeyError, match="hook-input"):
        schemas.schema_text("hooks")


def test_schema_text_is_the_json_of_schema() -> None:
    assert json.loads(schemas.schema_text("hook-output")) == schemas.schema("hook-output")


def test_config_schema_allows_null_only_in_spliced_lists() -> None:
    check = schemas.validator("config")
    ok = {"hooks": [None, {"on": "script", "phase": "before", "run": ["x"]}]}
    assert list(check.iter_errors(ok)) == []
    assert list(check.iter_errors({"script": {"before": [None, "x"]}})) == []
    bad = {"hooks": [{"on": "script", "phase": "before", "run": [None]}]}
    assert [list(e.absolute_path) for e in check.iter_errors(bad)] == [["hooks", 0, "run", 0]]
    assert list(check.iter_errors({"autonomy": None}))


SAMPLE_INPUT: dict[str, Any] = {
    "protocol": 1,
    "hook": {
        "name": "deps",
        "on": "script",
        "phase": "onSuccess",
        "action": "run",
        "effect": "apply",
        "timeoutMs": 5000,
    },
    "run": {
        "runId": "r1",
        "argv": ["python3", "job.py"],
        "cwd": "/w",
        "startedAt": "2024-01-01T00:00:00Z",
    },
    "result": {"value": {"n": 1}},
}


def test_hook_input_accepts_the_spec_example() -> None:
    check = schemas.validator("hook-input")
    assert list(check.iter_errors(SAMPLE_INPUT)) == []
    observe = {
        **SAMPLE_INPUT,
        "run": None,
        "event": {"seq": 12, "kind": "hook.failed", "at": "2024-01-01T00:00:00Z", "data": {}},
    }
    assert list(check.iter_errors(observe)) == []
    error = {**SAMPLE_INPUT, "error": {"message": "boom", "exitCode": 1, "stderrTail": "x"}}
    assert list(check.iter_errors(error)) == []


@pytest.mark.parametrize(
    "change",
    [
        {"protocol": 2},
        {"hook": {**SAMPLE_INPUT["hook"], "phase": "during"}},
        {"hook": {**SAMPLE_INPUT["hook"], "action": "source"}},
        {"run": {"runId": "r1"}},
        {"result": {}},
        {"error": {"exitCode": 1}},
        {"event": {"seq": -1, "kind": "k", "at": "t", "data": {}}},
    ],
)
def test_hook_input_refuses(change: dict[str, Any]) -> None:
    assert list(schemas.validator("hook-input").iter_errors({**SAMPLE_INPUT, **change}))


@pytest.mark.parametrize(
    "output",
    [
        {},
        {"advise": "fine"},
        {"advise": ["a", "b"]},
        {"refuse": "no"},
        {"refuse": {"reason": "no"}},
        {"ask": {"question": "go?", "default": "no", "deadlineMs": 0}},
        {"propose": {"value": None, "note": "n"}},
        {"apply": {"value": [1]}},
        {"run": {"argv": ["true"]}},
        {"unknown": 1},
        {"advise": []},
        {"ask": {"question": "q", "deadlineMs": 5.0}},  # an integer in JSON Schema
        {"refuse": {"reason": "r", "more": [None]}},
    ],
)
def test_hook_output_accepts(output: dict[str, Any]) -> None:
    assert list(schemas.validator("hook-output").iter_errors(output)) == []
    assert schemas.quick_check("hook-output")(output)


@pytest.mark.parametrize(
    "output",
    [
        [],
        {"advise": 1},
        {"advise": [1]},
        {"refuse": {}},
        {"ask": {"default": "yes"}},
        {"ask": {"question": "q", "default": "maybe"}},
        {"ask": {"question": "q", "deadlineMs": -1}},
        {"propose": {"note": "n"}},
        {"apply": {}},
        {"run": {"argv": []}},
        {"run": {"argv": "ls -l"}},
        {"advise": None},
        {"advise": {"text": "x"}},
        {"refuse": {"reason": 1}},
        {"refuse": ["no"]},
        {"ask": {"question": 1}},
        {"ask": {"question": "q", "deadlineMs": True}},
        {"ask": {"question": "q", "deadlineMs": 1.5}},
        {"ask": {"question": "q", "deadlineMs": "5"}},
        {"propose": {"value": 1, "note": 2}},
        {"apply": None},
        {"run": {"argv": [1]}},
        {"run": {"argv": ["ls", None]}},
        {"run": ["ls"]},
    ],
)
def test_hook_output_refuses(output: Any) -> None:
    assert list(schemas.validator("hook-output").iter_errors(output))
    # The quick check only ever says yes to what jsonschema accepts.
    assert not schemas.quick_check("hook-output")(output)


# --- what a process can be given (issue 11, case 2): the spawntext rules in the schemas ------


def _at(document: dict[str, Any], pointer: str) -> Any:
    node: Any = document
    for token in pointer.split("/")[1:]:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


@pytest.mark.parametrize(
    ("name", "pointer", "pattern"),
    [
        ("config", "/$defs/hook/properties/run/prefixItems/0", TEXT_PATTERN),
        ("config", "/$defs/hook/properties/run/items", TEXT_PATTERN),
        ("config", "/$defs/hook/properties/env/propertyNames", ENV_NAME_PATTERN),
        ("config", "/$defs/hook/properties/env/additionalProperties", TEXT_PATTERN),
        ("config", "/$defs/hook/properties/cwd", TEXT_PATTERN),
        ("config", "/$defs/hook/properties/name", TEXT_PATTERN),
        ("config", "/$defs/hook/properties/on", TEXT_PATTERN),
        ("config", "/properties/script/properties/before/items", TEXT_PATTERN),
        ("hook-output", "/properties/run/properties/argv/prefixItems/0", TEXT_PATTERN),
        ("hook-output", "/properties/run/properties/argv/items", TEXT_PATTERN),
    ],
)
def test_strings_that_reach_a_process_carry_the_spawntext_pattern(
    name: str, pointer: str, pattern: str
) -> None:
    assert _at(schemas.schema(name), pointer)["pattern"] == pattern


@pytest.mark.parametrize("name", ["config", "hook-output"])
def test_the_program_is_a_non_empty_string(name: str) -> None:
    where = "/$defs/hook/properties/run" if name == "config" else "/properties/run/properties/argv"
    argv = _at(schemas.schema(name), where)
    assert argv["minItems"] == 1
    assert argv["prefixItems"][0]["minLength"] == 1


@pytest.mark.parametrize(
    "hook",
    [
        {"run": ["x"], "env": {"A=B": "x"}},
        {"run": ["x"], "env": {"": "x"}},
        {"run": ["x"], "env": {"A\0": "x"}},
        {"run": ["x"], "env": {"A\ud800": "x"}},
        {"run": ["x"], "env": {"A": "\0"}},
        {"run": ["x", "a\0b"]},
        {"run": ["\ud800"]},
        {"run": [""]},
        {"run": ["x"], "cwd": "a\0"},
        {"module": "a\0.py"},
        {"module": "a\ud800.py"},
    ],
)
def test_the_hook_schema_refuses_what_a_process_cannot_take(hook: dict[str, Any]) -> None:
    obj = {"on": "script", "phase": "before", **hook}
    assert list(schemas.hook_validator().iter_errors(obj))


def test_the_hook_schema_keeps_what_a_process_can_take() -> None:
    obj = {
        "on": "script",
        "phase": "before",
        "run": ["prog", "", "a b", "\n", "é\U0001f600"],
        "env": {"A": "", "B-C.d": "x=y", "é": "\t"},
        "cwd": "sub dir",
    }
    assert list(schemas.hook_validator().iter_errors(obj)) == []
    module = {**obj, "module": "hooks/a b.py:main"}
    del module["run"]
    assert list(schemas.hook_validator().iter_errors(module)) == []


@pytest.mark.parametrize(
    "argv",
    [[""], ["\0"], ["ls", "a\0"], ["\ud800"], ["ls", "\udfff"]],
)
def test_a_run_answer_a_process_cannot_take_is_refused_by_both_checks(argv: list[str]) -> None:
    output = {"run": {"argv": argv}}
    assert list(schemas.validator("hook-output").iter_errors(output))
    assert not schemas.quick_check("hook-output")(output)


def test_the_quick_check_reads_prefix_items_as_draft_7() -> None:
    node = {"type": "array", "prefixItems": [{"minLength": 1}], "items": {"type": "string"}}
    assert schemas._draft7({"a": [node]}) == {
        "a": [{"type": "array", "items": [{"minLength": 1}], "additionalItems": {"type": "string"}}]
    }
    assert schemas.quick_check("hook-output")({"run": {"argv": ["ls", ""]}})


def test_every_integer_read_from_outside_has_a_maximum() -> None:
    # The config and a hook's answer are read; the hook input is what the supervisor writes.
    integers = [
        (where, sub)
        for name in ("config", "hook-output")
        for where, sub in _properties(schemas.schema(name))
        if sub.get("type") == "integer"
    ]
    assert integers
    assert [w for w, sub in integers if not 0 < sub.get("maximum", 0) <= MAX_INTEGER] == []
    limits = schemas.schema("config")["properties"]["limits"]["properties"]
    assert limits["memoryMb"]["maximum"] * (1 << 20) <= 2**63 - 1
    assert limits["cpuSeconds"]["maximum"] == MAX_INTEGER


def test_the_hook_defaults_table_is_the_schema_s() -> None:
    # One row per `Defaults` attribute, in its order; `Hook` takes the same built-in values.
    # `network` is the one list among them, a ceiling with no per-hook scalar default (its own
    # schema and tests: `core/egress.py`, test_egress_config.py), so it has no row here.
    settable = [a.name for a in attrs.fields(Defaults) if a.name != "network"]
    assert [s.attr for s in HOOK_SETTINGS] == settable
    assert [a.name for a in attrs.fields(Defaults)][-1] == "network"
    hook_fields = {a.name: a for a in attrs.fields(Hook)}
    for setting in HOOK_SETTINGS:
        assert (
            hook_fields[setting.attr].default == setting.default == getattr(DEFAULTS, setting.attr)
        )
    config = schemas.schema("config")
    defaults = config["properties"]["defaults"]["properties"]
    hook = config["$defs"]["hook"]["properties"]
    assert list(defaults) == [*(s.key for s in HOOK_SETTINGS), "network"]
    for setting in HOOK_SETTINGS:
        for node in (defaults[setting.key], hook[setting.key]):
            assert node["description"].startswith(setting.meaning)
            if setting.minimum is None:
                words = config["$defs"][node["$ref"].rsplit("/", 1)[1]]["enum"]
                assert setting.written in words
            else:
                assert (node["type"], node["minimum"]) == ("integer", setting.minimum)
                assert node["minimum"] <= setting.default
        shown = f"`{setting.written}`" if isinstance(setting.written, str) else setting.written
        assert defaults[setting.key]["description"].endswith(f"(default {shown}).")
        # What a config writes is what the loader reads back.
        assert setting.parse(setting.written) == setting.default
    assert DEFAULTS.overridden({}) == DEFAULTS
    assert DEFAULTS.overridden({"timeoutMs": 7, "effect": "ask", "name": "x"}) == attrs.evolve(
        DEFAULTS, timeout_ms=7, effect=Effect.ASK
    )
