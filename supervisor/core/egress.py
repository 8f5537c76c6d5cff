"""Egress by name: the hosts a sandboxed child may reach through the supervisor's proxy.

Pure: no trio, no I/O. A `network` list holds host globs with an optional port
(`"pypi.org"`, `"*.githubusercontent.com:443"`, `"localhost:8080"`); `*` stands for any run of
characters, dots included; a pattern without a port allows 80 and 443. Host names compare
without case. The proxy (`process/egress.py`) asks `allows` for each request; the config asks
`narrows` when a nearer layer sets a list a farther one set already (it may narrow, never
widen: `config/policy.py`).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs

from .records import Record

#: The config key, on hooks, `[defaults]`, `[script]` and servers.
NETWORK_KEY: Final = "network"
#: The ports a pattern without one allows.
DEFAULT_PORTS: Final = (80, 443)
_LABEL: Final = r"[A-Za-z0-9*]([A-Za-z0-9*_-]{0,61}[A-Za-z0-9*])?"
_PORT: Final = (
    r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
)
#: What one item of a `network` list must look like (the config schema's pattern).
#: (A name is at most 253 characters, `NAME_MAX`: a glob longer than that matches none.)
PATTERN: Final = rf"^(?=[^:]{{1,253}}(:|$)){_LABEL}(\.{_LABEL})*(:{_PORT})?$"
#: The longest name, and label, DNS has.
NAME_MAX: Final = 253
LABEL_MAX: Final = 63
_COMPILED: Final = re.compile(PATTERN)
#: What an item of a `network` list is, in words (a config error says it, not `PATTERN`).
ITEM_WORDS: Final = 'a host glob with an optional port ("pypi.org", "*.example.com:8443")'
#: The variables that point a child at the proxy (upper and lower case are both read).
PROXY_VARIABLES: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
#: The variables that make a child trust the run's CA alone (secrets with hosts).
CA_VARIABLES: Final = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")


@attrs.frozen(repr=False, eq=False)
class HostRule(Record):
    """One parsed item of a `network` list: a host glob (lower case) and its ports."""

    host: str
    ports: tuple[int, ...]

    def matches(self, host: str, port: int) -> bool:
        # (`localhost.` is `localhost`: the item is written without the dot, and admits both)
        name = host.lower().removesuffix(".")
        return port in self.ports and fnmatch.fnmatchcase(name, self.host)

    def covered_by(self, rules: Iterable[HostRule]) -> bool:
        """Whether some rule of `rules` allows everything this one allows: its glob, read as
        text, matched by the other's glob, its ports among the other's."""
        return any(
            fnmatch.fnmatchcase(self.host, r.host) and set(self.ports) <= set(r.ports)
            for r in rules
        )


def valid(item: str) -> bool:
    """Whether `item` is a `network` item (`PATTERN`)."""
    return _COMPILED.match(item) is not None


def item_hint(item: str) -> str:
    """For an item `valid` refused, what to write instead where it can be said (`""` where
    it cannot): an IDN in its `xn--` form, a name without its trailing dot, and that an IPv6
    address cannot be named."""
    host, colon, port = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
    if host.endswith(".") and valid(host.rstrip(".") + colon + port):
        return f'; a name is written without its trailing dot: "{host.rstrip(".") + colon + port}"'
    if not host.isascii():
        return _idn_hint(host, colon + port)
    if item.count(":") > 1:
        return "; an IPv6 address cannot be named (a name that resolves to one can)"
    if len(host) > NAME_MAX:
        return f"; a name is at most {NAME_MAX} characters, and this one has {len(host)}"
    if long := [label for label in host.split(".") if len(label) > LABEL_MAX]:
        return (
            f"; a label (between dots) is at most {LABEL_MAX} characters, and"
            f' "{long[0][:20]}…" has {len(long[0])}'
        )
    return ""


def _idn_hint(host: str, port: str) -> str:
    """The `xn--` form of a name outside ASCII (`port`: `":N"` or `""`), as clients ask for
    it. Browsers and curl map it by UTS #46 to IDNA2008 (`faß.de` is `xn--fa-hia.de`); older
    clients, Python's own `idna` codec among them, by IDNA2003 (`fass.de`): where the two
    differ both are named. A label mixing ASCII letters with a cased letter of another script
    (`apple.com` with U+0430, a Cyrillic a, first) is said not to be the name in Latin letters."""
    now, then = _ascii_form(host, port, _idna2008), _ascii_form(host, port, _idna2003)
    if now is None and then is None:
        return ""
    lead = "; a name outside ASCII is written in its xn-- form"
    if now is None:
        said = (
            f"{lead}, but IDNA2008 does not take this one (browsers refuse it); clients of"
            f' IDNA2003 ask for "{then}{port}"'
        )
    elif then is None or then == now:
        said = f'{lead}: "{now}{port}"'
    else:
        said = (
            f'{lead}: "{now}{port}" (what browsers and curl ask for, by IDNA2008); clients of'
            f' IDNA2003, Python\'s own idna codec among them, ask for "{then}{port}"'
        )
    return said + _lookalike(host)


def _ascii_form(host: str, port: str, encode: Callable[[str], str]) -> str | None:
    """`host` with each label outside ASCII encoded, None where a label cannot be, or where
    the result, with `port`, is no item (a port out of range: no form of the name helps)."""
    try:
        form = ".".join(label if label.isascii() else encode(label) for label in host.split("."))
    except UnicodeError:  # (idna's errors are UnicodeErrors too)
        return None
    return form if valid(form + port) else None


def _idna2008(label: str) -> str:
    import idna  # (only for a refused item: not on the way of every config load)

    return idna.encode(label, uts46=True).decode("ascii")


def _idna2003(label: str) -> str:
    return label.encode("idna").decode("ascii")


#: The Unicode categories of cased letters: the scripts that have them (Latin, Cyrillic,
#: Greek, Armenian …) are those whose letters pass for one another.
_CASED: Final = ("Lu", "Ll", "Lt")


def _lookalike(host: str) -> str:
    """Where a label mixes ASCII letters with a cased letter of another script than Latin
    (Cyrillic, Greek …, the scripts whose letters pass for Latin ones), that its `xn--` form
    is not the name in Latin letters it looks like; else `""`."""
    for label in host.split("."):
        if not any(c.isascii() and c.isalpha() for c in label):
            continue
        for c in label:
            name = unicodedata.name(c, "")
            cased = unicodedata.category(c) in _CASED
            if cased and not c.isascii() and not name.startswith("LATIN "):
                return (
                    f'; its "{c}" is {name} (U+{ord(c):04X}), not a Latin letter: the xn--'
                    " form names another host than the name in Latin letters it looks like"
                )
    return ""


def parse(item: str) -> HostRule:
    """`item` as a rule; `ValueError` naming what is wrong when it is not one."""
    if not valid(item):
        raise ValueError(f"expected {ITEM_WORDS}, found {item!r}")
    host, _, port = item.partition(":")
    return HostRule(host.lower(), (int(port),) if port else DEFAULT_PORTS)


def rules(items: Sequence[str]) -> tuple[HostRule, ...]:
    return tuple(parse(i) for i in items)


#: A host a child may ask the proxy for by name: ASCII labels of letters, digits, `-` and `_`
#: (an IDN in its `xn--` form), each 1-63 long, with an optional trailing dot.
_HOST_NAME: Final = re.compile(r"(?=.{1,254}\Z)[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?\Z")


def host_name(host: str) -> bool:
    """Whether `host` (as a request names it, brackets taken off) is a host name or an IP
    address: the proxy refuses anything else before it is matched or resolved (a NUL, a
    tab, a character outside ASCII: the resolver's own errors, not an answer)."""
    if _HOST_NAME.match(host):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def allows(items: Sequence[HostRule], host: str, port: int) -> bool:
    """Whether `host:port` is in the list."""
    return any(r.matches(host, port) for r in items)


def narrows(nearer: Sequence[str | None], farther: Sequence[str]) -> bool:
    """Whether the `nearer` list (`None`: the farther list spliced in) allows nothing the
    `farther` one does not."""
    wide = rules(farther)
    return all(i is None or parse(i).covered_by(wide) for i in nearer)


#: The profiles a `network` list narrows (the others have the host's whole network).
CONFINING: Final = ("strict", "workspace")


def unconfined(profile: str) -> str:
    """Why a `network` list cannot go with `profile` (`net` or `none`)."""
    has = "already has" if profile == "net" else "is not confined and has"
    return (
        f'network needs sandbox "strict" or "workspace", found sandbox "{profile}": under'
        f' "{profile}" the child {has} the host\'s whole network, which a list of hosts'
        ' cannot narrow (drop `network`, or set sandbox = "strict")'
    )


def blocked_message(host: str) -> str:
    """What a hook frame says of a host its child was refused."""
    return f"blocked: {host} not in network"


def refusal(host: str, port: int, note: str | None, declared: str) -> str:
    """What an `egress` frame says of a refused host: `note` (a secret sent to a host outside
    its hosts) as the hook frame says it, else that the host is not in the list, and the item
    that, added to `declared` (where the child's list is declared), would admit it; where no
    item names the host (an IPv6 address, a label no item's can be), why, and what can."""
    if note is not None:
        return note
    blocked, item = blocked_message(host), host_item(host, port)
    if valid(item):
        return f'{blocked}; "{item}" in {declared} would admit it'
    if port not in DEFAULT_PORTS and not valid(f"a:{port}"):
        return f"{blocked}; no item names port {port} (an item's port is 1 to 65535)"
    if ":" in host:
        return (
            f'{blocked}; no item of a list names an IPv6 address (only "*" admits one, and'
            " every host with it): list a name that resolves to it"
        )
    glob = "*." + host.partition(".")[2] if "." in host else "*"
    glob = glob if valid(glob) else "*"
    return (
        f"{blocked}; no item names it as written (a label of an item begins and ends with a"
        f' letter or a digit): a glob such as "{host_item(glob, port)}" in {declared} would'
        " admit it"
    )


def host_item(host: str, port: int) -> str:
    """`host:port` as a list's item names it: the port left out when it is 80 or 443."""
    name = host.removesuffix(".")  # (an item is written without it: the config refuses it)
    return name if port in DEFAULT_PORTS else f"{name}:{port}"


#: What the resolver reads as an IPv4 address though it is not in dotted quads: one to four
#: numbers, each decimal, octal (`0177`) or hex (`0x7f`): `2130706433`, `127.1`.
_NUMBER: Final = r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)"
_IPV4_OTHERWISE: Final = re.compile(rf"{_NUMBER}(\.{_NUMBER}){{0,3}}\Z")


def _ipv4(host: str) -> str | None:
    """The dotted quads of an address the resolver reads in `host` (`inet_aton`'s forms:
    the last number fills the bits the others leave), None where it reads none."""
    if not _IPV4_OTHERWISE.match(host):
        return None
    numbers = [
        int(n, 16) if n[:2].lower() == "0x" else int(n, 8 if n[0] == "0" else 10)
        for n in host.split(".")
    ]
    *parts, last = numbers
    if any(n > 255 for n in parts) or last >= 1 << 8 * (4 - len(parts)):
        return None
    value = last
    for i, n in enumerate(parts):
        value |= n << 8 * (3 - i)
    return str(ipaddress.IPv4Address(value))


def canonical(host: str) -> str:
    """`host` (a `host_name`) as the proxy judges, looks up and names it: a name without its
    trailing dot (`localhost.` is `localhost`, which its item admits and the resolver finds),
    an IPv4 address the resolver would read in another form as its dotted quads
    (`2130706433` is `127.0.0.1`, and so is `2130706433.`, looked up without its dot),
    anything else as written."""
    name = host.rstrip(".") or host  # (a `host_name` ends in one dot at most)
    return name if (address := _ipv4(name)) is None else address


def placeholder(name: str, nonce: str) -> str:
    """The value a child sees for the secret `name` declared with hosts."""
    return f"mcpx-secret-{name}-{nonce}"


#: The most hosts one run's `egress` frames name (and one child's lease keeps refused): a
#: script may try any number of hosts, and a frame each would grow the run without bound.
HOSTS_SAID_MAX: Final = 1000


class HostsSaid:
    """The hosts an `egress` frame of a run has named (one frame per host), at most
    `HOSTS_SAID_MAX`; past it, each refusal of another host is counted (`unsaid`) instead."""

    def __init__(self) -> None:
        self.hosts: set[str] = set()
        self.unsaid = 0

    def take(self, host: str) -> bool:
        """Whether `host` gets its frame now: not named yet, and the bound not reached."""
        if host in self.hosts:
            return False
        if len(self.hosts) >= HOSTS_SAID_MAX:
            self.unsaid += 1
            return False
        self.hosts.add(host)
        return True

    def said(self) -> str | None:
        """The warning a run ends with when hosts went unnamed."""
        if not self.unsaid:
            return None
        return (
            f"{self.unsaid} more refusal(s) of hosts past the first {HOSTS_SAID_MAX} this run"
            " named were not given an egress frame each"
        )
