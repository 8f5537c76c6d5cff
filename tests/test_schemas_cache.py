"""The schemas' quick checks, compiled once and kept on disk under the state directory: keyed by
the package version and the schema, written privately, a cache file that cannot be believed
ignored and rewritten (never a traceback), and the same verdicts as jsonschema."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.config import schemacache, schemas

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "string", "pattern": "^x"}},
    "dependencies": {"b": ["a"]},
}


def env_at(tmp_path: Path) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}


def cache_file(tmp_path: Path, name: str = "t") -> Path:
    path = schemacache.cache_path(name, env_at(tmp_path))
    assert path is not None
    return path


def test_compiled_once_written_privately_then_read(tmp_path: Path) -> None:
    check = schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))
    assert check({"a": "xy"}) and not check({"a": "y"}) and not check({"b": 1})
    path = cache_file(tmp_path)
    assert path == tmp_path / "state" / "mcpx-hooks" / "schema-t.cache"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = path.read_bytes()
    key = schemacache.cache_key(json.dumps(SCHEMA, sort_keys=True, ensure_ascii=False))
    assert first.split(b"\n")[:2] == [schemacache.MAGIC, key.encode()]
    again = schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))
    assert again({"a": "xy"}) and not again({"a": "y"})
    assert path.read_bytes() == first  # read, not written again


def test_a_changed_schema_is_compiled_again(tmp_path: Path) -> None:
    schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))
    changed = {**SCHEMA, "required": ["a"]}
    check = schemacache.compiled_check("t", changed, env_at(tmp_path))
    assert not check({})
    assert schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))({})


def _junk(path: Path) -> None:
    path.write_bytes(b"\x00\xff junk")


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _payload_changed(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _not_code(path: Path) -> None:
    import hashlib
    import marshal

    magic, key, _, _ = path.read_bytes().split(b"\n", 3)
    payload = marshal.dumps({"validate": 1})
    digest = hashlib.sha256(payload).hexdigest().encode()
    path.write_bytes(b"\n".join([magic, key, digest, payload]))


def _writable_by_others(path: Path) -> None:
    path.chmod(0o666)


def _a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _a_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _a_symlink_to_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _too_large(path: Path) -> None:
    with path.open("ab") as f:
        f.truncate(schemacache.MAX_CACHE_BYTES + 10)


@pytest.mark.parametrize(
    "spoil",
    [
        _junk,
        _truncated,
        _payload_changed,
        _not_code,
        _writable_by_others,
        _a_fifo,
        _a_symlink_to_zero,
        _too_large,
    ],
)
def test_a_cache_file_that_cannot_be_believed_is_ignored_and_rewritten(
    tmp_path: Path, spoil: Any
) -> None:
    schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))
    path = cache_file(tmp_path)
    good = path.read_bytes()
    spoil(path)
    check = schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))
    assert check({"a": "xy"}) and not check({"a": "y"})
    assert not path.is_symlink() and path.read_bytes() == good
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_cache_that_cannot_be_written_still_checks(tmp_path: Path) -> None:
    schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))
    _a_directory(cache_file(tmp_path))  # neither read nor replaced
    assert not schemacache.compiled_check("t", SCHEMA, env_at(tmp_path))({"a": "y"})
    assert schemacache.compiled_check("t", SCHEMA, {})({"a": "x"})  # no state directory


def test_a_spoiled_cache_never_shows_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "hooks.toml").write_text("[defaults]\ntimeoutMs = 500\n")
    env = {**os.environ, **env_at(tmp_path), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    argv = [sys.executable, "-m", "mcpx_hooks.supervisor", "validate", "hooks.toml"]
    first = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    path = cache_file(tmp_path, "config")
    _payload_changed(path)
    again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and again.stderr == ""


def test_a_valid_config_read_from_the_cache_imports_no_schema_library(tmp_path: Path) -> None:
    (tmp_path / "hooks.toml").write_text("[defaults]\ntimeoutMs = 500\n")
    code = (
        "import os, sys\nfrom pathlib import Path\n"
        "from mcpx_hooks.supervisor.config.loading import load_config\n"
        "load_config(['hooks.toml'], cwd=Path('.'), environ=os.environ)\n"
        "print(sorted({'jsonschema', 'fastjsonschema'} & set(sys.modules)))\n"
    )
    env = {**os.environ, **env_at(tmp_path), "MCPX_HOOKS_NO_DISCOVERY": "1"}
    run = [sys.executable, "-c", code]
    cold = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert cold.stdout.strip() == "['fastjsonschema']"  # compiled, and written
    warm = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert warm.stdout.strip() == "[]"


def test_the_config_check_holds_dependent_required_as_jsonschema_does() -> None:
    # A hook's `args` needs action `plugin` (2019-09's dependentRequired, draft 7's
    # dependencies): a quick yes here would let the config through unchecked.
    doc = {"hooks": [{"name": "h", "on": "script", "run": ["true"], "args": {"x": 1}}]}
    assert list(schemas.validator("config").iter_errors(doc))
    assert not schemas.quick_check("config")(doc)
    hook = doc["hooks"][0]
    assert list(schemas.hook_validator().iter_errors(hook))
    assert not schemas.quick_hook_check()(hook)


def _names(code: Any) -> set[str]:
    """Every name the code object and the functions in it look up."""
    found = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= _names(const)
    return found


def test_the_config_check_names_items_without_calling_locals() -> None:
    """fastjsonschema names each item it descends into with `"…".format(**locals())`, on the
    valid path too; in the config's check `locals()` copies hundreds of variables, once per
    hook: 50,000 hooks spent seconds of a `validate` there. The cached code uses f-strings."""
    schema = schemas._draft7(schemas._plain(schemas.BUILDERS["config"]()))
    code = schemacache._compile(json.dumps(schema, sort_keys=True))
    assert "locals" not in _names(code)
    check = schemas.quick_check("config")
    assert check({"hooks": [{"on": "script", "phase": "before", "run": ["true"]}] * 3})
    assert not check({"hooks": [{"on": "script", "phase": "before", "run": "true"}]})


def _const_names(code: Any) -> set[str]:
    """Every string constant of the code object and the functions in it (a call's keyword
    names are among them)."""
    found: set[str] = set()
    for const in code.co_consts:
        if isinstance(const, str):
            found.add(const)
        elif isinstance(const, tuple):
            found |= {c for c in const if isinstance(c, str)}
        elif hasattr(const, "co_consts"):
            found |= _const_names(const)
    return found


def test_the_config_check_raises_without_building_a_message() -> None:
    """Each of the generated code's raises built its message and the schema's dict literal
    (`definition={...}`); a hook's `oneOf` of five actions raises four times on a valid hook,
    which was most of the check's ~25 µs a hook (50,000 hooks: over a second of `validate`).
    It raises `Invalid` bare: the check says yes or no, jsonschema says what is wrong."""
    schema = schemas._draft7(schemas._plain(schemas.BUILDERS["config"]()))
    code = schemacache._compile(json.dumps(schema, sort_keys=True))
    assert {"definition", "rule"}.isdisjoint(_const_names(code))
    assert "__init__" not in vars(schemacache.Invalid)  # (raised bare: no Python code to run)
    check = schemas.quick_check("config")
    assert check({"hooks": [{"on": "script", "phase": "before", "run": ["true"]}] * 3})
    assert not check({"hooks": [{"on": "script", "phase": "before", "run": "true"}]})
    assert not check({"hooks": [{"on": "script", "phase": "before", "run": ["true"], "x": 1}]})
