"""Sizes as a person reads them: `512 bytes`, `195.3 KiB`, `2 MiB`, `1.5 GiB`, the way every
message that tells a size in passing says it (a bound a person set in bytes is said in the
bytes they wrote)."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def shown_size(count: int) -> str:
    """`count` bytes for a person: bytes under 1 KiB, else the largest binary unit it reaches,
    to a tenth at most (`2 MiB`, `1.9 MiB`, not `2.0` or `1.907349`)."""
    if count < 1024:
        return f"{count} bytes"
    for power, unit in enumerate(_UNITS, start=1):
        shown = f"{count / (1 << (10 * power)):.1f}".removesuffix(".0")
        if float(shown) < 1024:  # (1023.96 KiB is said as 1 MiB)
            return f"{shown} {unit}"
    return f"{shown} {_UNITS[-1]}"
