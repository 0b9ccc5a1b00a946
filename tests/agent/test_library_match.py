"""The data-driven part of the inspector (agent/library_match.py) on spectra built here: the
extinction law against its published values, and a comparison with a small library whose
answer is known (no real-data cache needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.library_match import (
    C_KMS,
    TIERS,
    LibraryMatcher,
    Prepared,
    ccm89,
    choose_tier,
    decide,
    grid,
    library_tier,
    prepare,
    redden,
)
from agent.resolution import Resolution
from agent.spectra import Spectrum


@pytest.mark.parametrize(
    ("wavelength", "ratio"),
    # CCM89 Table 3 (R_V = 3.1): A(λ)/A(V) at the effective wavelengths of R, I and J
    [(5490.0, 1.000), (7000.0, 0.751), (9000.0, 0.479), (12500.0, 0.282)],
)
def test_it_follows_the_published_ccm89_extinction_curve(wavelength: float, ratio: float) -> None:
    value = float(ccm89(np.array([wavelength]))[0]) / 3.1
    assert value == pytest.approx(ratio, abs=0.015)


def test_it_gives_e_b_minus_v_as_the_difference_of_the_b_and_v_extinctions() -> None:
    """A(B) - A(V) = E(B-V): k(4400 Å) - k(5500 Å) = 1 by the definition of k."""
    k = ccm89(np.array([4400.0, 5500.0]))
    assert float(k[0] - k[1]) == pytest.approx(1.0, abs=0.03)


def test_it_refuses_wavelengths_outside_the_law_naming_the_limit() -> None:
    with pytest.raises(ValueError, match="ccm89 covers"):
        ccm89(np.array([2000.0]))


# --- a library of two kinds of star built here --------------------------------------------------

LINES = {
    # a hot star: Balmer and He I lines on a blue continuum
    "hot": ((4102.9, 8.0, 0.5), (4341.7, 8.0, 0.5), (4472.7, 3.0, 0.3), (4862.7, 8.0, 0.5),
            (5877.3, 3.0, 0.25), (6564.6, 8.0, 0.4)),
    # a cool star: metal lines and a band on a red continuum
    "cool": ((3934.8, 4.0, 0.6), (4227.9, 3.0, 0.4), (5175.0, 5.0, 0.4), (5895.0, 4.0, 0.4),
             (6497.0, 3.0, 0.2), (7056.0, 20.0, 0.3)),
}  # fmt: skip
SLOPE = {"hot": -3.0, "cool": 1.5}


def star(
    kind: str,
    *,
    ebv: float = 0.0,
    velocity: float = 0.0,
    snr: float | None = None,
    depth_scale: float = 1.0,
    fwhm: float = 2.5,
    step: float = 0.9,
    seed: int = 0,
) -> Spectrum:
    """A spectrum of ``kind`` at ``fwhm`` Å, reddened by ``ebv`` and moved by ``velocity``."""
    wave = np.arange(3600.0, 9350.0, step)
    rest = wave / (1.0 + velocity / C_KMS)
    flux = (rest / 5500.0) ** SLOPE[kind]
    for centre, sigma, depth in LINES[kind]:
        width = math.hypot(sigma, fwhm / 2.3548)
        flux *= 1.0 - depth * depth_scale * (sigma / width) * np.exp(
            -0.5 * ((rest - centre) / width) ** 2
        )
    flux = redden(wave, flux, ebv)
    ivar = None
    if snr is not None:
        noise = flux / snr
        flux = flux + np.random.default_rng(seed).normal(0.0, 1.0, flux.size) * noise
        ivar = 1.0 / noise**2
    resolution = Resolution((3600.0, 9350.0), (fwhm, fwhm), "user")
    return Spectrum(wavelength=wave, flux=flux, ivar=ivar, resolution=resolution)


def matcher() -> LibraryMatcher:
    members: list[tuple[str, str, str, dict[str, str | None], Prepared]] = []
    for kind, task_label in (("hot", "YES"), ("cool", "NO")):
        for index, scale in enumerate((0.8, 1.0, 1.2)):
            prepared = prepare(star(kind, depth_scale=scale), 4.0, trim=0.0)
            assert prepared is not None
            members.append((f"{kind}-{index}", f"{kind.upper()}{index}", kind, {"B": task_label},
                            prepared))  # fmt: skip
    return LibraryMatcher({4.0: library_tier(4.0, members)})


def test_it_matches_a_reddened_hot_star_to_hot_stars_and_fits_its_extinction() -> None:
    """E(B-V) = 1 turns the hot star's continuum redder than the cool stars': the comparison
    divides the continuum out, matches the lines, and reports the reddening instead of reading
    it as a cooler type."""
    observed = star("hot", ebv=1.0, velocity=150.0, snr=60.0)
    library = matcher()
    match = library.match(observed)
    assert match is not None
    nearest = match.nearest(1)[0]
    assert nearest["type"] == "hot"
    assert nearest["ebv"] == pytest.approx(1.0, abs=0.1)
    assert nearest["shift_kms"] == pytest.approx(150.0, abs=60.0)
    evidence = decide(match, "B")
    assert evidence.score > 0  # nearer the task's positives than its negatives
    assert evidence.nearest_positive is not None and evidence.nearest_negative is not None
    assert evidence.nearest_negative["distance"] > evidence.nearest_positive["distance"]


def test_it_matches_an_unreddened_cool_star_to_cool_stars() -> None:
    match = matcher().match(star("cool", snr=40.0, seed=3))
    assert match is not None
    assert match.nearest(1)[0]["type"] == "cool"
    assert decide(match, "B").score < 0


def test_it_leaves_the_named_object_out_of_its_own_library() -> None:
    library = matcher()
    match = library.match(star("hot", depth_scale=1.0), exclude_object="HOT1")
    assert match is not None
    assert "hot-1" not in [row["id"] for row in match.nearest(6)]
    assert match.nearest(1)[0]["type"] == "hot"


def test_it_does_not_compare_a_spectrum_coarser_than_every_working_resolution() -> None:
    coarse = star("hot", fwhm=100.0, step=50.0)  # the 50 Å tables of KPNO and Hamuy
    assert choose_tier(coarse) is None
    assert matcher().match(coarse) is None


def test_it_compares_a_table_of_16_angstrom_bins_at_the_coarsest_tier() -> None:
    """The Hamuy standards (16 Å bins, so 32 Å FWHM at least) were coarser than every tier and
    never compared ("no comparison with real spectra" on every B, A, O and MG answer)."""
    assert choose_tier(star("hot", fwhm=16.0, step=16.0)) == TIERS[-1] == 48.0


def test_it_leaves_out_a_coarse_red_extension_instead_of_the_whole_spectrum() -> None:
    """CALSPEC p177d_001 is STIS at 1.5-3 Å FWHM to 8250 Å and a 20 Å model beyond: one coarse
    probe made it coarser than every tier, so it was never compared."""
    fine = star("cool", fwhm=2.5, step=0.9)
    wave = np.asarray(fine.wavelength)
    keep = (wave < 8250.0) | (np.arange(wave.size) % 22 == 0)  # ~20 Å pixels beyond 8250 Å
    resolution = Resolution((3600.0, 8250.0, 8251.0, 9350.0), (2.5, 2.5, 40.0, 40.0), "user")
    mixed = Spectrum(wavelength=wave[keep], flux=np.asarray(fine.flux)[keep], resolution=resolution)
    assert choose_tier(mixed) == 4.0
    prepared = prepare(mixed, 4.0)
    assert prepared is not None
    working = grid(4.0)
    assert not prepared.good[working > 8300.0].any()
    assert prepared.good[(working > 4000.0) & (working < 8000.0)].mean() > 0.9


def test_it_compares_at_the_finest_tier_as_coarse_as_the_spectrum() -> None:
    assert choose_tier(star("hot", fwhm=2.5)) == 4.0
    assert choose_tier(star("hot", fwhm=6.0, step=2.0)) == 8.0


def test_it_switches_the_library_off_by_the_environment(monkeypatch) -> None:
    from agent.library_match import default_matcher

    monkeypatch.setenv("SPECVET_LIBRARY", "off")
    assert default_matcher() is None


def test_it_counts_a_mixed_neighbourhood_as_mixed_not_as_its_one_nearest_spectrum() -> None:
    """One B9 library spectrum nearest, four A0 ones just behind it: one nearest spectrum would
    say YES for B with certainty; the vote of the five says mostly NO, and their type sits at
    the B/A boundary."""
    from agent.library_match import neighbour_vote

    distances = np.array([0.50, 0.52, 0.53, 0.55, 0.56, 3.0, np.inf])
    labels = np.array([1, 0, 0, 0, 0, 1, 1])  # B task: the B9 star and two far B stars
    types = ["B9V", "A0V", "A0V", "A0V", "A0V", "B2V", "B1V"]
    vote, number = neighbour_vote(distances, labels, types)
    assert 0.1 < vote < 0.3
    assert 19.5 < number < 20.0


def test_it_leaves_unlabelled_and_uncompared_spectra_out_of_the_vote() -> None:
    from agent.library_match import neighbour_vote

    distances = np.array([0.1, 0.5, np.inf])
    labels = np.array([-1, 1, 1])  # the nearest is excluded from the task
    vote, number = neighbour_vote(distances, labels, ["WN6", "B3V", "B0V"])
    assert vote == 1.0
    assert number == 13.0
    assert math.isnan(neighbour_vote(distances, np.array([-1, -1, -1]), ["", "", ""])[0])


@pytest.mark.parametrize(
    ("text", "number"),
    [("O9.5V", 9.0), ("B9.5p...", 19.0), ("A0Ib", 20.0), ("A", 25.0), ("M3III", 63.0)],
)
def test_it_numbers_spectral_types_along_the_temperature_sequence(text: str, number: float) -> None:
    from agent.library_match import type_number

    assert type_number(text) == number
    assert math.isnan(type_number("DA2"))


def test_it_gives_the_class_chi2_of_the_best_template_of_each_letter() -> None:
    """rule-based/v6: the best A template at D 1.0, the best F at 1.5, the best B at 2.0: A
    leads the nearest other letter (F) by 2.25 - 1.0 in D^2; for F the same gap counts against."""
    from agent.library_match import CHI2_CAP, letter_chi2

    types = ["A0V", "A5V", "F2V", "B8V", "DA2"]
    distances = np.array([1.0, 1.2, 1.5, 2.0, 0.1])  # the white dwarf has no MK letter
    assert letter_chi2(distances, types, "A") == pytest.approx(1.25)
    assert letter_chi2(distances, types, "F") == pytest.approx(-1.25)
    assert letter_chi2(distances, types, "O") == -CHI2_CAP  # no O template compared
    assert letter_chi2(np.array([1.0, np.inf]), ["A0V", "F0V"], "A") == CHI2_CAP
    assert math.isnan(letter_chi2(np.full(2, np.inf), ["A0V", "F0V"], "A"))


def test_it_fits_the_mk_region_alone_only_when_asked_and_covered() -> None:
    """The MK-region comparison (3800-4600 Å) is made for v6 only; a spectrum that does not
    reach it has none, and its evidence then carries no MK vote."""
    library = matcher()
    plain = library.match(star("hot", snr=60.0))
    assert plain is not None and plain.mk is None
    clock: dict[str, float] = {}
    match = library.match(star("hot", snr=60.0), mk_region=True, clock=clock)
    assert match is not None and match.mk is not None
    assert "mk" in clock
    assert match.mk.nearest(1)[0]["type"] == "hot"
    evidence = decide(match, "B")
    assert evidence.mk_vote > 0.9
    red = star("hot", snr=60.0)
    keep = red.wavelength > 5000.0
    red_only = Spectrum(
        wavelength=red.wavelength[keep],
        flux=red.flux[keep],
        ivar=None if red.ivar is None else red.ivar[keep],
        resolution=red.resolution,
    )
    match = library.match(red_only, mk_region=True)
    assert match is not None and match.mk is None
    assert math.isnan(decide(match, "B").mk_vote)
