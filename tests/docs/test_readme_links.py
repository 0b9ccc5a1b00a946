"""The README's links into the docs lead somewhere: each relative link names a file that exists
and, where it names a heading, a heading of that page (MyST's anchor rule: lower case, spaces to
hyphens, punctuation dropped). The docs build checks the links between docs pages itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    return {
        anchor(line.lstrip("#"))
        for line in page.read_text().splitlines()
        if re.match(r"^#{1,3} ", line)
    }


def test_it_turns_a_heading_into_the_anchor_myst_gives_it() -> None:
    assert anchor("Real data") == "real-data"
    assert anchor("The tool's renderer") == "the-tools-renderer"


@pytest.mark.parametrize(
    "target",
    sorted(
        link
        for link in LINK.findall((ROOT / "README.md").read_text())
        if not link.startswith(("http://", "https://", "#"))
    ),
)
def test_it_links_the_readme_to_pages_and_headings_that_exist(target: str) -> None:
    path, _, heading = target.partition("#")
    page = ROOT / path
    assert page.is_file(), f"README links to {path}, which does not exist"
    if heading:
        assert heading in anchors_of(page), f"{path} has no heading #{heading}"
