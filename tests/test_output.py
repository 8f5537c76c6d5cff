"""Reading a hook's answer (SPEC §4): tolerated forms, clear failures, keys above the effect."""

import json

import pytest

from mcpx_hooks.supervisor.core.answers import bound_answer
from mcpx_hooks.supervisor.core.effects import Effect
from mcpx_hooks.supervisor.core.redact import Redactor
from mcpx_hooks.supervisor.run.output import InvalidOutput, read_output, stdout_head


def test_nothing_is_no_opinion() -> None:
    assert read_output(b"") is None
    assert read_output(b"  \n\t") is None
    assert bound_answer(None, Effect.RUN).advice == ()


def test_bom_and_whitespace_tolerated() -> None:
    assert read_output(b'\xef\xbb\xbf \n{"advise": "x"}\n\n') == {"advise": "x"}


@pytest.mark.parametrize(
    ("stdout", "says"),
    [
        (b"{hello", "starts like JSON but is not one JSON object"),
        (b"[1, 2]", "not an object: found array"),
        (b"  [unclosed", "not one JSON object"),
        (b'{"a": 1} {"b": 2}', "not one JSON object"),
        (b'{"advise": 3}', "hook-output schema at /advise"),
        (b'{"ask": {"default": "yes"}}', 'missing the required key "question"'),
        (b'{"run": {"argv": "ls -l"}}', "/run/argv"),
        (b"\xff\xfe{}", "stdout is not UTF-8: byte 0xff at line 1, column 1"),
        (b'{"advise":\n  "caf\xe9"}', "stdout is not UTF-8: byte 0xe9 at line 2, column 7"),
    ],
)
def test_invalid_output_says_why(stdout: bytes, says: str) -> None:
    with pytest.raises(InvalidOutput, match=None) as info:
        read_output(stdout)
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("stdout", "advice"),
    [
        (b"/usr/bin/jq\n", "/usr/bin/jq"),
        (b"\xef\xbb\xbf  all good\n  second line\n\n", "all good\n  second line"),
        (b'"text"', '"text"'),
        (b"3", "3"),
        ("pr\u00fcfung ok".encode(), "pr\u00fcfung ok"),
    ],
)
def test_plain_text_is_advice(stdout: bytes, advice: str) -> None:
    assert read_output(stdout) == {"advise": advice}
    assert bound_answer(read_output(stdout), Effect.ADVISE).advice == (advice,)


def test_plain_text_under_off_is_dropped_and_named() -> None:
    answer = bound_answer(read_output(b"hello"), Effect.OFF)
    assert answer.advice == ()
    assert [d.key for d in answer.dropped] == ["advise"]


def test_stdout_head_is_the_first_kib_as_text() -> None:
    none = Redactor({})
    assert stdout_head(b"{oops\n", none) == "{oops\n"
    long = ("\u00e9" * 600).encode()  # 1200 bytes: the 1024th byte splits a character
    head = stdout_head(long, none)
    assert head == "\u00e9" * 512
    assert stdout_head(b"\xff{x", none) == "\ufffd{x"


def test_schema_errors_name_the_first_place_exactly() -> None:
    with pytest.raises(InvalidOutput) as info:
        read_output(b'{"run": {"argv": []}, "ask": {"question": "q", "deadlineMs": true}}')
    assert str(info.value) == (
        "stdout does not match hook-output schema at /ask/deadlineMs: expected an integer,"
        " found the boolean true"
    )


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        # A refusal without its reason broke the translation (KeyError): a traceback out of
        # `exec` and `hook test`, whatever hook printed it.
        (b'{"refuse": {}}', 'at /refuse: missing the required key "reason"'),
        (b'{"refuse": {"why": "x"}}', 'at /refuse: missing the required key "reason"'),
        # Inside the value, the branch of its own type says where (it said "found an object").
        (b'{"refuse": {"reason": 1}}', "at /refuse/reason: expected a string, found the integer 1"),
        (
            b'{"refuse": 5}',
            'at /refuse: expected a string or an object with "reason", found the integer 5',
        ),
        # jsonschema's own words, in Python: `['a', 1] is not valid under any of the given…`.
        (
            b'{"advise": 5}',
            "at /advise: expected a string or an array of strings, found the integer 5",
        ),
        (
            b'{"advise": ["a", 1]}',
            "at /advise/1: expected a string, found the integer 1",
        ),
        # The config's words for its `run` (an argv array), said of an answer's `run`, which
        # is an object: "expected an argv array of strings, found an array of 1".
        (b'{"run": ["ls"]}', 'at /run: expected an object ({"argv": [...]}), found an array of 1'),
        (
            b'{"run": "ls -l"}',
            'at /run: expected an object ({"argv": [...]}), found the string "ls -l"',
        ),
    ],
)
def test_an_answer_of_the_wrong_shape_is_said_in_words(stdout: bytes, message: str) -> None:
    with pytest.raises(InvalidOutput) as info:
        read_output(stdout)
    assert str(info.value) == f"stdout does not match hook-output schema {message}"


def test_keys_above_the_effect_are_dropped_and_named() -> None:
    obj = {"advise": ["a", "b"], "apply": {"value": 1}, "refuse": "no", "later": True}
    answer = bound_answer(obj, Effect.ADVISE)
    assert answer.advice == ("a", "b")
    assert answer.apply is None and answer.refuse is None
    dropped = {d.key: d.reason for d in answer.dropped}
    assert dropped == {
        "apply": "needs effect apply; in force: advise",
        "refuse": "needs effect ask; in force: advise",
        "later": "unknown key",
    }


def test_an_unknown_key_close_to_a_known_one_says_which_was_meant() -> None:
    # `{"advice": "…"}` (the hook frame's word) was dropped as "unknown key", no more said.
    answer = bound_answer({"advice": "x", "refusal": "no", "zzz": 1}, Effect.RUN)
    assert answer.advice == ()
    assert {d.key: d.reason for d in answer.dropped} == {
        "advice": 'unknown key; did you mean "advise"?',
        "refusal": 'unknown key; did you mean "refuse"?',
        "zzz": "unknown key",
    }


def test_every_key_honoured_at_run() -> None:
    obj = {
        "advise": "x",
        "refuse": {"reason": "because"},
        "ask": {"question": "go?", "default": "yes", "deadlineMs": 5},
        "propose": {"value": 2, "note": "n"},
        "apply": {"value": None},
        "run": {"argv": ["true"]},
    }
    answer = bound_answer(json.loads(json.dumps(obj)), Effect.RUN)
    assert answer.refuse == "because"
    assert answer.ask is not None and answer.ask.default == "yes"
    assert answer.propose == {"value": 2, "note": "n"}
    assert answer.apply == (None,)
    assert answer.run == ("true",)
    assert answer.dropped == ()


def test_off_drops_everything() -> None:
    answer = bound_answer({"advise": "x"}, Effect.OFF)
    assert answer.advice == ()
    assert [d.key for d in answer.dropped] == ["advise"]
