"""The WSGI entry point loads every view when a worker starts, not inside its first request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_it_imports_the_views_when_the_wsgi_application_loads() -> None:
    probe = (
        "import sys, webapp.wsgi; "
        "print(all(m in sys.modules for m in "
        "('annotation.catalog.views', 'annotation.rating.views', 'annotation.spectra.views')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
