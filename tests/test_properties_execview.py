"""Properties (Hypothesis) of `exec`'s printing of a batch of output frames
(`cli/execview.Output.output`): for any output frames, the bytes printed, readable and
`--json`, are those printed frame by frame (`Output.frame`). Pure: stdout is a buffer.
"""

from __future__ import annotations

import io
import sys
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from mcpx_hooks.supervisor.cli.execview import Output

frames = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["stdout", "stderr"]), "text": st.text(max_size=20)},
        optional={"seq": st.one_of(st.integers(0, 2**63), st.just(2**64))},
    ),
    max_size=8,
)


def printed(show: Any) -> bytes:
    """What `show(Output())` prints on stdout, flushed."""
    raw = io.BytesIO()
    text = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    stdout, sys.stdout = sys.stdout, text
    try:
        out = Output()
        show(out)
        out.flush()
        text.flush()
        return raw.getvalue()
    finally:
        sys.stdout = stdout


@example(batch=[{"type": "stdout", "text": "a\nb", "seq": 2**64}], as_json=True)
@example(batch=[{"type": "stderr", "text": ""}], as_json=False)
@given(batch=frames, as_json=st.booleans())
def test_a_batch_prints_what_its_frames_print_one_by_one(
    batch: list[dict[str, Any]], as_json: bool
) -> None:
    def each(out: Output) -> None:
        for frame in batch:
            out.frame(frame, as_json)

    assert printed(lambda out: out.output(batch, as_json)) == printed(each)
