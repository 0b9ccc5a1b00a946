"""agent/bench/degraded.py: development spectra as a coarse table holds them, and the figures of
the degraded-development bench (the bench itself reads the real corpus: not run here)."""

from __future__ import annotations

import numpy as np

from agent.bench.degraded import degrade, figures, null_ece_quantile
from agent.library_match import choose_tier
from agent.resolution import Resolution
from agent.spectra import Spectrum


def _star(depth: float = 0.5) -> Spectrum:
    wave = np.arange(3600.0, 7400.0, 0.9)
    flux = 1.0 - depth * np.exp(-0.5 * ((wave - 4471.0) / 1.0) ** 2)
    return Spectrum(
        wave, flux, survey="MILES", resolution=Resolution((5000.0,), (2.5,), "survey default")
    )


def test_it_bins_a_spectrum_as_a_table_of_that_many_angstrom_bins_is_read() -> None:
    coarse = degrade(_star(), 16.0)
    assert coarse is not None
    assert np.allclose(np.diff(coarse.wavelength), 16.0)
    assert coarse.ivar is None
    assert coarse.resolution is not None and coarse.resolution.source == "sampling estimate"
    assert coarse.resolution.fwhm_at(5000.0) == 32.0
    assert choose_tier(coarse) == 48.0  # the working tier the outside set's 16 Å tables get


def test_it_conserves_the_flux_a_line_takes_out() -> None:
    native, coarse = _star(), degrade(_star(), 16.0)
    assert coarse is not None
    taken = np.sum(1.0 - native.flux) * 0.9
    binned = np.sum(1.0 - coarse.flux) * 16.0
    assert abs(binned - taken) < 0.02 * taken
    assert float(np.min(coarse.flux)) > 0.9  # a 1 Å line is washed out at 16 Å


def test_it_leaves_the_bins_over_a_gap_of_the_original_empty() -> None:
    star = _star()
    keep = (star.wavelength < 5000.0) | (star.wavelength > 5200.0)
    gapped = Spectrum(star.wavelength[keep], star.flux[keep], resolution=star.resolution)
    coarse = degrade(gapped, 16.0)
    assert coarse is not None
    assert not np.any((coarse.wavelength > 5008.0) & (coarse.wavelength < 5192.0))


def test_it_refuses_a_spectrum_shorter_than_ten_bins() -> None:
    wave = np.arange(4000.0, 4100.0, 1.0)
    assert degrade(Spectrum(wave, np.ones_like(wave)), 16.0) is None


def test_it_tells_an_overconfident_inspector_from_a_calibrated_one() -> None:
    rng = np.random.default_rng(3)
    confidence = rng.uniform(0.6, 0.95, 400)
    labels = ["YES"] * 400
    right = rng.random(400) < confidence  # right as often as it says
    calibrated = [("YES", c if ok else 1.0 - c) for c, ok in zip(confidence, right, strict=True)]
    row = figures([(label, p) for label, (_, p) in zip(labels, calibrated, strict=True)])
    assert row.ece <= row.null95
    over = rng.random(400) < confidence - 0.2  # right 20 points less often than it says
    rows = [("YES", c if ok else 1.0 - c) for c, ok in zip(confidence, over, strict=True)]
    row = figures(rows)
    assert row.ece > row.null95
    assert row.overconfidence > 0.15


def test_it_puts_the_calibrated_ece_quantile_where_a_few_hundred_answers_leave_it() -> None:
    value = null_ece_quantile([0.8] * 300, draws=500)
    assert 0.02 < value < 0.08
    assert null_ece_quantile([0.8] * 3000, draws=200) < value


def test_it_answers_each_degraded_copy_once_with_the_fits_of_the_other_folds() -> None:
    """The degraded copies of fold k are answered by v7's fits on the native answers of the
    other folds: every copy once, each set on its own."""
    import random

    from agent.bench.degraded import cross_validated
    from agent.bench.real_fits import Scored, TypeFits
    from agent.calibration import calibrator_from_dict
    from agent.library_match import TaskEvidence

    rng = random.Random(7)

    def answers(spread: float) -> list[Scored]:
        rows = []
        for i in range(200):
            positive = i % 4 == 0
            score = (1.0 if positive else -1.0) + rng.gauss(0.0, spread)
            found = TaskEvidence("B", score, None, None, 0.5)
            label = "YES" if positive else "NO"
            rows.append(Scored("B", f"star-{i}", label, 0.0, evidence=found, compared=True))
        return rows

    native, coarse = answers(0.2), answers(3.0)
    calibration = {"B": calibrator_from_dict({"method": "Platt", "slope": 1.0, "intercept": 0.0})}
    out = cross_validated(
        native, {"native": native, "16 Å": coarse}, calibration, {"B": 0.78}, TypeFits({})
    )
    assert set(out) == {"native", "16 Å"}
    assert len(out["native"]["B"]) == len(out["16 Å"]["B"]) == 200
    assert out["native"]["A"] == []
    assert figures(out["native"]["B"]).balanced_accuracy == 1.0
    assert figures(out["16 Å"]["B"]).balanced_accuracy < 0.9  # the copies' own evidence
