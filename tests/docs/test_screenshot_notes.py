"""A docs build without the screenshots says plainly how to make them, in place of each picture
(issue 37 item 12: `make docs-only` showed grey placeholders), and the docs' own stylesheet wraps
code blocks and keeps the sidebar compact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

DOCS = Path(__file__).resolve().parents[2] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import specvet_generated  # noqa: E402


def _document(uri: str) -> nodes.document:
    document = new_document("page", get_default_settings(Parser))
    paragraph = nodes.paragraph()
    paragraph += nodes.image(uri=uri, alt="The home page")
    document += paragraph
    return document


def test_it_puts_a_note_saying_how_to_make_a_missing_screenshot(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(specvet_generated, "SCREENSHOTS", tmp_path)
    document = _document("../_static/screenshots/home.png")
    specvet_generated.screenshot_notes(None, document)
    assert not list(document.findall(nodes.image))
    (note,) = document.findall(nodes.admonition)
    text = note.astext()
    assert "Screenshot not built: The home page" in text
    assert "make screenshots" in text and "make chromium" in text and "make docs-only" in text


def test_it_keeps_a_screenshot_that_was_made(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(specvet_generated, "SCREENSHOTS", tmp_path)
    (tmp_path / "home.png").write_bytes(b"\x89PNG")
    document = _document("../_static/screenshots/home.png")
    specvet_generated.screenshot_notes(None, document)
    assert len(list(document.findall(nodes.image))) == 1


def test_it_removes_the_grey_placeholders_an_older_build_left(tmp_path, monkeypatch) -> None:
    from PIL import Image

    monkeypatch.setattr(specvet_generated, "SCREENSHOTS", tmp_path)
    Image.new("RGB", (640, 360), "#e8e8e8").save(tmp_path / "home.png")
    Image.new("RGB", (1280, 800), "#ffffff").save(tmp_path / "catalog.png")
    specvet_generated.remove_old_placeholders(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.png"]


@pytest.mark.parametrize(
    "rule", ["white-space: pre-wrap", ".sidebar-tree .reference", ".screenshot-missing"]
)
def test_it_styles_the_docs_with_its_own_stylesheet(rule: str) -> None:
    conf = (DOCS / "conf.py").read_text()
    assert 'html_css_files = ["specvet.css"]' in conf
    assert rule in (DOCS / "_static" / "specvet.css").read_text()
