"""Backoff: how long to wait before trying again something that failed, given how many
times in a row it has failed. The wait doubles from a first one up to a most, so what fails
once is tried again soon and what keeps failing is tried ever less often, never less often
than the most.

Pure: a caller counts its failures in a row (none again once one try works) and sleeps the
wait itself. Tool servers restart so (`BACKOFF_FIRST_S` … `BACKOFF_MAX_S`), and the cluster
tries NATS again so (`cluster/link.py`).
"""

from __future__ import annotations

from typing import Final

#: Doublings past this change nothing (the most is reached long before) and would overflow.
_MOST_DOUBLINGS: Final = 64


def retry_wait_s(failures: int, first_s: float, most_s: float) -> float:
    """The wait after `failures` failures in a row: `first_s`, twice that, four times …
    at most `most_s`; none after no failure."""
    if failures <= 0:
        return 0.0
    return min(most_s, first_s * 2.0 ** min(failures - 1, _MOST_DOUBLINGS))
