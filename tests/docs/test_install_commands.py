"""Which command installs what (issue 37 item 13: `make demo` does not install Playwright, and the
browser-driven docs steps failed in a demo venv without saying why). The Makefile's own dry run
is the truth; the README, the first tutorial and `make help` must say the same."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dry_run(target: str) -> str:
    result = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return result.stdout


def _words(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_it_installs_playwright_only_with_the_dev_requirements() -> None:
    assert "playwright==" not in (ROOT / "requirements.txt").read_text()
    assert "playwright==" in (ROOT / "requirements-dev.txt").read_text()
    demo = _dry_run("demo")
    assert "pip install -r requirements.txt" in demo
    assert "requirements-dev.txt" not in demo
    assert "pip install -r requirements-dev.txt" in _dry_run("install-dev")
    assert "apt-get install -y chromium" in _dry_run("chromium")


def test_it_says_which_command_installs_what() -> None:
    help_text = " ".join(
        subprocess.run(
            ["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    for needed in ("make install ", "make install-dev", "Playwright", "make chromium"):
        assert needed in help_text
    assert "a demo venv has no Playwright" in help_text
    for page in (ROOT / "README.md", ROOT / "docs" / "tutorials" / "first-ten-minutes.md"):
        text = _words(page)
        assert "make install-dev chromium" in text, page.name
        assert "no Playwright" in text, page.name
