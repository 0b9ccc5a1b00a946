"""Sphinx configuration: `make docs` builds docs/_build/html offline, warnings as errors."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]

project = "specvet"
author = "the specvet authors"
copyright = "2026, the specvet authors"

extensions = ["myst_parser", "specvet_generated"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md", "_snippets"]  # _snippets: included by pages
root_doc = "index"

# Every internal link and cross-reference is checked: a missing page, heading anchor or
# reference target is a warning, and `make docs` turns warnings into errors.
nitpicky = True
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
suppress_warnings: list[str] = []

html_theme = "furo"
html_title = "specvet"
html_static_path = ["_static"]
html_css_files = ["specvet.css"]  # wrapped code blocks, a compact sidebar, screenshot notes
html_last_updated_fmt = None
