"""`core/batches.bounded`: a run of lines cut into slices bounded in bytes and lines, in
order, nothing lost, each slice at least one line."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.core.batches import bounded


@given(
    st.lists(st.binary(max_size=40), max_size=60),
    st.integers(min_value=1, max_value=120),
    st.one_of(st.none(), st.integers(min_value=1, max_value=10)),
)
def test_slices_keep_every_line_in_order_within_their_bounds(
    lines: list[bytes], most_bytes: int, most_lines: int | None
) -> None:
    slices = list(bounded(lines, most_bytes, most_lines))
    assert [line for part in slices for line in part] == lines
    for part in slices:
        assert part
        assert len(part) == 1 or sum(len(x) + 1 for x in part) <= most_bytes
        assert most_lines is None or len(part) <= most_lines
    # Each cut is where the next line would have passed a bound: no slice could take more.
    for part, after in itertools.pairwise(slices):
        full = sum(len(x) + 1 for x in part) + len(after[0]) + 1 > most_bytes
        assert full or len(part) == most_lines


def test_a_line_longer_than_the_bound_is_a_slice_by_itself() -> None:
    assert list(bounded([b"a", b"x" * 10, b"b"], 4)) == [[b"a"], [b"x" * 10], [b"b"]]
