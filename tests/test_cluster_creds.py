"""`--nats-creds`: a gateway and a worker that connect with creds files (a user's JWT and
nkey seed) to a nats-server in operator mode, as docs/cluster.md offers beside auth files,
and run a request end to end. The operator, its accounts and users are minted here, signed
with nkeys as NATS's own tools sign them. And a secret file (creds, auth, key) that is not
text is said in words."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nkeys
import pytest
from clusterparts import Cluster, Nats, need_nats, start_gateway, start_worker, write_private
from service_client import arun, run_remote


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _keys(prefix: int) -> tuple[bytes, Any]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed))


def _jwt(claims: dict[str, Any], signer: Any) -> str:
    """A NATS JWT: `claims` (with `iat` and `jti`), signed by `signer` (ed25519-nkey)."""
    claims = {**claims, "iat": int(time.time()), "jti": ""}
    digest = hashlib.sha512(json.dumps(claims).encode()).digest()[:32]
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(signer.sign(f'{head}.{body}'.encode()))}"


def _creds(user_jwt: str, seed: bytes) -> str:
    return (
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n"
    )


def operator_accounts(where: Path) -> tuple[str, dict[str, Path]]:
    """nats-server's config for an operator with a system account and one account with
    JetStream, and a creds file (mode 600) for a gateway's and a worker's user in it."""
    _, operator = _keys(nkeys.PREFIX_BYTE_OPERATOR)
    _, system = _keys(nkeys.PREFIX_BYTE_ACCOUNT)
    _, account = _keys(nkeys.PREFIX_BYTE_ACCOUNT)
    op, sys_, acc = (k.public_key.decode() for k in (operator, system, account))
    unlimited = ("subs", "data", "payload", "imports", "exports", "conn", "leaf")
    stored = ("mem_storage", "disk_storage", "streams", "consumer")
    limits = {**dict.fromkeys(unlimited + stored, -1), "wildcards": True}
    op_jwt = _jwt(
        {
            "iss": op,
            "sub": op,
            "name": "op",
            "nats": {"type": "operator", "version": 2, "system_account": sys_},
        },
        operator,
    )
    sys_jwt = _jwt(
        {"iss": op, "sub": sys_, "name": "SYS", "nats": {"type": "account", "version": 2}}, operator
    )
    acc_jwt = _jwt(
        {
            "iss": op,
            "sub": acc,
            "name": "mcpx",
            "nats": {"type": "account", "version": 2, "limits": limits},
        },
        operator,
    )
    files: dict[str, Path] = {}
    for role in ("gateway", "worker"):
        seed, user = _keys(nkeys.PREFIX_BYTE_USER)
        pub = user.public_key.decode()
        user_jwt = _jwt(
            {
                "iss": acc,
                "sub": pub,
                "name": role,
                "nats": {
                    "type": "user",
                    "version": 2,
                    "pub": {},
                    "sub": {},
                    "subs": -1,
                    "data": -1,
                    "payload": -1,
                },
            },
            account,
        )
        files[role] = write_private(where / f"{role}.creds", _creds(user_jwt, seed))
    (where / "operator.jwt").write_text(op_jwt)
    config = (
        f"operator: {json.dumps(str(where / 'operator.jwt'))}\n"
        f"system_account: {sys_}\n"
        "resolver: MEMORY\n"
        f'resolver_preload: {{ {acc}: "{acc_jwt}", {sys_}: "{sys_jwt}" }}\n'
    )
    return config, files


@pytest.fixture
def creds_cluster(tmp_path: Path) -> Iterator[Cluster]:
    need_nats()
    config, files = operator_accounts(tmp_path)
    nats = Nats(tmp_path / "jetstream", authorization=config, creds=files)
    nats.start()
    parts = Cluster(tmp_path, nats)
    try:
        yield parts
    finally:
        parts.stop()


def test_a_gateway_and_a_worker_with_creds_files_run_a_request(creds_cluster: Cluster) -> None:
    """--nats-creds connects (nats-py signs the server's nonce with the seed, which needs
    nkeys: without it each part died at its connection with a Python traceback)."""
    parts = creds_cluster
    parts.workers.append(start_worker(parts.cwd, parts.nats))
    gateway = start_gateway(parts.cwd, parts.nats)
    parts.gateways.append(gateway)
    stream = arun(run_remote(gateway, {"argv": ["/bin/echo", "over creds"]}))
    out = [f["text"] for f in stream.objects if f["type"] == "stdout"]
    assert out == ["over creds"], stream.objects
    assert stream.objects[-1]["type"] == "end" and stream.objects[-1]["exitCode"] == 0
    assert stream.code == 1000
    for log in (gateway.log(), parts.workers[0].log.read_text()):
        assert "Traceback" not in log


@pytest.mark.parametrize("flag", ["--nats-creds", "--nats-auth-file", "--cluster-key-file"])
def test_a_secret_file_that_is_not_text_is_said_in_words(tmp_path: Path, flag: str) -> None:
    """Not Python's codec message ("'utf-8' codec can't decode byte 0xba in position 1")."""
    from mcpx_hooks.supervisor.cluster.access import AccessError, read_private

    path = write_private(tmp_path / "binary", "")
    path.write_bytes(b"ok\xba\xff")
    with pytest.raises(AccessError) as caught:
        read_private(path, flag)
    said = str(caught.value)
    assert said == f"{flag}: {path} is not text (byte 0xba at offset 2 is not UTF-8)", said
