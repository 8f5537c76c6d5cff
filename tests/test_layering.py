"""The null-splice rule and table merging, without files."""

from __future__ import annotations

from mcpx_hooks.supervisor.config.layering import merge, merge_all, splice


def test_splice_without_null_replaces() -> None:
    assert splice(["a", "b"], ["c"]) == ["c"]
    assert splice(["a"], []) == []


def test_splice_at_start_middle_end_and_several() -> None:
    assert splice(["a", "b"], [None, "c"]) == ["a", "b", "c"]
    assert splice(["a", "b"], ["c", None, "d"]) == ["c", "a", "b", "d"]
    assert splice(["a", "b"], ["c", None]) == ["c", "a", "b"]
    assert splice(["a"], [None, "c", None]) == ["a", "c", "a"]


def test_null_in_the_farthest_layer_splices_nothing() -> None:
    assert merge_all([{"hooks": [None, "x"]}]) == {"hooks": ["x"]}
    assert merge_all([{"script": {"before": [None]}}]) == {"script": {"before": []}}


def test_tables_merge_key_by_key_nearer_wins() -> None:
    far = {"autonomy": {"max": "apply", "hooks": "ask"}, "runs": {"retain": 3}}
    near = {"autonomy": {"hooks": "advise"}}
    assert merge(far, near) == {
        "autonomy": {"max": "apply", "hooks": "advise"},
        "runs": {"retain": 3},
    }


def test_lists_inside_tables_splice_per_key() -> None:
    layers = [
        {"script": {"before": ["a"], "suffix": ["s"]}},
        {"script": {"before": [None, "b"]}},
        {"script": {"before": ["c", None], "onError": ["e", None]}},
    ]
    assert merge_all(layers) == {
        "script": {"before": ["c", "a", "b"], "suffix": ["s"], "onError": ["e"]}
    }


def test_a_layer_without_the_key_keeps_the_farther_list() -> None:
    assert merge_all([{"hooks": ["a"]}, {"runs": {"retain": 1}}]) == {
        "hooks": ["a"],
        "runs": {"retain": 1},
    }


def test_merge_does_not_change_its_inputs() -> None:
    far = {"autonomy": {"max": "run"}, "hooks": ["a"]}
    near = {"autonomy": {"hooks": "off"}, "hooks": [None, "b"]}
    merge(far, near)
    assert far == {"autonomy": {"max": "run"}, "hooks": ["a"]}
    assert near == {"autonomy": {"hooks": "off"}, "hooks": [None, "b"]}
