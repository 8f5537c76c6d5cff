"""A request as it waits on the requests stream (`cluster/sealing.py`), without NATS: signed
over its exact bytes, its caller's environment sealed and bound to its run."""

from __future__ import annotations

import json
import os

import pytest

from mcpx_hooks.supervisor.cluster.sealing import (
    UNSIGNED,
    ClusterKey,
    SealError,
    pack_request,
    unpack_request,
)
from mcpx_hooks.supervisor.service.execrequest import parse_exec

SECRET = "ghp_0123456789abcdefSECRET"
REQUEST = json.dumps(
    {"argv": ["true"], "secrets": ["TOKEN"], "passEnv": ["LANG"],
     "callerEnv": {"TOKEN": SECRET, "LANG": "C.UTF-8"}, "input": {"k": [1, 2]}}
)  # fmt: skip


def test_a_packed_request_unpacks_to_the_same_request_and_holds_no_secret() -> None:
    key = ClusterKey(os.urandom(32))
    data, headers = pack_request(key, "run1", REQUEST)
    assert SECRET.encode() not in data and b"C.UTF-8" not in data
    unpacked = unpack_request(key, data, headers)
    assert unpacked.run_id == "run1" and unpacked.problem == ""
    assert unpacked.text is not None
    assert parse_exec(unpacked.text) == parse_exec(REQUEST)


def test_a_request_without_callers_env_travels_as_it_is() -> None:
    key = ClusterKey(os.urandom(32))
    data, headers = pack_request(key, "run2", '{"argv": ["true"]}')
    assert b"sealedEnv" not in data
    assert unpack_request(key, data, headers).text == '{"argv":["true"]}'


@pytest.mark.parametrize("where", ["a byte changed", "another key", "no signature"])
def test_anything_but_the_gateways_exact_bytes_is_unsigned(where: str) -> None:
    key = ClusterKey(os.urandom(32))
    data, headers = pack_request(key, "run3", REQUEST)
    if where == "a byte changed":
        tampered = data.replace(b"true", b"fals")
        assert tampered != data
        data = tampered
    elif where == "another key":
        headers = {**headers, "Mcpx-Signature": ClusterKey(os.urandom(32)).sign(data)}
    else:
        headers = {}
    unpacked = unpack_request(key, data, headers)
    assert unpacked.run_id == "run3" and unpacked.text is None and unpacked.problem == UNSIGNED


def test_a_sealed_environment_opens_only_for_its_run_and_key() -> None:
    key = ClusterKey(os.urandom(32))
    sealed = key.seal(b'{"TOKEN": "x"}', b"run4")
    assert key.unseal(sealed, b"run4") == b'{"TOKEN": "x"}'
    for wrong_key, run in ((key, b"run5"), (ClusterKey(os.urandom(32)), b"run4")):
        with pytest.raises(SealError):
            wrong_key.unseal(sealed, run)
    with pytest.raises(SealError):
        key.unseal("not base64!", b"run4")
    # Moved to another run by a key holder's signature, it still does not open there.
    data, _ = pack_request(key, "run6", REQUEST)
    moved = data.replace(b'"runId":"run6"', b'"runId":"run7"')
    assert moved != data
    unpacked = unpack_request(key, moved, {"Mcpx-Signature": key.sign(moved)})
    assert unpacked.run_id == "run7" and unpacked.text is None
    assert "does not open" in unpacked.problem


def test_a_short_key_is_no_cluster_key() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        ClusterKey(os.urandom(31))
