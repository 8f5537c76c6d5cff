"""Properties (Hypothesis) of how the proxy names a host and what it suggests
(`core/egress.py`): for any host string, `canonical` never raises, is idempotent, and makes
an address of a name only where the resolver reads that name (without its trailing dot, as
it is looked up) as one; for any item the config refuses, `item_hint` quotes only items it
takes; for any host and port, `refusal` suggests only an item the config takes. Pure.
"""

from __future__ import annotations

import re
import socket

from hypothesis import example, given
from hypothesis import strategies as st
from props import hostile_text

from mcpx_hooks.supervisor.core import egress

#: Hosts near an address or a name: digits, hex, dots, letters, IDN.
near_host = st.one_of(
    st.text(st.sampled_from("0123456789.xX7fa"), max_size=24),
    st.text(st.sampled_from("abc-_.*:9ß\u0430é"), max_size=20),
    hostile_text,
)
port = st.one_of(st.integers(1, 65535), st.sampled_from([0, 80, 443, 65536, 99999]))


def quoted(hint: str) -> list[str]:
    """The items a hint tells a person to write."""
    return re.findall(r'"([^"…]*)"(?! has)', hint)


@example(host="2130706433.")
@example(host="127.1.")
@example(host="a..")
@given(host=near_host)
def test_a_host_is_named_once_and_for_all(host: str) -> None:
    once = egress.canonical(host)
    assert egress.canonical(once) == once
    looked_up = host.rstrip(".") or host
    if once != looked_up:  # (made an address: the resolver reads the name so)
        assert socket.inet_ntoa(socket.inet_aton(looked_up)) == once
    if egress.host_name(host):
        try:
            read = socket.inet_ntoa(socket.inet_aton(looked_up))
        except OSError:
            return
        assert once == read


@example(item="faß.de:")
@example(item="faß.de:0")
@example(item="faß.de:99999")
@example(item="apple.com.:0")
@given(item=st.one_of(near_host, st.builds("{}:{}".format, near_host, port)))
def test_a_hint_names_only_an_item_the_config_takes(item: str) -> None:
    if egress.valid(item):
        return
    hint = egress.item_hint(item)
    for said in quoted(hint):
        assert egress.valid(said), (item, hint)


@example(host="example.com", port=0)
@example(host="a_", port=0)
@example(host="x.example.com", port=65536)
@given(host=near_host, port=port)
def test_a_refusal_suggests_only_an_item_the_config_takes(host: str, port: int) -> None:
    said = egress.refusal(host, port, None, "the list")
    for item in re.findall(r'"([^"]*)" in the list', said):
        assert egress.valid(item), said
