"""The shift sentinel's statistics and features (agent.shift)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agent.shift import (
    NO_OVERLAP,
    LibraryDistance,
    compare_groups,
    der_snr,
    grouped,
    held_groups,
    psi,
    spectrum_features,
)
from agent.spectra.value import Spectrum


def star(seed: int, *, noise: float = 0.01, lo: float = 3700.0, hi: float = 9100.0, depth=0.5):
    rng = np.random.default_rng(seed)
    wave = np.linspace(lo, hi, 3000)
    flux = 1.0 - depth * np.exp(-0.5 * ((wave - 6564.6) / 6.0) ** 2)
    flux = flux - 0.3 * depth * np.exp(-0.5 * ((wave - 4862.7) / 6.0) ** 2)
    return Spectrum(wavelength=wave, flux=flux + rng.normal(0.0, noise, wave.size), survey="T")


def features(seed: int, **kwargs) -> dict[str, float | None]:
    return spectrum_features(star(seed, **kwargs))


def test_it_measures_der_snr_from_the_flux_alone() -> None:
    rng = np.random.default_rng(1)
    flux = 100.0 + rng.normal(0.0, 2.0, 5000)
    assert der_snr(flux) == pytest.approx(50.0, rel=0.05)


def test_it_gives_no_psi_to_identical_samples_and_a_large_one_to_disjoint_ones() -> None:
    same = list(np.linspace(0.0, 1.0, 100))
    assert psi(same, same) == pytest.approx(0.0)
    assert psi(same, [v + 5.0 for v in same]) > 1.0


def test_it_bins_a_point_mass_so_a_different_resolution_shows() -> None:
    # every reference spectrum at R = 2000 (a survey default): the run at R = 500 must differ
    assert psi([2000.0] * 50, [500.0] * 30) > 1.0


def test_it_flags_a_noisier_run_and_not_one_of_the_same_distribution() -> None:
    reference = [("T", features(seed)) for seed in range(60)]
    same = [("T", features(seed)) for seed in range(100, 140)]
    noisy = [("T", features(seed, noise=0.2)) for seed in range(200, 240)]
    assert not any(g.shifted for g in compare_groups(grouped(reference), grouped(same)))
    shifted = compare_groups(grouped(reference), grouped(noisy))
    assert {f.feature for g in shifted for f in g.features if f.shifted} == {"snr"}


def test_it_holds_only_the_subset_that_shifted() -> None:
    reference = [("A", features(seed)) for seed in range(60)]
    run = [("A", features(seed)) for seed in range(100, 130)]
    run += [("B", features(seed, lo=6000.0)) for seed in range(200, 230)]
    groups = compare_groups(grouped(reference), grouped(run))
    assert held_groups(groups) == ["survey=B"]
    shifted = {f.feature for g in groups if g.key == "survey=B" for f in g.features if f.shifted}
    assert "blue_edge" in shifted and "snr" not in shifted


def test_it_does_not_test_a_run_too_small_to_tell() -> None:
    reference = [("T", features(seed)) for seed in range(60)]
    tiny = [("T", features(seed, noise=0.3)) for seed in range(5)]
    (group, _) = compare_groups(grouped(reference), grouped(tiny))
    assert not group.tested and not group.shifted


def test_it_keeps_false_alarms_at_the_stated_rate_on_resampled_runs() -> None:
    """Runs drawn from the reference's own distribution: flagged at most at ALPHA's order."""
    pool = [("T", features(seed)) for seed in range(300)]
    reference = pool[:100]
    rng = random.Random(7)
    flagged = sum(
        any(
            g.shifted
            for g in compare_groups(grouped(reference), grouped(rng.sample(pool[100:], 30)))
        )
        for _ in range(40)
    )
    assert flagged <= 2


def test_it_measures_the_distance_to_the_nearest_library_spectrum() -> None:
    library = LibraryDistance.from_spectra(
        [("deep", star(1, depth=0.5)), ("shallow", star(2, depth=0.1))]
    )
    assert library(star(3, depth=0.5)) < library(star(4, depth=0.3))
    assert library(star(5, depth=0.5)) < 0.05
    assert library(star(6, lo=7500.0)) == NO_OVERLAP  # shares none of the grid
    # the library's own object left out: the other one is the nearest
    from agent.shift import embed

    own = library.of_vector(embed(star(1, depth=0.5)))
    assert library.of_vector(embed(star(1, depth=0.5)), exclude="deep") > 3 * own
