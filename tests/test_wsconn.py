"""The prebuilt fan-out frame is byte for byte what wsproto would send."""

from __future__ import annotations

import pytest
from wsproto.frame_protocol import FrameProtocol

from mcpx_hooks.supervisor.wsconn import text_frame

SIZES = [0, 1, 125, 126, 65535, 65536, 300_000]


@pytest.mark.parametrize("text", ["x" * n for n in SIZES] + ["é" * 100, "a\nb"])
def test_text_frame_equals_wsproto(text: str) -> None:
    expected = FrameProtocol(client=False, extensions=[]).send_data(text, fin=True)
    assert text_frame(text.encode()) == expected
