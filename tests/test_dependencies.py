"""The declared dependencies are true to the code.

Every third-party package a module imports (read from its source with `ast`, nothing imported)
is declared in `pyproject.toml`: what `supervisor/` imports in `[project] dependencies`, what
`bench/` and `tests/` import there or in the `dev` extra. And every declared distribution that is
installed lies in its declared range, so the pins say which versions the code was run with.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(r) for r in PYPROJECT["dependencies"]]
DEV = [Requirement(r) for r in PYPROJECT["optional-dependencies"]["dev"]]

#: Our own packages: the distribution (`mcpx_hooks`) and the runners under the name they have
#: when the spawner runs from their directory (`runners`).
FIRST_PARTY = frozenset({"mcpx_hooks", "runners"})
#: Modules a script is given at run time, not installed: `mcpx`, the launcher's helper
#: (runners/mcpx_channel.py), which the example scripts import.
PROVIDED = frozenset({"mcpx"})


def third_party_imports(source: str, local: Iterable[str] = ()) -> set[str]:
    """The top-level names `source` imports, at any depth, that are neither the standard
    library, nor ours, nor `local` (modules beside it), nor given at run time."""
    skip = FIRST_PARTY | PROVIDED | set(local)
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in skip:
                found.add(top)
    return found


def undeclared(
    imports: Mapping[str, Iterable[str]],
    declared: Iterable[Requirement],
    distributions: Mapping[str, list[str]],
) -> list[str]:
    """`"<file>: <top-level name>"` for each import no declared distribution provides.

    `imports` is file -> top-level names; `distributions` is top-level name -> the
    distributions that install it (`importlib.metadata.packages_distributions()`). A name no
    installed distribution provides is undeclared too: nothing says where it comes from.
    """
    names = {canonicalize_name(r.name) for r in declared}
    return sorted(
        f"{where}: {top}"
        for where, tops in imports.items()
        for top in tops
        if not names & {canonicalize_name(d) for d in distributions.get(top, [])}
    )


def out_of_range(declared: Iterable[Requirement], installed: Mapping[str, str]) -> list[str]:
    """`"<requirement>: installed <version>"` for each declared distribution whose installed
    version (`installed`: canonical name -> version) is outside its range; one not installed,
    or whose marker does not apply here, is not checked."""
    return sorted(
        f"{r}: installed {installed[canonicalize_name(r.name)]}"
        for r in declared
        if (r.marker is None or r.marker.evaluate())
        and canonicalize_name(r.name) in installed
        and not r.specifier.contains(Version(installed[canonicalize_name(r.name)]), True)
    )


def _imports_under(folder: str) -> dict[str, set[str]]:
    base = ROOT / folder
    local = {p.stem for p in base.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    return {
        str(path.relative_to(ROOT)): third_party_imports(path.read_text(), local)
        for path in sorted(base.rglob("*.py"))
    }


def _installed() -> dict[str, str]:
    return {
        canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
    }


def test_what_the_supervisor_imports_is_a_runtime_dependency() -> None:
    imports = _imports_under("supervisor")
    assert "mcp" in imports["supervisor/tools/mcpclient.py"]
    assert "anyio" in imports["supervisor/tools/mcpclient.py"]
    assert undeclared(imports, RUNTIME, importlib.metadata.packages_distributions()) == []


@pytest.mark.parametrize("folder", ["bench", "tests"])
def test_what_the_benchmarks_and_tests_import_is_declared(folder: str) -> None:
    imports = _imports_under(folder)
    found = importlib.metadata.packages_distributions()
    assert undeclared(imports, RUNTIME + DEV, found) == []


def test_every_installed_dependency_lies_in_its_declared_range() -> None:
    declared = RUNTIME + DEV
    installed = _installed()
    # The runtime dependencies are all installed here (`pip install -e '.[dev]'`).
    assert {canonicalize_name(r.name) for r in RUNTIME} <= installed.keys()
    assert out_of_range(declared, installed) == []


def test_the_checks_refuse_what_is_not_declared_or_out_of_range() -> None:
    source = (
        "import os\nimport trio\nfrom mcpx_hooks.supervisor import core\n"
        "def f():\n    import psutil\n    from yaml import safe_load\n"
        "import mcpx\nfrom . import sibling\nimport _local\n"
    )
    planted = {"supervisor/run/planted.py": third_party_imports(source, local={"_local"})}
    assert planted == {"supervisor/run/planted.py": {"trio", "psutil", "yaml"}}
    distributions = {"trio": ["trio"], "psutil": ["psutil"]}
    # psutil is a dev dependency, not a runtime one; yaml is installed by nothing declared.
    assert undeclared(planted, RUNTIME, distributions) == [
        "supervisor/run/planted.py: psutil",
        "supervisor/run/planted.py: yaml",
    ]
    assert undeclared(planted, RUNTIME + DEV, distributions) == ["supervisor/run/planted.py: yaml"]
    pins = [Requirement("mcp>=2.0,<3"), Requirement("anyio>=4.9,<5"), Requirement("x>=1")]
    assert out_of_range(pins, {"mcp": "1.26.0", "anyio": "4.16.0"}) == [
        "mcp<3,>=2.0: installed 1.26.0"
    ]
    assert out_of_range(pins, {"mcp": "3.0.0rc1", "anyio": "5.0"}) == [
        "anyio<5,>=4.9: installed 5.0",
        "mcp<3,>=2.0: installed 3.0.0rc1",
    ]
