"""The README lists every documentation page, the concepts page's contents list its sections,
and every link in the README and the docs resolves: to a file of the repository and, with an
anchor, to a heading or an ``<a id>``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    found = {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, re.MULTILINE)}
    return found | set(re.findall(r'<a id="([^"]+)"', text))


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text()))


def test_readme__documentation_list_links_every_page_in_docs():
    text = README.read_text()
    section = text[text.index("## Documentation\n") :]
    section = section[: section.index("\n## ", 1)]
    listed = {target.split("#")[0] for target in LINK.findall(section)}
    pages = {f"docs/{page.name}" for page in DOCS}
    assert pages - listed == set(), "pages missing from the README's documentation list"
    assert listed - pages == set(), "the README's documentation list names missing pages"


def test_concepts__contents_list_every_section_in_order():
    text = FENCE.sub("", (ROOT / "docs" / "concepts.md").read_text())
    contents = text[: text.index("\n## ")]
    # Each entry is "- [the section's title](#its-anchor)", in the sections' order.
    listed = re.findall(r"^- \[(.*)\]\(#([^)]+)\)$", contents, re.MULTILINE)
    sections = re.findall(r"^## (.*)$", text, re.MULTILINE)
    assert listed == [(section, slug(section)) for section in sections]


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_docs__every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such anchor")
    assert broken == []
