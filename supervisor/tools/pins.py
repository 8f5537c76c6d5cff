"""Contract pinning: a tool server's `tools/list` answer, pinned in the trust state by its
SHA-256 (canonical JSON), so that a server whose tools change under the same name and
command is noticed. `[servers.x] pin` (`PIN_MODES`): `first-use` (default: a server never
pinned is pinned at its first use, with a warning), `require` (a server never pinned is
refused), `off`.

`verdict` decides a server's state against its pin (and pins it at its first use); `pin`
pins it as it is now (`mcpx-hooks trust --servers`); `change_items` says what differs from the
pin (`mcpx-hooks servers diff`). These read and write the state file: call them from a thread.

A listing that quarantines its server is also kept, the last one a server, beside the state
file (`SEEN_FILE`): a server whose tools changed while it ran (it said so, and was listed
again) may list its pinned tools again at a fresh start, where `servers diff` looks, so
`seen` hands `servers diff` what the running server listed. The file says what was seen, not
what is trusted: one that cannot be read is taken as empty.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..config.privatefile import write_private
from ..config.statefiles import StateError, read_private, state_path
from ..config.trust import ServerPin, pin_key, tools_sha256
from ..config.truststore import load_state, locked_state, save_state
from ..core import jsontext
from ..core.frames import at_time, now_rfc3339
from ..core.records import Record
from ..core.servers import PIN_MODES, ServerSpec

if TYPE_CHECKING:
    from .serverentry import ServerEntry

#: What `pin = "require"` is (`PIN_MODES`' other two: the default, and off).
REQUIRE: Final = PIN_MODES[1]
OFF: Final = PIN_MODES[2]


@attrs.frozen(repr=False, eq=False)
class PinVerdict(Record):
    """A server against its pin: `quarantined` (why its tools are hidden and its calls
    refused), else None; `warning`: something to say (it was pinned just now)."""

    quarantined: str | None = None
    warning: str | None = None
    #: When (`time.time()`) the pin its tools differ from was taken (None: no such pin).
    pinned_at: float | None = None


def listing(entry: ServerEntry) -> list[dict[str, Any]]:
    """The server's tools as they are pinned: as it wrote them in its listing (every key,
    one of its own or of a newer revision too: what a client of the gateway is listed), its
    secrets redacted; a tool the SDK's client read without keeping it (`listings.py`), as
    its model has it."""
    from .listings import as_listed  # (the SDK, loaded when a server starts)

    return [as_listed(t) for t in entry.tools]


def key_of(spec: ServerSpec) -> str:
    return pin_key(spec.name, spec.where, spec.workdir)


def _commands(name: str) -> str:
    # (They read the config as every command does: a server declared in a file given with
    # `--config` is found only with that file given again.)
    return (
        f"`mcpx-hooks servers diff {name}` shows what changed, `mcpx-hooks trust --servers"
        f" {name}` pins it as it is now (give each the --config files this command was given)"
    )


def verdict(spec: ServerSpec, tools: Sequence[Any], environ: Mapping[str, str]) -> PinVerdict:
    """`spec`'s server, listing `tools`, against its pin; pinned now at its first use."""
    if spec.pin == OFF:
        return PinVerdict()
    name, sha = spec.name, tools_sha256(list(tools))
    path = state_path(environ)
    state, unreadable = load_state(path)
    if unreadable is not None:
        why = f"server {name}: its tools cannot be checked against their pin: {unreadable}"
        return PinVerdict(why)
    pinned = state.servers.get(key_of(spec))
    if pinned is not None:
        if pinned.sha256 == sha:
            return PinVerdict()
        _keep_seen(path, key_of(spec), sha, list(tools))
        at = at_time(pinned.pinned_at)
        return PinVerdict(
            f"server {name} is quarantined: its tools changed since they were pinned;"
            f" {_commands(name)}",
            pinned_at=None if at is None else at.timestamp(),
        )
    if spec.pin == REQUIRE:
        return PinVerdict(
            f'server {name} has no pinned tool list and pin = "require": review its tools with'
            f" `mcpx-hooks servers list`, then pin them with `mcpx-hooks trust --servers"
            f" {name}`"
        )
    try:
        pin(spec, tools, environ)
    except StateError as exc:
        return PinVerdict(warning=f"server {name}: its tools could not be pinned: {exc}")
    return PinVerdict(
        warning=f"server {name}: its {_tools(len(tools))} pinned at their first use (a later"
        f" change quarantines it; {_commands(name)})"
    )


def state_stamp(path: Path | None) -> tuple[int, int, int] | None:
    """What tells one trust state file (`path`, from `state_path`) from the next (each is
    written anew and renamed into place): a verdict decided on one holds until the file is
    another. None: there is none."""
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


def _tools(count: int) -> str:
    return "1 tool was" if count == 1 else f"{count} tools were"


def pin(spec: ServerSpec, tools: Sequence[Any], environ: Mapping[str, str]) -> None:
    """Pins `tools` as `spec`'s server's list; `StateError` when the state cannot be written."""
    path = state_path(environ)
    if path is None:
        raise StateError("no state directory (XDG_STATE_HOME or HOME)", bad_input=False)
    listed = list(tools)
    with locked_state(path) as state:
        entry = ServerPin(tools_sha256(listed), now_rfc3339(), tuple(listed))
        save_state(path, state.with_pin(key_of(spec), entry))


def pinned_names(spec: ServerSpec, environ: Mapping[str, str]) -> list[str] | None:
    """The names of the tools pinned for `spec`'s server (None: it has no pin, or the trust
    state cannot be read), for `exec --explain` to say which a `when.tool` matches."""
    state, unreadable = load_state(state_path(environ))
    return None if unreadable is not None else state.tool_names(key_of(spec))


def change_items(
    spec: ServerSpec, tools: Sequence[Any], environ: Mapping[str, str]
) -> list[dict[str, Any]]:
    """What differs between `spec`'s pin and `tools`, as `servers diff --json` gives it
    (`change_line`: in words); empty when nothing does. Each is `{"change": "added" |
    "removed" | "changed", "tool", "keys"?}`, `{"change": "order"}`, or `{"change":
    "unpinned"}` (no pin to differ from). `StateError` when the state cannot be believed."""
    state, unreadable = load_state(state_path(environ))
    if unreadable is not None:
        raise StateError(unreadable)
    pinned = state.servers.get(key_of(spec))
    if pinned is None:
        return [{"change": "unpinned"}]
    before = {str(t.get("name")): t for t in pinned.tools if isinstance(t, dict)}
    now = {str(t.get("name")): t for t in tools if isinstance(t, dict)}
    items: list[dict[str, Any]] = [{"change": "added", "tool": n} for n in now if n not in before]
    items += [{"change": "removed", "tool": n} for n in before if n not in now]
    for name in (n for n in now if n in before and now[n] != before[n]):
        was, new = before[name], now[name]
        keys = sorted(k for k in {*new, *was} if new.get(k) != was.get(k))
        items.append({"change": "changed", "tool": name, "keys": keys})
    if not items and pinned.sha256 != tools_sha256(list(tools)):
        items.append({"change": "order"})
    return items


def change_line(spec: ServerSpec, item: Mapping[str, Any]) -> str:
    """One of `change_items` in words, as `servers diff` prints it."""
    change, tool = item["change"], item.get("tool")
    if change == "unpinned":
        return f"server {spec.name} has no pinned tool list"
    if change == "order":
        return "the tools are in another order"
    if change == "changed":
        return f"tool changed: {tool} ({', '.join(item['keys'])})"
    return f"tool {change}: {tool}"


#: Where the listings that quarantined their servers are kept, beside the trust state file.
SEEN_FILE: Final = "servers-seen.json"
#: The servers whose last such listing is kept (the oldest let go past it); a listing kept
#: at most (JSON; a larger one is not kept: its quarantine stands, `servers diff` cannot show
#: it), and the file at most (the oldest listings let go past it). A server can change its
#: listing once a second (`serverlife.RELIST_GAP_S`): this bounds what it can make us write.
SEEN_SERVERS: Final = 64
SEEN_LISTING_BYTES: Final = 512 * 1024
_SEEN_BYTES: Final = 4 * 1024 * 1024


def seen_changes(
    spec: ServerSpec, tools: Sequence[Any], environ: Mapping[str, str]
) -> tuple[str, list[dict[str, Any]]] | None:
    """When the server last listed (`seen`) other tools than its pin and than `tools` (its
    listing now), and what differs from the pin then (`change_items`); else None."""
    kept = seen(spec, environ)
    if kept is None or kept.sha256 == tools_sha256(list(tools)):
        return None
    items = change_items(spec, kept.tools, environ)
    return (kept.pinned_at, items) if items else None


def seen(spec: ServerSpec, environ: Mapping[str, str]) -> ServerPin | None:
    """The last listing of `spec`'s server that differed from its pin, as kept (None: none,
    or the file cannot be read)."""
    path = state_path(environ)
    entry = _read_seen(path.with_name(SEEN_FILE)).get(key_of(spec)) if path else None
    if not isinstance(entry, dict):
        return None
    sha, at, tools = entry.get("sha256"), entry.get("seenAt"), entry.get("tools")
    if not isinstance(at, str) or not (at.isascii() and at.isprintable() and len(at) <= 40):
        return None  # (a time stamp, printed as it is)
    if not isinstance(tools, list) or tools_sha256(tools) != sha:
        return None
    return ServerPin(str(sha), at, tuple(tools))


def _read_seen(path: Path) -> dict[str, Any]:
    try:
        doc = jsontext.loads(read_private(path, limit=_SEEN_BYTES))
    except (OSError, StateError, jsontext.JsonError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _keep_seen(path: Path | None, key: str, sha: str, tools: list[Any]) -> None:
    """Keeps `tools` as the last listing seen of the server `key` (nothing written when it is
    kept already; a file that cannot be written is passed over: this is what was seen, for
    `servers diff`, and the quarantine stands without it)."""
    if path is None:
        return
    where = path.with_name(SEEN_FILE)
    kept = _read_seen(where)
    old = kept.get(key)
    if isinstance(old, dict) and old.get("sha256") == sha:
        return
    entry = {"sha256": sha, "seenAt": now_rfc3339(), "tools": tools}
    if len(json.dumps(entry, ensure_ascii=True)) > SEEN_LISTING_BYTES:
        return
    kept.pop(key, None)
    kept[key] = entry
    sizes = {k: len(json.dumps([k, v], ensure_ascii=True)) for k, v in kept.items()}
    while len(kept) > SEEN_SERVERS or sum(sizes.values()) > _SEEN_BYTES - 1024:
        sizes.pop(oldest := next(iter(kept)))
        del kept[oldest]
    data = json.dumps(kept, ensure_ascii=True).encode()
    with contextlib.suppress(OSError):
        where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(where, data)
