"""`network` on hooks and `[defaults]`: the items the schema takes (a bad one named by file and
pointer), what a hook gets, and layers that may narrow a list, never widen it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core import egress
from mcpx_hooks.supervisor.core.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load(tmp_path: Path, *files: Path):  # type: ignore[no-untyped-def]
    return load_config(files, cwd=tmp_path, environ={}, discover=False)


HOOK = '[[hooks]]\nname = "h"\non = "script"\nphase = "before"\nrun = ["h"]\n'


@pytest.mark.parametrize(
    "item", ["pypi.org", "*.githubusercontent.com:443", "localhost:8080", "127.0.0.1:1", "*"]
)
def test_valid_items(item: str) -> None:
    assert egress.valid(item)
    egress.parse(item)


@pytest.mark.parametrize(
    "item", ["", "http://x.org", "a..b", "x.org:0", "x.org:65536", "x.org:", "a b", "x/y", ".x"]
)
def test_bad_items_are_refused(item: str) -> None:
    assert not egress.valid(item)
    with pytest.raises(ValueError, match="host glob"):
        egress.parse(item)


def test_an_item_written_another_way_is_told_how_to_write_it(tmp_path: Path) -> None:
    """An IDN, a trailing dot or an IPv6 address was refused as 'expected a host glob',
    found the string "bücher.de"', with nothing said of the form the list takes."""
    config = write(tmp_path / "c.toml", HOOK + 'network = ["bücher.de:8443", "pypi.org.", "::1"]\n')
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, config)
    said = [p.message for p in caught.value.problems]
    assert said[0].endswith(
        '; a name outside ASCII is written in its xn-- form: "xn--bcher-kva.de:8443"'
    )
    assert said[1].endswith('; a name is written without its trailing dot: "pypi.org"')
    assert said[2].endswith("; an IPv6 address cannot be named (a name that resolves to one can)")


@pytest.mark.parametrize(
    ("item", "browsers", "older"),
    [
        ("faß.de", "xn--fa-hia.de", "fass.de"),
        ("ς.gr:8443", "xn--3xa.gr:8443", "xn--4xa.gr:8443"),
        (
            "\u0646\u0627\u0645\u0647\u200c\u0627\u06cc.ir",
            "xn--mgba3gch31f060k.ir",
            "xn--mgba3gch31f.ir",
        ),
    ],
)
def test_an_idn_hint_names_what_browsers_and_curl_ask_for(
    item: str, browsers: str, older: str
) -> None:
    """The hint was Python's IDNA2003 codec's form alone (`faß.de`: "fass.de"), which a
    browser or curl never asks for: they map by UTS #46 to IDNA2008 (`xn--fa-hia.de`), so the
    item the hint named did not admit them. Where the two differ, both are named, the
    browsers' first."""
    hint = egress.item_hint(item)
    assert hint.split('"')[1] == browsers, hint
    assert f'"{older}"' in hint and "IDNA2003" in hint, hint


def test_an_idn_hint_says_a_name_idna2008_refuses_and_a_lookalike() -> None:
    """A joiner out of its context (U+200D between Latin letters) was hinted as "ab.com" as
    if any client asked for it; a Cyrillic "a" (U+0430) in "apple.com" was hinted as its xn--
    form with no word that it is not apple.com."""
    joined = egress.item_hint("a\u200db.com")
    assert "IDNA2008 does not take this one (browsers refuse it)" in joined, joined
    assert joined.endswith('clients of IDNA2003 ask for "ab.com"'), joined
    cyrillic = egress.item_hint("\u0430pple.com")
    assert cyrillic.split('"')[1] == "xn--pple-43d.com", cyrillic
    assert 'its "\u0430" is CYRILLIC SMALL LETTER A (U+0430), not a Latin letter' in cyrillic
    assert egress.item_hint("bücher.de").endswith('xn-- form: "xn--bcher-kva.de"')  # no more
    assert "Latin" not in egress.item_hint("例え.jp")


@settings(max_examples=200)
@given(item=st.text(max_size=30))
def test_an_item_hint_never_fails_and_names_a_valid_item(item: str) -> None:
    hint = egress.item_hint(item)
    if '"' in hint:
        assert egress.valid(hint.split('"')[1]), (item, hint)


def test_rules_match_host_and_default_ports() -> None:
    rules = egress.rules(["*.example.com", "localhost:8080", "PyPI.org"])
    assert egress.allows(rules, "api.example.com", 443)
    assert egress.allows(rules, "a.b.example.com", 80)
    assert not egress.allows(rules, "api.example.com", 8443)
    assert not egress.allows(rules, "example.com", 443)
    assert egress.allows(rules, "LOCALHOST", 8080)
    assert not egress.allows(rules, "localhost", 80)
    assert egress.allows(rules, "pypi.org", 443)
    assert not egress.allows(rules, "evil.org", 443)


def test_narrows() -> None:
    assert egress.narrows(["api.example.com:443"], ["*.example.com"])
    assert egress.narrows([None], ["*.example.com"])
    assert not egress.narrows(["*"], ["*.example.com"])
    assert not egress.narrows(["api.example.com:8443"], ["*.example.com"])
    assert not egress.narrows([None, "evil.org"], ["*.example.com"])


def test_hook_takes_its_own_network_or_the_defaults(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "a.toml",
        '[defaults]\nnetwork = ["pypi.org"]\n'
        + HOOK
        + '[[hooks]]\nname = "g"\non = "script"\nphase = "before"\nrun = ["g"]\n'
        'network = ["localhost:9"]\n',
    )
    config = load(tmp_path, cfg)
    assert config.find("h").network == ("pypi.org",)  # type: ignore[union-attr]
    assert config.find("g").network == ("localhost:9",)  # type: ignore[union-attr]
    plain = load(tmp_path, write(tmp_path / "b.toml", HOOK))
    assert plain.find("h").network is None  # type: ignore[union-attr]


def test_bad_glob_names_file_and_pointer(tmp_path: Path) -> None:
    cfg = write(tmp_path / "a.toml", HOOK + 'network = ["pypi.org", "http://evil"]\n')
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, cfg)
    text = str(caught.value)
    assert str(cfg) in text
    assert "/hooks/0/network/1" in text
    cfg2 = write(tmp_path / "b.toml", '[defaults]\nnetwork = ["x.org:99999"]\n')
    with pytest.raises(ConfigError, match="/defaults/network/0"):
        load(tmp_path, cfg2)


def test_a_bad_item_is_said_in_words_not_as_the_regular_expression(tmp_path: Path) -> None:
    """Each place that takes hosts (a hook's `network`, a server's, a secret's `hosts`, the
    layered `[defaults]` list) says what an item is, as `exec --network` does."""
    secret = 'secrets = [{ name = "T", hosts = ["https://x.org"] }]\n'
    cfg = write(
        tmp_path / "a.toml",
        HOOK + 'network = ["x.org"]\n' + secret + '[defaults]\nnetwork = ["a b"]\n'
        '[servers.s]\ncommand = ["s"]\nnetwork = ["x.org:0"]\n',
    )
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, cfg)
    said = {p.pointer: p.message for p in caught.value.problems}
    words = 'expected a host glob with an optional port ("pypi.org", "*.example.com:8443")'
    assert said == {
        "/defaults/network/0": f'{words}, found the string "a b"',
        "/hooks/0/secrets/0/hosts/0": f'{words}, found the string "https://x.org"',
        "/servers/s/network/0": f'{words}, found the string "x.org:0"',
    }


def test_nearer_layer_may_narrow_never_widen(tmp_path: Path) -> None:
    far = write(tmp_path / "far.toml", '[defaults]\nnetwork = ["*.example.com"]\n')
    narrow = write(tmp_path / "narrow.toml", '[defaults]\nnetwork = ["api.example.com"]\n')
    wide = write(tmp_path / "wide.toml", '[defaults]\nnetwork = ["*"]\n' + HOOK)
    spliced = write(tmp_path / "spliced.json", '{"defaults": {"network": [null, "evil.org"]}}')
    assert load(tmp_path, far, spliced).defaults.network == ("*.example.com",)
    assert load(tmp_path, far, narrow).defaults.network == ("api.example.com",)
    config = load(tmp_path, far, wide)
    assert config.defaults.network == ("*.example.com",)
    assert config.find("h").network == ("*.example.com",)  # type: ignore[union-attr]
    assert any("network" in w and "widen" in w and str(far) in w for w in config.warnings)


def test_server_takes_network_and_a_bad_one_is_named(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "a.toml",
        '[servers.gh]\ncommand = ["npx", "-y", "some-server"]\n'
        'network = ["registry.npmjs.org", "api.github.com"]\n',
    )
    assert load(tmp_path, cfg).servers["gh"].network == ("registry.npmjs.org", "api.github.com")
    with_token = write(
        tmp_path / "t.toml",
        '[servers.gh]\ncommand = ["x"]\nnetwork = ["api.github.com"]\n'
        'secrets = [{ name = "GITHUB_TOKEN", hosts = ["api.github.com"] }]\n',
    )
    server = load(tmp_path, with_token).servers["gh"]
    assert server.secrets == ("GITHUB_TOKEN",)
    assert server.secret_hosts == {"GITHUB_TOKEN": ("api.github.com",)}
    bad = write(tmp_path / "b.toml", '[servers.gh]\ncommand = ["x"]\nnetwork = ["a b"]\n')
    with pytest.raises(ConfigError, match="/servers/gh/network/0"):
        load(tmp_path, bad)


def test_secret_with_hosts_on_a_hook(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "a.toml",
        HOOK + 'network = ["api.github.com"]\n'
        'secrets = ["PLAIN_TOKEN", { name = "GITHUB_TOKEN", hosts = ["api.github.com"] }]\n',
    )
    hook = load(tmp_path, cfg).find("h")
    assert hook is not None
    assert hook.secrets == ("PLAIN_TOKEN", "GITHUB_TOKEN")
    assert hook.secret_hosts == {"GITHUB_TOKEN": ("api.github.com",)}
    bad = write(tmp_path / "b.toml", HOOK + 'secrets = [{ name = "T", hosts = [] }]\n')
    with pytest.raises(ConfigError, match="/hooks/0/secrets/0"):
        load(tmp_path, bad)


def test_network_under_net_or_none_is_a_config_error_naming_file_and_pointer(
    tmp_path: Path,
) -> None:
    cfg = write(
        tmp_path / "a.toml",
        '[defaults]\nsandbox = "net"\n'
        + HOOK
        + 'network = ["pypi.org"]\n'
        + HOOK.replace('"h"', '"g"')
        + 'sandbox = "none"\nnetwork = ["pypi.org"]\n'
        + HOOK.replace('"h"', '"f"')
        + 'sandbox = "strict"\nnetwork = ["pypi.org"]\n'
        + '[servers.gh]\ncommand = ["x"]\nsandbox = "none"\nnetwork = ["api.github.com"]\n',
    )
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, cfg)
    said = {(p.file, p.pointer): p.message for p in caught.value.problems}
    file = str(cfg)
    assert set(said) == {
        (file, "/hooks/0/network"),
        (file, "/hooks/1/network"),
        (file, "/servers/gh/network"),
    }
    assert 'found sandbox "net"' in said[(file, "/hooks/0/network")]
    assert "[defaults] sandbox" in said[(file, "/hooks/0/network")]
    assert 'found sandbox "none"' in said[(file, "/servers/gh/network")]
    # `[defaults] network` for a hook under `none` is not its own: no error, no proxy.
    quiet = write(
        tmp_path / "q.toml", '[defaults]\nnetwork = ["pypi.org"]\n' + HOOK + 'sandbox = "none"\n'
    )
    assert load(tmp_path, quiet).find("h").sandbox == "none"  # type: ignore[union-attr]


def test_a_name_with_its_trailing_dot_is_the_name_its_item_admits() -> None:
    """`curl https://localhost.:8443/` under `network = ["localhost:8443"]` was refused, and
    the refusal said `"localhost.:8443" ... would admit it`, an item the config refuses
    ("a name is written without its trailing dot"). The name with its dot is the same name:
    admitted by the item without it, and a refusal names the item without it."""
    items = egress.rules(["localhost:8443"])
    assert egress.allows(items, "localhost.", 8443)
    assert egress.allows(items, "LOCALHOST.", 8443)
    assert not egress.allows(items, "localhost.", 443)
    why = egress.refusal("example.org.", 443, None, "[script] network")
    assert why.endswith('; "example.org" in [script] network would admit it')
    assert egress.valid(egress.host_item("example.org.", 8443))


def test_a_name_or_a_label_too_long_is_refused_saying_so(tmp_path: Path) -> None:
    """A 300-character name was taken by the config, though the proxy refuses any request
    for it (400: no name is that long), so the item admitted nothing; a label of 64 was
    refused with no word of why."""
    long_name = ".".join(["a" * 60] * 5)  # 304 characters, each label fine
    assert not egress.valid(long_name)
    assert egress.valid(".".join(["a" * 63] * 3) + ".abc:8443")  # 195: fine
    config = write(tmp_path / "c.toml", HOOK + f'network = ["{long_name}", "{"b" * 64}.org"]\n')
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, config)
    said = [p.message for p in caught.value.problems]
    assert said[0].endswith("; a name is at most 253 characters, and this one has 304")
    assert said[1].endswith(
        '; a label (between dots) is at most 63 characters, and "bbbbbbbbbbbbbbbbbbbb…" has 64'
    )
