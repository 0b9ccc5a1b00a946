"""HTML pages, one module per area. Function views; htmx requests get the page's partial."""

from __future__ import annotations
