from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from annotation.models import Spectrum

pytestmark = pytest.mark.django_db


def test_it_loads_the_real_lamost_files(shared_lamost_dir):
    paths = sorted(str(p) for p in shared_lamost_dir.glob("*.fits.gz"))
    call_command("load_spectra", *paths, "--dataset", "lamost")
    rows = Spectrum.objects.filter(dataset="lamost")
    assert rows.count() == 2
    assert set(rows.values_list("survey", flat=True)) == {"LAMOST"}


def test_it_fails_the_command_for_an_unreadable_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("this is not a table\n")
    with pytest.raises(CommandError, match="1 of 1"):
        call_command("load_spectra", str(bad))


def test_it_makes_and_loads_a_small_benchmark(tmp_path):
    call_command(
        "make_benchmark", "--out", str(tmp_path), "--scale", "0.2", "--tasks", "CV", "--load"
    )
    rows = Spectrum.objects.filter(dataset="specvi-mini")
    assert rows.exists()
    assert all(rows.values_list("synthetic", flat=True))
    assert set(rows.values_list("label", flat=True)) == {"YES", "NO"}
    assert set(rows.values_list("task__code", flat=True)) == {"CV"}
