"""Quick mode: every benchmark once, at the smallest size that still takes each of its code
paths and prints each of its RESULT lines, so that a broken benchmark fails `make test`
(tests/test_bench_quick.py runs `run_all.py --quick NAME` for every script here).

`run_all.py --quick` sets `MCPX_BENCH_QUICK=1` for the scripts it runs (by hand:
`MCPX_BENCH_QUICK=1 .venv/bin/python bench/NAME.py`). A script honours it in two ways:

* it parses its arguments with `parse_args(parser, dest=value, ...)` (an option's dest:
  `per_round` for `--per-round`): in quick mode those values become the options' defaults (an
  option given on the command line still wins), and the script's docstring says what they
  are;
* where a part it needs is not there (a program the distribution may lack, root, a user), it
  calls `missing(why)`, which prints `SKIP <why>` and exits: 0 in quick mode (`run_all.py
  --quick` shows a skipped row, and CI goes on where the part cannot be installed), 1 in a
  full run (a figure that cannot be measured is a `FAILED` row of `make bench`).

The figures of a quick run mean nothing: `run_all.py --quick` prints them with no verdict.
Not a benchmark itself (`run_all.py` skips files starting with `_`); it imports nothing
beyond the standard library, so a script's child processes may use it too.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

QUICK_ENV = "MCPX_BENCH_QUICK"


def quick() -> bool:
    """Whether this is a quick run."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, /, **smallest: object
) -> argparse.Namespace:
    """`parser.parse_args(argv)`, with `smallest` as the defaults in quick mode. Each name
    must be the dest of an option that has a default (a misspelt one would leave its size
    at full length)."""
    unknown = [name for name in smallest if parser.get_default(name) is None]
    if unknown:
        raise ValueError(f"no option with a default for {', '.join(unknown)}")
    if quick():
        parser.set_defaults(**smallest)
    return parser.parse_args(argv)


def missing(why: str) -> NoReturn:
    """A part this benchmark needs is not there: says which, and exits (see above)."""
    print(f"SKIP {why}", flush=True)
    sys.exit(0 if quick() else 1)
