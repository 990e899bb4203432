"""The README and docs/ are a front door that leads somewhere: every relative link and image
in them names a file that exists (a page moved or renamed breaks this test, not a reader)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(page: Path) -> list[str]:
    """Link targets outside code blocks that are not web addresses or in-page anchors."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    targets = [m.group(1).split("#", 1)[0] for m in LINK.finditer(text)]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_names_a_file(page: Path) -> None:
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert missing == []


def test_the_readme_is_short_and_maps_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    mapped = set(relative_links(ROOT / "README.md"))
    unmapped = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in mapped]
    assert unmapped == []


def test_the_link_reader_finds_links_and_skips_code() -> None:
    page = ROOT / "README.md"
    assert "docs/clients.md" in relative_links(page)
    assert not any(t.startswith("http") for t in relative_links(page))
