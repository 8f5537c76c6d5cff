"""Trust of project config files: pinned by SHA-256, decided from the bytes read.

Pure: no trio, no I/O (`truststore.py` finds, reads and writes the state file). A project
file (`.mcpx-hooks.toml` / `.json` found by discovery in the directory chain) is applied only
when the state holds its place and the SHA-256 of the very bytes that are parsed; any other
file (`/etc/mcpx-hooks/`, the user's config directory, `--config`) is trusted by where it is.

The state document, `trust.json`:

    {"version": 1, "files": {"/abs/dir/.mcpx-hooks.toml": {"sha256": "<64 hex>",
                                                          "trustedAt": "<RFC 3339>"}}}

It may also hold `"servers"`: the tool lists of tool servers, pinned (`ServerPin`), by the
server's name, command and working directory (`pin_key`):

    {"servers": {"<pin key>": {"sha256": "<64 hex>", "pinnedAt": "<RFC 3339>",
                               "tools": [<the tools as the server listed them>]}}}

Anything else (not JSON, another version, a key missing or of the wrong type, a digest that
is not 64 lowercase hex digits, an unknown key) is `TrustStateError`: the whole state is
refused, and nothing in it is trusted, since a state file that was tampered with in one
place cannot be believed in another.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..core import jsontext
from ..core.errors import HooksError
from ..core.places import shown_file
from ..core.records import Record

#: `MCPX_HOOKS_TRUST=all`: trust the discovered project files for one command (a CI job whose
#: checkout is its own). Any other non-empty value is said, and trusts nothing.
TRUST_ENV: Final = "MCPX_HOOKS_TRUST"
TRUST_ALL: Final = "all"
#: The command-line flag that does the same for one command.
TRUST_FLAG: Final = "--trust-project"
STATE_VERSION: Final = 1
#: A state file larger than this is refused unread (a real one holds a line per file).
MAX_STATE_BYTES: Final = 4 * 1024 * 1024

_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS: Final = frozenset({"sha256", "trustedAt"})


class TrustStateError(HooksError, ValueError):
    """The state file cannot be believed; the message says why, in words."""


class Verdict(enum.StrEnum):
    TRUSTED = "trusted"
    #: Trusted once, with other bytes: it changed since.
    CHANGED = "changed since it was trusted"
    UNTRUSTED = "not trusted"


@attrs.frozen(repr=False, eq=False)
class TrustEntry(Record):
    sha256: str
    trusted_at: str


@attrs.frozen(repr=False, eq=False)
class ServerPin(Record):
    """A tool server's `tools/list` answer as pinned: its SHA-256 (`tools_sha256`), and the
    tools themselves, for `servers diff` to say what changed."""

    sha256: str
    pinned_at: str
    tools: tuple[Any, ...] = attrs.field(eq=False)


@attrs.frozen(repr=False, eq=False)
class TrustState(Record):
    """The files trusted, by their place (`truststore.trust_key`); the servers pinned."""

    files: Mapping[str, TrustEntry] = attrs.field(factory=dict)
    servers: Mapping[str, ServerPin] = attrs.field(factory=dict)

    def with_file(self, key: str, entry: TrustEntry) -> TrustState:
        return TrustState({**self.files, key: entry}, self.servers)

    def without(self, key: str) -> TrustState:
        return TrustState({k: v for k, v in self.files.items() if k != key}, self.servers)

    def tool_names(self, key: str) -> list[str] | None:
        """The names of the tools pinned at `key` (`pin_key`); None: nothing is pinned there."""
        pinned = self.servers.get(key)
        if pinned is None:
            return None
        listed = (t.get("name") for t in pinned.tools if isinstance(t, Mapping))
        return [name for name in listed if isinstance(name, str)]

    def with_pin(self, key: str, pin: ServerPin) -> TrustState:
        return TrustState(self.files, {**self.servers, key: pin})


def pin_key(name: str, command: Any, workdir: str) -> str:
    """The place of a server's pin: its name, command and working directory (another
    command, or the same in another project, is another server)."""
    return json.dumps([name, list(command), workdir], ensure_ascii=True)


def tools_sha256(tools: Any) -> str:
    """The SHA-256 of a tool list as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return digest(text.encode())


def digest(data: bytes) -> str:
    """The SHA-256 of `data`, as lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def decide(state: TrustState, key: str, sha256: str) -> Verdict:
    entry = state.files.get(key)
    if entry is None:
        return Verdict.UNTRUSTED
    return Verdict.TRUSTED if entry.sha256 == sha256 else Verdict.CHANGED


def trust_command(file: str) -> str:
    """The command that trusts `file`, as a person would paste it (one line: a path with a
    character that is not printable in bash's `$'…'` quoting)."""
    from ..core.shellwords import shell_line

    return f"mcpx-hooks trust {shell_line([file])}"


def skip_message(file: str, verdict: Verdict) -> str:
    """What every command that would have applied `file` says instead."""
    changed = verdict is Verdict.CHANGED
    review = "review what changed, then" if changed else "to apply it, review it, then"
    return (
        f"skipped {shown_file(file)}: a project config file is applied only once trusted,"
        f" and this one is {verdict.value}; {review} run: {trust_command(file)}"
        f" (or {TRUST_ENV}={TRUST_ALL} / {TRUST_FLAG} for one command)"
    )


def trust_all(environ: Mapping[str, str], flag: bool) -> tuple[bool, str | None]:
    """Whether this command trusts every project file (`--trust-project`, or
    `MCPX_HOOKS_TRUST=all`), and a warning for a value of the variable that means nothing."""
    value = environ.get(TRUST_ENV, "")
    if flag or value == TRUST_ALL:
        return True, None
    if value:
        return False, (
            f"{TRUST_ENV}={value!r} means nothing: the only value is {TRUST_ALL!r};"
            " project files are trusted one by one"
        )
    return False, None


def parse_state(data: bytes) -> TrustState:
    """The state in `data`, or `TrustStateError` naming what is wrong (see the module
    docstring). Never raises anything else."""
    if len(data) > MAX_STATE_BYTES:
        raise TrustStateError(f"larger than {MAX_STATE_BYTES} bytes")
    try:
        doc = jsontext.loads(data)
    except jsontext.JsonError as exc:
        raise TrustStateError(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise TrustStateError(f"expected a JSON object, found {_kind(doc)}")
    version = doc.get("version")
    if version != STATE_VERSION or isinstance(version, bool):
        raise TrustStateError(f"expected version {STATE_VERSION}, found {_shown(version)}")
    if set(doc) - {"version", "files", "servers"}:
        unknown = sorted(set(doc) - {"version", "files", "servers"})[0]
        raise TrustStateError(f"unknown key {unknown!r}")
    files = doc.get("files", {})
    if not isinstance(files, dict):
        raise TrustStateError(f"/files: expected an object, found {_kind(files)}")
    out: dict[str, TrustEntry] = {}
    for key, entry in files.items():
        where = f"/files/{jsontext.encode(key)[1:-1]}"
        if not key.startswith("/"):
            raise TrustStateError(f"{where}: expected an absolute path")
        if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
            raise TrustStateError(f"{where}: expected an object with sha256 and trustedAt")
        sha, at = entry["sha256"], entry["trustedAt"]
        if not isinstance(sha, str) or not _DIGEST.fullmatch(sha):
            raise TrustStateError(f"{where}/sha256: expected 64 lowercase hex digits")
        if not isinstance(at, str):
            raise TrustStateError(f"{where}/trustedAt: expected a string")
        out[key] = TrustEntry(sha, at)
    return TrustState(out, _pins(doc.get("servers", {})))


def _pins(servers: Any) -> dict[str, ServerPin]:
    if not isinstance(servers, dict):
        raise TrustStateError(f"/servers: expected an object, found {_kind(servers)}")
    pins: dict[str, ServerPin] = {}
    for key, entry in servers.items():
        where = f"/servers/{jsontext.encode(key)[1:-1]}"
        if not isinstance(entry, dict) or set(entry) != {"sha256", "pinnedAt", "tools"}:
            raise TrustStateError(f"{where}: expected an object with sha256, pinnedAt and tools")
        sha, at, tools = entry["sha256"], entry["pinnedAt"], entry["tools"]
        if not isinstance(sha, str) or not _DIGEST.fullmatch(sha):
            raise TrustStateError(f"{where}/sha256: expected 64 lowercase hex digits")
        if not isinstance(at, str) or not isinstance(tools, list):
            raise TrustStateError(f"{where}: expected pinnedAt a string and tools a list")
        if tools_sha256(tools) != sha:
            raise TrustStateError(f"{where}/tools: not the tools its sha256 was taken of")
        pins[key] = ServerPin(sha, at, tuple(tools))
    return pins


def state_text(state: TrustState) -> str:
    """The state as the file holds it: sorted, one entry per line-group, ending in a newline."""
    doc = {
        "version": STATE_VERSION,
        "files": {
            key: {"sha256": e.sha256, "trustedAt": e.trusted_at}
            for key, e in sorted(state.files.items())
        },
    }
    if state.servers:
        doc["servers"] = {
            key: {"sha256": p.sha256, "pinnedAt": p.pinned_at, "tools": list(p.tools)}
            for key, p in sorted(state.servers.items())
        }
    # (strict: a number JSON does not have, NaN, which a server's listing may hold as its
    # parser read it, raises ValueError rather than make a file no reader takes)
    return json.dumps(doc, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "a number, a boolean or null"


def _shown(value: Any) -> str:
    return "nothing" if value is None else jsontext.encode(value)[:40]
