"""Which retained runs are forgotten (`to_forget`, used by a `serve`'s runs and a gateway's
copies): the oldest finished ones first, only while over the count or the bytes, never a
running one, for any set of runs."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.run import RunJournal, to_forget


def journal(run_id: str, cost: int, finished: bool) -> RunJournal:
    j = RunJournal(run_id, 1 << 20)
    j.cost = cost
    j.finished = finished
    return j


runs_st = st.lists(st.tuples(st.integers(0, 1000), st.booleans()), max_size=30)


@given(runs_st, st.integers(0, 35), st.integers(0, 20_000))
def test_the_oldest_finished_go_first_and_only_while_over_budget(
    specs: list[tuple[int, bool]], retain: int, retain_bytes: int
) -> None:
    runs = OrderedDict((f"r{i}", journal(f"r{i}", c, f)) for i, (c, f) in enumerate(specs))
    gone = to_forget(runs, retain, retain_bytes, lambda j: j.finished)
    # Each one forgotten is finished, and they are the oldest finished, in order.
    finished = [run_id for run_id, j in runs.items() if j.finished]
    assert gone == finished[: len(gone)]
    kept = [j for run_id, j in runs.items() if run_id not in gone]
    within = len(kept) <= retain and sum(j.cost for j in kept) <= retain_bytes
    # Within budget after, or every finished run is gone (running ones cannot be).
    assert within or gone == finished
    # None forgotten that was not needed: without the last one, still over budget.
    if gone:
        back = [j for run_id, j in runs.items() if run_id not in gone[:-1]]
        assert len(back) > retain or sum(j.cost for j in back) > retain_bytes
