"""A user's clone has no ``../shared`` beside it: nothing the code, the tests or the tutorials
read may live outside the project (issue 37, item 14). The two real LAMOST spectra ship in
``agent/data/lamost`` with their attribution and licence notice."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from astropy.io import fits

from agent.real_corpus import LAMOST_DIR, PROJECT_ROOT, load_entry, load_manifest

ROOT = Path(__file__).resolve().parents[2]
LAMOST_FILES = ("spec-55859-F5902_sp01-001_dr7.fits.gz", "spec-55859-F5902_sp01-013_dr8.fits.gz")
# A path segment "shared" followed by "data", as Path arithmetic or in a string.
SHARED_PATH = re.compile(r"""["']shared["']\s*/\s*["']data["']|\.\./shared/data""")
CODE_FOLDERS = ("agent", "annotation", "webapp", "training", "tests")


def test_it_ships_the_two_real_lamost_files_inside_the_project() -> None:
    assert LAMOST_DIR.is_relative_to(ROOT)
    for name in LAMOST_FILES:
        path = LAMOST_DIR / name
        size = path.stat().st_size
        assert 0 < size < 100_000, f"{name}: {size} bytes, too big for git"
        with fits.open(path) as hdus:
            assert "LAMOST" in str(hdus[0].header.get("DATA_V", ""))


def test_it_keeps_the_attribution_and_licence_beside_the_lamost_files() -> None:
    readme = (LAMOST_DIR / "README.md").read_text()
    assert "YunyuG/Cmost" in readme and "Apache" in readme
    licence = (LAMOST_DIR / "LICENSE-Apache-2.0.txt").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence


def test_it_reads_the_corpus_lamost_entries_from_inside_the_project() -> None:
    entries = [entry for entry in load_manifest() if entry.survey == "LAMOST"]
    assert {Path(entry.member).name for entry in entries} == set(LAMOST_FILES)
    for entry in entries:
        path = (PROJECT_ROOT / entry.member).resolve()
        assert path.is_relative_to(ROOT), f"{entry.id} reads {path}, outside the project"
        assert load_entry(entry).wavelength.size > 3000


@pytest.mark.parametrize("folder", CODE_FOLDERS)
def test_it_reads_nothing_from_a_shared_folder_beside_the_checkout(folder: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SHARED_PATH.search(line)
    ]
    assert offenders == []


def test_it_finds_the_real_lamost_files_when_no_shared_folder_is_beside_the_checkout(
    tmp_path: Path,
) -> None:
    """A copy of the loading code in a folder with no ``../shared``: the corpus entries load."""
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "agent").symlink_to(ROOT / "agent")
    assert not (tmp_path / "shared").exists()
    script = (
        "from agent.real_corpus import load_entry, load_manifest\n"
        "n = [load_entry(e).wavelength.size for e in load_manifest() if e.survey == 'LAMOST']\n"
        "print(len(n))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=clone, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
