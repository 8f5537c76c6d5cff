"""docs/ and README.md stand on their own: every relative link between pages resolves (the
file, and the heading an anchor names), and nothing points outside the project: no design
file, no path on the machine the project was built on, no bare issue number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: What a page may not say: a file outside the project (the design contract, a sibling
#: folder, the machine's paths) or an issue number standing for an explanation.
OUTSIDE = re.compile(
    r"\bSPEC\b|§|\.\./shared|shared/design|/work/|(?i:\bissues? #?\d+)|(?i:\bitem \d+ of)"
)


def prose(text: str) -> str:
    """The page without its fenced code blocks and inline code, where `[x](y)` is not a
    link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """The anchor a heading gets where these pages are read (GitHub's rule)."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    body = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    for line in body.splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"\w+:", t)]


def test_the_pages_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "docs/README.md", "docs/reference/commands.md"} <= names
    assert sum(len(links(p)) for p in PAGES) > 50  # the scan does see the links


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if ROOT not in resolved.parents and resolved != ROOT:
            broken.append(f"{target}: outside the project")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_outside_the_project(page: Path) -> None:
    hits = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert OUTSIDE.search("as SPEC §9 says") and OUTSIDE.search("see ../shared/design/x.md")
    assert OUTSIDE.search("the goal of Issue 12") and not OUTSIDE.search("a tissue 3")
    assert not OUTSIDE.search("spawnspec.py, a spec of the request")
    page = tmp_path / "a.md"
    page.write_text("# A `b`: c's d\n\n[x](b.md) [y](#a-b-cs-d) `[z](nope.md)`\n")
    assert links(page) == ["b.md", "#a-b-cs-d"]
    assert anchors(page) == {"a-b-cs-d"}


def test_the_index_links_every_page() -> None:
    """docs/README.md is where a newcomer finds a page: each page of docs/ (and of its
    internals/ and reference/) is linked from it (egress.md was not: no page but the ones
    that link to it in passing led to it)."""
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in links(index)}
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(str(p.relative_to(ROOT)) for p in pages - linked) == []
