"""What `/mcp` spends reading a large POST body: the front door's own check of it
(`mcpweb._unreadable_body`: a batch, an `id` MCP does not take, the words of a refusal) against
the SDK's transport's parse of the same body, and against the model's `validate_json`, which
the check used before it parsed once. (The check runs only on a body the transport refused,
or a message with an `id` it answered 202: a request's body is parsed once, by the transport.)

    .venv/bin/python bench/_mcp_body.py [--items 40000]

The body is a `tools/call` whose arguments hold `--items` small objects (~1 MB at 40,000). A
measuring aid, not a row of `make bench` (no goal): it prints the figures and the ratios.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import pydantic_core
from mcp.types import jsonrpc_message_adapter

from mcpx_hooks.supervisor.service import mcpweb


def best(f: Callable[[], object], times: int = 15) -> float:
    """The best of `times` runs of `f`, in ms."""
    took = []
    for _ in range(times):
        began = time.perf_counter()
        f()
        took.append(time.perf_counter() - began)
    return min(took) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=40_000)
    items = parser.parse_args().items
    arguments = {"items": [{"a": i, "b": "x"} for i in range(items)]}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}
    body = json.dumps({**call, "params": {"name": "t", "arguments": arguments}}).encode()
    sdk = best(lambda: jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body)))
    check = best(lambda: mcpweb._unreadable_body(body))
    before = best(lambda: jsonrpc_message_adapter.validate_json(body, by_name=False))
    print(f"body {len(body):,} bytes")
    print(f"the SDK's parse         {sdk:7.1f} ms")
    print(f"the check (one parse)   {check:7.1f} ms  {check / sdk:4.2f}x the SDK's parse")
    print(f"validate_json (before)  {before:7.1f} ms  {before / sdk:4.2f}x the SDK's parse")


if __name__ == "__main__":
    main()
