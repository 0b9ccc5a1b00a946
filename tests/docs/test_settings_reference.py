"""The settings reference cannot drift: every environment variable the code reads is described
in docs/reference/settings.toml, and nothing described there has stopped being read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import env_reference  # noqa: E402


def test_it_describes_every_variable_the_code_reads_and_no_other() -> None:
    assert env_reference.drift(env_reference.env_reads(), env_reference.meanings()) == []


def test_it_covers_every_variable_webapp_settings_reads() -> None:
    in_settings = env_reference.env_reads([ROOT / "webapp" / "settings.py"])
    assert {
        "DATABASE_URL",
        "SECRET_KEY",
        "SECRET_KEY_FILE",
        "INSPECTION_BATCH_SIZE",
    } <= in_settings.keys()
    assert in_settings.keys() <= env_reference.meanings().keys()


def test_it_finds_each_way_the_code_reads_a_variable(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "import os\n"
        "A = os.getenv('A_VAR', '1')\n"
        "B = os.environ.get('B_VAR')\n"
        "C = os.environ['C_VAR']\n"
        "D = envint('D_VAR', 64 * 1024)\n"
        "E = envsecret('E_VAR')\n"
        "F = os.environ.setdefault('NOT_A_READ', 'x')\n"
    )
    reads = env_reference.env_reads([source])
    assert sorted(reads) == ["A_VAR", "B_VAR", "C_VAR", "D_VAR", "E_VAR", "E_VAR_FILE"]
    assert reads["A_VAR"].default == "'1'"
    assert reads["B_VAR"].default is None
    assert reads["D_VAR"].default == "65536 (64 * 1024)"


def test_it_reports_a_variable_read_but_undescribed_and_one_described_but_unread(
    tmp_path: Path,
) -> None:
    source = tmp_path / "module.py"
    source.write_text("import os\nX = os.getenv('NEW_SETTING', '')\n")
    described = {
        "OLD_SETTING": {"group": "g", "meaning": "m"},
        "DYNAMIC_ONE": {"group": "g", "meaning": "m", "dynamic": "read by name at run time"},
    }
    problems = env_reference.drift(env_reference.env_reads([source]), described)
    assert len(problems) == 2
    assert problems[0].startswith("NEW_SETTING is read at") and "not described" in problems[0]
    assert problems[1].startswith("OLD_SETTING is described") and "no code reads it" in problems[1]


@pytest.mark.parametrize("name", ["DATABASE_URL", "OPENAI_API_KEY", "SPECTRUM_MAX_PIXELS"])
def test_it_puts_each_variable_on_the_page_with_its_default_from_the_code(name: str) -> None:
    reads, described = env_reference.env_reads(), env_reference.meanings()
    page = env_reference.settings_page(reads, described)
    row = next(line for line in page.splitlines() if line.startswith(f"| `{name}`<br>"))
    if name == "SPECTRUM_MAX_PIXELS":
        assert "`1000000`" in row and "webapp/settings.py:" in row
    assert described[name]["meaning"].split()[0] in row
