"""agent.bench.onedstds: IRAF onedstds tables read as declared AB magnitudes, one-column lists
refused, and a spectrum sampled every 50 Å never answered with confidence."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from agent.bench.onedstds import answers, read_tables, summary
from agent.policies.rule_based import RuleBasedInspector

H = 6.62607015e-27
K = 1.380649e-16
C = 2.99792458e10


def _hot_star_table(path: Path) -> None:
    """A 20,000 K blackbody in AB magnitudes every 50 Å, 3200-8100 Å: wavelength, mag, band."""
    wave = np.arange(3200.0, 8101.0, 50.0)
    nu = C / (wave * 1e-8)
    f_nu = 2 * H * nu**3 / C**2 / (np.exp(H * nu / (K * 20000.0)) - 1.0) * 1e-22
    mags = -2.5 * np.log10(f_nu) - 48.60
    path.write_text("".join(f"{w:.1f} {m:.3f} 50.\n" for w, m in zip(wave, mags, strict=True)))


def test_it_reads_ab_magnitude_tables_refuses_other_lists_and_keeps_coarse_answers_unsure(
    tmp_path: Path,
) -> None:
    (tmp_path / "spec50cal").mkdir()
    _hot_star_table(tmp_path / "spec50cal" / "star1.dat")
    (tmp_path / "ctio").mkdir()
    (tmp_path / "ctio" / "ext.dat").write_text("".join(f"{3200 + 50 * i}\n" for i in range(90)))
    spectra, refused = read_tables(tmp_path)
    assert [name for name, _ in spectra] == ["spec50cal/star1"]
    assert refused == 1
    ((_, spectrum),) = spectra
    flux = np.asarray(spectrum.flux)
    assert flux[0] > flux[-1] > 0  # a hot star, read as magnitudes: bluer is brighter
    rows = answers(spectra, RuleBasedInspector(), tasks=("O", "B", "A"))
    assert all(row.notes and row.confidence < 0.9 for row in rows)
    # read as air wavelengths, stored in vacuum: the sampling grows by ~0.03 %
    assert all(math.isclose(row.sampling, 50.0, rel_tol=1e-3) for row in rows)
    assert "answers at confidence >= 0.9: 0 of 3" in summary(rows, refused)
