"""Spectral measurements on hand-made arrays whose answers are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent import measure
from agent.measure import MeasurementError

C_KMS = 299_792.458
GAUSS_AREA = math.sqrt(2.0 * math.pi)  # area of a unit-peak Gaussian per unit sigma
SIGMA_TO_FWHM = 2.0 * math.sqrt(2.0 * math.log(2.0))
CENTRE = 6564.6
WINDOW = (CENTRE - 30.0, CENTRE + 30.0)
SIDES = [(CENTRE - 60.0, CENTRE - 35.0), (CENTRE + 35.0, CENTRE + 60.0)]


def grid(step: float = 0.5) -> np.ndarray:
    return np.arange(CENTRE - 80.0, CENTRE + 80.0 + step / 2, step)


def gaussian(wave: np.ndarray, centre: float, sigma: float) -> np.ndarray:
    return np.exp(-0.5 * ((wave - centre) / sigma) ** 2)


def everything_good(wave: np.ndarray) -> np.ndarray:
    return np.ones(wave.size, dtype=bool)


def line_ew(flux: np.ndarray, wave: np.ndarray, good: np.ndarray | None = None) -> float:
    good = everything_good(wave) if good is None else good
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    return measure.equivalent_width(wave, flux, good, WINDOW, continuum).ew


@pytest.mark.parametrize(
    ("amplitude", "sigma"),
    [(-0.4, 5.0), (-0.8, 2.0), (1.0, 4.0), (6.0, 8.0)],
)
def test_it_recovers_the_equivalent_width_of_a_gaussian_line(
    amplitude: float, sigma: float
) -> None:
    wave = grid()
    flux = 100.0 * (1.0 + amplitude * gaussian(wave, CENTRE, sigma))
    # absorption (amplitude < 0) gives a positive EW, emission a negative one
    expected = -amplitude * sigma * GAUSS_AREA
    assert line_ew(flux, wave) == pytest.approx(expected, rel=0.02)


def test_it_gives_zero_equivalent_width_on_a_sloped_continuum_without_a_line() -> None:
    wave = grid()
    flux = 50.0 + 0.2 * (wave - CENTRE)
    assert abs(line_ew(flux, wave)) < 1e-9


def test_it_ignores_masked_pixels_inside_the_line_and_the_side_bands() -> None:
    wave = grid()
    clean = 100.0 * (1.0 - 0.5 * gaussian(wave, CENTRE, 6.0))
    corrupted = clean.copy()
    good = everything_good(wave)
    for bad in (CENTRE + 4.0, CENTRE - 50.0, CENTRE + 41.0):  # in the line wing and both sides
        index = int(np.argmin(np.abs(wave - bad)))
        corrupted[index], good[index] = 1.0e6, False
    assert line_ew(corrupted, wave, good) == pytest.approx(line_ew(clean, wave), rel=0.01)


def test_it_propagates_the_inverse_variance_into_the_equivalent_width_error() -> None:
    wave = grid()
    flux = np.full(wave.size, 100.0)
    ivar = np.full(wave.size, 4.0)  # sigma 0.5 per pixel
    good = everything_good(wave)
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    result = measure.equivalent_width(wave, flux, good, WINDOW, continuum, ivar)
    n_pixels = int(np.count_nonzero((wave >= WINDOW[0]) & (wave < WINDOW[1])))
    # each pixel adds (0.5 Å / 100)^2 * 0.5^2 to the variance
    expected = math.sqrt(n_pixels * (0.5 / 100.0) ** 2 * 0.25)
    assert result.error == pytest.approx(expected, rel=1e-9)
    assert result.significance == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("sigma", "emission"), [(5.0, True), (3.0, False), (9.0, True)])
def test_it_recovers_the_fwhm_of_a_gaussian_in_km_per_s(sigma: float, emission: bool) -> None:
    wave = grid(0.25)
    sign = 1.0 if emission else -1.0
    flux = 100.0 * (1.0 + sign * 0.6 * gaussian(wave, CENTRE, sigma))
    good = everything_good(wave)
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    width = measure.fwhm_kms(wave, flux, good, WINDOW, continuum, emission=emission, centre=CENTRE)
    expected = SIGMA_TO_FWHM * sigma / CENTRE * C_KMS  # sigma 5 Å -> 537.7 km/s
    assert width.fwhm_kms == pytest.approx(expected, rel=0.03)
    assert width.depth == pytest.approx(0.6, rel=0.01)
    assert width.bounded


def test_it_bridges_the_dip_of_a_double_peaked_line_only_when_asked() -> None:
    wave = grid(0.25)
    flux = 100.0 * (1.0 + gaussian(wave, CENTRE - 8.0, 2.0) + gaussian(wave, CENTRE + 8.0, 2.0))
    good = everything_good(wave)
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    single = measure.fwhm_kms(wave, flux, good, WINDOW, continuum, emission=True)
    # the dip below half maximum spans 16 - 4.71 = 11.3 Å = 45 pixels of 0.25 Å
    narrow_gap = measure.fwhm_kms(
        wave, flux, good, WINDOW, continuum, emission=True, max_gap_pixels=40
    )
    bridged = measure.fwhm_kms(
        wave, flux, good, WINDOW, continuum, emission=True, max_gap_pixels=50
    )
    one_peak = SIGMA_TO_FWHM * 2.0  # 4.71 Å
    assert single.fwhm_kms == pytest.approx(one_peak / CENTRE * C_KMS, rel=0.03)
    assert narrow_gap.fwhm_kms == pytest.approx(single.fwhm_kms)
    # outer half-maximum points: 16 Å between the peaks plus one peak's FWHM
    assert bridged.fwhm_kms == pytest.approx((16.0 + one_peak) / CENTRE * C_KMS, rel=0.03)


def test_it_does_not_bridge_a_gap_wider_than_the_relative_limit() -> None:
    wave = grid(0.25)
    # a narrow line with a narrow neighbour 20 Å away, like H-alpha and [N II] 6585
    flux = 100.0 * (
        1.0 + 3.0 * gaussian(wave, CENTRE, 1.0) + 2.0 * gaussian(wave, CENTRE + 20.7, 1.0)
    )
    good = everything_good(wave)
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    width = measure.fwhm_kms(
        wave, flux, good, WINDOW, continuum, emission=True, max_gap_pixels=200, relative_gap=1.5
    )
    assert width.fwhm_kms == pytest.approx(SIGMA_TO_FWHM / CENTRE * C_KMS, rel=0.05)


def test_it_refuses_a_fwhm_when_there_is_no_peak_of_the_asked_sign() -> None:
    wave = grid()
    flux = 100.0 * (1.0 - 0.5 * gaussian(wave, CENTRE, 4.0))
    good = everything_good(wave)
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    with pytest.raises(MeasurementError, match="no emission peak"):
        measure.fwhm_kms(wave, flux, good, WINDOW, continuum, emission=True)


def test_it_fits_a_straight_continuum_through_an_outlier() -> None:
    wave = grid()
    flux = 2.0 + 0.01 * (wave - CENTRE)
    flux[int(np.argmin(np.abs(wave - (CENTRE - 45.0))))] = 50.0  # a sky-line residual
    continuum = measure.local_continuum(wave, flux, everything_good(wave), WINDOW, SIDES)
    assert continuum.slope == pytest.approx(0.01, abs=1e-9)
    assert continuum.level == pytest.approx(2.0, abs=1e-9)


def test_it_follows_a_curved_continuum_with_a_parabola() -> None:
    wave = grid()
    flux = 10.0 - 0.002 * (wave - CENTRE) ** 2 + 0.05 * (wave - CENTRE)
    continuum = measure.local_continuum(wave, flux, everything_good(wave), WINDOW, SIDES, degree=2)
    assert continuum(CENTRE) == pytest.approx(10.0, abs=1e-9)
    assert continuum.slope == pytest.approx(0.05, abs=1e-9)


def test_it_uses_a_flat_continuum_when_only_one_side_has_data() -> None:
    wave = grid()
    flux = np.where(wave < CENTRE, 4.0, 9.0)
    continuum = measure.local_continuum(wave, flux, everything_good(wave), WINDOW, SIDES[:1])
    assert continuum.slope == 0.0
    assert continuum.level == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("shading", "expected"),
    [("red", 0.3), ("blue", 1.0 - 1.0 / 0.7)],
)
def test_it_measures_the_depth_of_a_band_head(shading: str, expected: float) -> None:
    wave = np.arange(7000.0, 7120.0, 0.5)
    head = 7055.9
    flux = np.where(wave < head, 1.0, 0.7)  # absorbed redward of the head, like TiO
    depth = measure.band_depth(wave, flux, everything_good(wave), head, shading=shading)
    assert depth.depth == pytest.approx(expected, abs=1e-12)


def test_it_gives_the_band_depth_error_from_the_inverse_variance() -> None:
    wave = np.arange(7000.0, 7120.0, 0.5)
    flux = np.ones(wave.size)
    ivar = np.full(wave.size, 100.0)  # sigma 0.1 per pixel
    depth = measure.band_depth(
        wave, flux, everything_good(wave), 7055.9, shading="red", width=25.0, ivar=ivar
    )
    n_pixels = int(np.count_nonzero((wave >= 7057.9) & (wave < 7082.9)))
    side = 1.2533 * 0.1 / math.sqrt(n_pixels)
    assert depth.error == pytest.approx(math.hypot(side, side), rel=0.05)


def test_it_flags_a_cosmic_ray_but_keeps_an_unresolved_emission_line() -> None:
    wave = np.arange(5000.0, 5200.0, 1.0)
    flux = np.full(wave.size, 100.0)
    flux += 400.0 * gaussian(wave, 5100.0, 1.0)  # a line spread over ~2.4 pixels FWHM
    flux[50] += 400.0  # one hot pixel
    ivar = np.full(wave.size, 1.0)
    spikes = measure.find_spikes(flux, everything_good(wave), ivar)
    assert np.flatnonzero(spikes).tolist() == [50]


def test_it_finds_no_spikes_in_noise() -> None:
    rng = np.random.default_rng(3)
    flux = 100.0 + rng.normal(0.0, 1.0, 2000)
    spikes = measure.find_spikes(flux, np.ones(2000, dtype=bool), np.ones(2000))
    assert not spikes.any()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w, f, g: measure.median_flux(w, f, g, (1.0, 2.0)), "good pixels"),
        (lambda w, f, g: measure.local_continuum(w, f, g, WINDOW, []), "side_bands"),
        (lambda w, f, g: measure.local_continuum(w, f, g, (5.0, 1.0), SIDES), "low < high"),
        (lambda w, f, g: measure.band_depth(w, f, g, CENTRE, shading="up"), "shading"),
        (lambda w, f, g: measure.local_continuum(w, f, g, WINDOW, SIDES, degree=3), "degree"),
    ],
)
def test_it_raises_a_clear_error_for_unusable_input(call, message: str) -> None:
    wave = grid()
    with pytest.raises(MeasurementError, match=message):
        call(wave, np.ones(wave.size), everything_good(wave))


def test_it_refuses_a_window_whose_pixels_are_all_masked() -> None:
    wave = grid()
    good = everything_good(wave)
    good[(wave > WINDOW[0] - 1) & (wave < WINDOW[1] + 1)] = False
    flux = np.ones(wave.size)
    continuum = measure.local_continuum(wave, flux, good, WINDOW, SIDES)
    with pytest.raises(MeasurementError, match="good pixels"):
        measure.equivalent_width(wave, flux, good, WINDOW, continuum)


@pytest.mark.parametrize(
    ("measurement", "expected"),
    [
        (
            measure.Measurement(
                "H-alpha", CENTRE, "line", ew=-42.3, ew_error=2.0, fwhm_kms=1450.0, snr=18.0
            ),
            "emission EW -42.3 Å, 21.1σ, FWHM 1450 km/s, S/N 18",
        ),
        (
            measure.Measurement("H-beta", 4862.7, "line", ew=0.4, ew_error=1.0),
            "no clear line EW +0.4 Å, 0.4σ",
        ),
        (
            measure.Measurement("TiO", 7055.9, "band", depth=0.45, depth_error=0.05),
            "band depth +0.45, +9.0σ",
        ),
    ],
)
def test_it_describes_a_measurement_with_its_numbers(
    measurement: measure.Measurement, expected: str
) -> None:
    assert measurement.describe() == expected


def test_it_signs_significance_like_the_equivalent_width() -> None:
    emission = measure.Measurement("H-alpha", CENTRE, "line", ew=-10.0, ew_error=2.0)
    assert emission.significance == pytest.approx(-5.0)
    assert emission.is_emission()
    assert not emission.is_absorption()


def test_it_estimates_the_inverse_variance_from_the_scatter() -> None:
    rng = np.random.default_rng(7)
    flux = 100.0 + rng.normal(0.0, 2.0, 5000)
    good = np.ones(5000, dtype=bool)
    good[100] = False
    ivar = measure.estimate_ivar(flux, good)
    assert ivar[100] == 0.0
    assert float(np.median(ivar[good])) == pytest.approx(1.0 / 4.0, rel=0.1)


def test_it_deblends_two_lines_closer_than_their_width_on_coarse_pixels() -> None:
    # 5 Å pixels, FWHM 9 Å, lines 11 Å apart: a window around either takes in the other's wing
    wave = np.arange(4440.0, 4610.0, 5.0)
    fine = np.linspace(-2.5, 2.5, 101)[None, :] + wave[:, None]  # each pixel's span
    sigma = 9.0 / (2.0 * math.sqrt(2.0 * math.log(2.0)))
    continuum = 100.0 + 0.05 * (wave - 4500.0)
    profile = sum(
        ew * np.exp(-0.5 * ((fine - centre) / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))
        for centre, ew in ((4542.9, 0.2), (4553.9, 0.6))
    ).mean(axis=1)
    flux = continuum * (1.0 - profile)
    good = np.ones(wave.size, dtype=bool)
    ivar = np.full(wave.size, 1.0 / 0.5**2)
    fit = measure.deblend(wave, flux, good, ivar, (4448.0, 4600.0), [4542.9, 4553.9], [9.0, 9.0])
    assert fit.ews == pytest.approx((0.2, 0.6), abs=0.005)
    assert 0.0 < fit.error(0) < 0.1
    window = measure.equivalent_width(
        wave,
        flux,
        good,
        (4535.5, 4550.5),
        measure.local_continuum(wave, flux, good, (4535.5, 4550.5), [(4520.0, 4533.0)]),
    )
    assert window.ew > 0.24  # the window alone credits He II with a part of Si III's wing


def test_it_refuses_to_deblend_more_lines_than_the_pixels_can_carry() -> None:
    wave = np.arange(4500.0, 4530.0, 5.0)
    flux = np.ones(wave.size)
    with pytest.raises(MeasurementError):
        measure.deblend(
            wave, flux, np.ones(wave.size, bool), flux, (4500.0, 4530.0), [4510.0, 4520.0], [9, 9]
        )
