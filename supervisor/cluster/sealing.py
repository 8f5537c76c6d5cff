"""A request as it waits on the requests stream: signed by the gateway that admitted it, its
secret values sealed. Pure: no NATS, no trio.

- The signature is HMAC-SHA256 with the cluster key over the exact bytes of the message,
  in the `Mcpx-Signature` header (hex). A worker runs nothing whose signature does not
  check: a NATS account that may publish to `mcpx.requests` is not a way to run scripts.
- The caller's environment values (`callerEnv`: the values of `secrets` and `passEnv`; the
  gateway cannot tell which per-call hook takes which as a secret) leave the request text
  and travel sealed with AES-256-GCM under a key derived from the cluster key (HKDF-SHA256),
  the run id as associated data, so a sealed value is bound to its run. JetStream never
  holds them in the clear.

The crypto is `cryptography`'s (a well-kept library); only the layout is ours.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..core import jsontext
from ..core.errors import HooksError
from ..core.records import Record
from .access import KEY_BYTES
from .names import RUN_ID, Header

#: HKDF's `info` for the key that seals secrets (the signing key is the cluster key itself).
SEAL_INFO: Final = b"mcpx-hooks cluster: secrets at rest (AES-256-GCM)"
#: HKDF's `info` for the key a part proves it holds the cluster key with (`keycheck.py`).
PROOF_INFO: Final = b"mcpx-hooks cluster: key check (HMAC-SHA256)"
NONCE_BYTES: Final = 12
#: The request field the caller's environment travels in.
CALLER_ENV: Final = "callerEnv"
#: The message's field the sealed environment travels in.
SEALED: Final = "sealedEnv"


class SealError(HooksError, ValueError):
    """A sealed value that does not open with this key (another cluster's, or altered)."""


class ClusterKey:
    """The key gateways and workers share (`--cluster-key-file`)."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        if len(key) < KEY_BYTES:  # `access.read_key_file` says so to a person first
            raise ValueError(f"a cluster key has at least {KEY_BYTES} bytes")
        self._signing = key
        sealing = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=SEAL_INFO)
        self._aead = AESGCM(sealing.derive(key))
        proving = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PROOF_INFO)
        self._proving = proving.derive(key)

    def __repr__(self) -> str:
        return "ClusterKey(…)"

    def sign(self, data: bytes) -> str:
        return hmac.new(self._signing, data, hashlib.sha256).hexdigest()

    def signed(self, data: bytes, signature: str | None) -> bool:
        """Whether `signature` is this key's over `data` (compared in constant time, as bytes:
        a header of any text, non-ASCII too, is only a signature that does not match)."""
        if not signature:
            return False
        given = signature.strip().lower().encode("utf-8", "surrogatepass")
        return hmac.compare_digest(self.sign(data).encode(), given)

    def proof(self, nonce: bytes) -> str:
        """This key's answer to a key check's `nonce` (`keycheck.py`): HMAC-SHA256 under a key
        derived for that alone, so whoever asks gets no signature of a request, nothing that
        opens a secret, and nothing the cluster key can be found from."""
        return hmac.new(self._proving, nonce, hashlib.sha256).hexdigest()

    def seal(self, plain: bytes, bound_to: bytes) -> str:
        """AES-GCM with a fresh random nonce: base64 of nonce + ciphertext + tag."""
        nonce = os.urandom(NONCE_BYTES)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, plain, bound_to)).decode()

    def unseal(self, sealed: str, bound_to: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.b64decode(sealed, validate=True)
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], bound_to)
        except (ValueError, InvalidTag):
            raise SealError("the request's sealed environment does not open") from None


def pack_request(
    key: ClusterKey, run_id: str, message: str | bytes | Mapping[str, Any]
) -> tuple[bytes, dict[str, str]]:
    """The message for the requests stream and its headers: the client's request (already
    checked, a JSON object, or its text) with `callerEnv` sealed, signed."""
    request = dict(message) if isinstance(message, Mapping) else jsontext.loads(message)
    payload: dict[str, Any] = {"runId": run_id}
    env = request.pop(CALLER_ENV, None)
    if env:
        payload[SEALED] = key.seal(jsontext.dumps(env), run_id.encode())
    payload["request"] = jsontext.dumps(request).decode()
    data = jsontext.dumps(payload)
    return data, {Header.MSG_ID: run_id, Header.SIGNATURE: key.sign(data)}


@attrs.frozen(repr=False, eq=False)
class Unpacked(Record):
    """What a worker makes of a message on the requests stream: the run it names (None: it
    names none) and, when it is signed and whole, the client's request text to check and run;
    `problem` says why there is none. `request` is that text already read (the one time it
    is), when it is a JSON object: its sealed environment is back in it."""

    run_id: str | None
    text: str | None = None
    problem: str = ""
    request: dict[str, Any] | None = None


#: The client's `error` for a request whose signature does not check (`Unpacked.problem`).
UNSIGNED: Final = (
    "the worker could not check this request's signature: the gateway that queued it and the"
    " worker do not share a cluster key (--cluster-key-file), or the request did not come"
    " from a gateway of this cluster or was altered on the way"
)


def named_run(data: bytes) -> str | None:
    """The run a message names, signed or not; None for a message that is no request."""
    return _named_run(_envelope(data))


def _envelope(data: bytes) -> dict[str, Any] | None:
    try:
        payload = jsontext.loads(data)
    except jsontext.JsonError:
        return None
    return payload if isinstance(payload, dict) else None


def _named_run(payload: dict[str, Any] | None) -> str | None:
    run_id = payload.get("runId") if payload is not None else None
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        return None
    return run_id


def unpack_request(key: ClusterKey, data: bytes, headers: dict[str, str]) -> Unpacked:
    """A message of the requests stream as a worker takes it: signed by this key over its
    exact bytes, or refused (`UNSIGNED`); its sealed environment put back into the request.
    The message and the request in it are each read once."""
    payload = _envelope(data)
    run_id = _named_run(payload)
    if payload is None or run_id is None:
        return Unpacked(None, problem="a message that is no request")
    if not key.signed(data, headers.get(Header.SIGNATURE)):
        return Unpacked(run_id, problem=UNSIGNED)
    text = payload.get("request")
    if not isinstance(text, str):
        return Unpacked(run_id, problem="a signed message without a request")
    sealed = payload.get(SEALED)
    try:
        request = jsontext.loads(text)
    except jsontext.JsonError as exc:
        if sealed is not None:
            return Unpacked(run_id, problem=str(exc))
        return Unpacked(run_id, text)  # the worker refuses it as `parse_exec` says
    if sealed is None:
        return Unpacked(run_id, text, request=request if isinstance(request, dict) else None)
    try:
        if not isinstance(request, dict) or not isinstance(sealed, str):
            raise SealError("a signed message whose request is no object")
        request[CALLER_ENV] = jsontext.loads(key.unseal(sealed, run_id.encode()))
    except (SealError, jsontext.JsonError) as exc:
        return Unpacked(run_id, problem=str(exc))
    return Unpacked(run_id, jsontext.dumps(request).decode(), request=request)
