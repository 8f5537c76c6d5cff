"""Who a gateway or worker is to NATS, and the key they share: read from the files the
operator names (`--nats-creds`, `--nats-auth-file`, `--nats-tls-ca`, `--cluster-key-file`),
each checked before anything starts. NATS is part of the trust boundary (whoever can publish
a request could run scripts), so a file holding a secret must be the operator's alone:
a regular file of this user, mode 0600 or tighter; a looser one is refused, never used.

No NATS and no trio here: `natsconnect.py` turns a `NatsAccess` into nats-py's connect
options, and `sealing.py` uses the key.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Final

import attrs

from ..core.errors import HooksError
from ..core.passenv import looks_like_key
from ..core.records import Record

#: The cluster key's least length, in bytes (written as twice as many hex digits).
KEY_BYTES: Final = 32
#: A secret file larger than this is no auth file, creds file or key.
SECRET_FILE_MAX: Final = 64 * 1024


class AccessError(HooksError):
    """A file `--nats-*` or `--cluster-key-file` names cannot be used: says which and why."""


@attrs.frozen(repr=False, eq=False)
class NatsAccess(Record):
    """How to connect: a creds file (JWT and nkey seed), or a user and password, or a
    token; a CA for TLS; `insecure`: a NATS server that lets anyone in is accepted (with a
    warning) instead of refused."""

    creds: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    insecure: bool = False

    @property
    def has_credentials(self) -> bool:
        return bool(self.creds or self.user or self.token)

    def __repr__(self) -> str:  # never a password or token in a log line
        kinds = (("creds", self.creds), ("user", self.user), ("token", self.token))
        given = next((kind for kind, value in kinds if value), "none")
        return f"NatsAccess(credentials={given}, tls_ca={self.tls_ca!r}, insecure={self.insecure})"


def read_private(path: Path, what: str) -> str:
    """The text of a file holding a secret, once it is known to be this user's alone (a
    regular file, owned by this user, nothing for group or others); `AccessError` naming
    `what` (the flag) otherwise."""
    try:
        info = path.stat()
    except OSError as exc:
        raise AccessError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise AccessError(f"{what}: {path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise AccessError(
            f"{what}: {path} belongs to another user (uid {info.st_uid}); it must be this"
            f" user's (uid {os.geteuid()}), mode 600"
        )
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AccessError(
            f"{what}: {path} is open to others (mode {info.st_mode & 0o777:o}); it holds a"
            f" secret: chmod 600 {path}"
        )
    if info.st_size > SECRET_FILE_MAX:
        raise AccessError(f"{what}: {path} is {info.st_size} bytes; expected a small file")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AccessError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise AccessError(
            f"{what}: {path} is not text (byte 0x{byte:02x} at offset {exc.start} is not UTF-8)"
        ) from None


def read_auth_file(path: Path) -> NatsAccess:
    """`--nats-auth-file`: TOML with `user` and `password`, or `token`, nothing else."""
    flag = "--nats-auth-file"
    text = read_private(path, flag)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AccessError(f"{flag}: {path} is not TOML: {_toml_problem(str(exc))}") from None
    expected = 'user = "NAME" and password = "…", or token = "…"'
    unknown = sorted(set(table) - {"user", "password", "token"})
    if unknown:
        raise AccessError(f"{flag}: {path}: {_unknown_key(unknown[0])}; expected {expected}")
    if not all(isinstance(v, str) and v for v in table.values()):
        raise AccessError(f"{flag}: {path}: every value must be a non-empty string")
    if set(table) == {"user", "password"}:
        return NatsAccess(user=table["user"], password=table["password"])
    if set(table) == {"token"}:
        return NatsAccess(token=table["token"])
    raise AccessError(f"{flag}: {path}: expected {expected}")


#: A key of an auth file said as written: a word, as `pasword` (a typo) or
#: `MCPX_WORKER_PASSWORD` are; one with a digit or a `-` may be a password or token.
_KEY_NAME: Final = re.compile(r"[A-Za-z_]{1,32}")
#: tomllib's messages that quote a key of the file, each as said without it.
_NAMING_A_KEY: Final = (
    ("Cannot declare ", "a key or table declared twice"),
    ("Duplicate inline table key ", "a key declared twice in an inline table"),
    ("Cannot mutate immutable namespace ", "a value extended that cannot be (an array, a table)"),
    ("Cannot redefine namespace ", "a table declared again"),
)


def _unknown_key(key: str) -> str:
    """An unknown key of an auth file, as its refusal says it: quoted when it reads as a
    name, else by its length only. The file holds a password or token, and what stands
    where a key goes may be that secret itself, pasted there."""
    if _KEY_NAME.fullmatch(key) and not looks_like_key(key):
        return f"unknown key {key!r}"
    return f"unknown key of {len(key)} characters (not shown: is it the secret itself?)"


def _toml_problem(said: str) -> str:
    """tomllib's message for an auth file that does not parse, without any key it quotes
    (for `_unknown_key`'s reason): its words then, and where, `(at line 2, column 3)`."""
    for start, instead in _NAMING_A_KEY:
        if said.startswith(start):
            where = said.rfind(" (at ")
            return instead + (said[where:] if where != -1 else "")
    return said


def check_creds_file(path: Path) -> str:
    """`--nats-creds`: a NATS creds file (a user JWT and its nkey seed), private as a key."""
    text = read_private(path, "--nats-creds")
    if "-----BEGIN NATS USER JWT-----" not in text or "-----BEGIN USER NKEY SEED-----" not in text:
        raise AccessError(f"--nats-creds: {path} is not a NATS creds file (a user JWT and seed)")
    return str(path)


def check_tls_ca(path: Path) -> str:
    """`--nats-tls-ca`: a CA bundle that TLS can load (not a secret: any mode)."""
    import ssl

    try:
        ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        raise AccessError(f"--nats-tls-ca: cannot load {path}: {exc}") from None
    return str(path)


def read_key_file(path: Path) -> bytes:
    """`--cluster-key-file`: at least `KEY_BYTES` random bytes written as hex (whitespace
    around it ignored), in a private file."""
    flag = "--cluster-key-file"
    text = "".join(read_private(path, flag).split())
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < KEY_BYTES:
        raise AccessError(
            f"{flag}: {path} must hold at least {KEY_BYTES} random bytes written as hex"
            f" ({2 * KEY_BYTES} hex digits; make one with: openssl rand -hex {KEY_BYTES})"
        )
    return key


def nats_access(
    creds: str | None, auth_file: str | None, tls_ca: str | None, *, insecure: bool
) -> NatsAccess:
    """The access the flags name, every file checked; `AccessError` for the first wrong."""
    if creds and auth_file:
        raise AccessError("--nats-creds and --nats-auth-file: give one of them, not both")
    access = NatsAccess()
    if creds:
        access = NatsAccess(creds=check_creds_file(Path(creds)))
    elif auth_file:
        access = read_auth_file(Path(auth_file))
    ca = check_tls_ca(Path(tls_ca)) if tls_ca else None
    return attrs.evolve(access, tls_ca=ca, insecure=insecure)


#: Said at every start with `--nats-insecure`, and by `doctor`.
INSECURE_WARNING: Final = (
    "warning: --nats-insecure: a NATS server that lets anyone in is accepted; whoever reaches"
    " it can read every run's frames and events (requests stay signed and their secrets"
    " sealed). Give NATS users and permissions (docs/cluster.md)"
)


@attrs.frozen(repr=False, eq=False)
class ClusterSettings(Record):
    """What a gateway or worker needs to take part: the server, how to connect, the key."""

    url: str
    access: NatsAccess
    key: bytes = attrs.field(repr=False)
