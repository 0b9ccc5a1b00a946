"""Compact helium stars against the B task (issue 36): hand-made spectra at the resolution of
HST/STIS G430L (2.7 Å pixels, ~5.5 Å line-spread FWHM), where the outside set's DB white dwarf,
DO white dwarf and sdO stars were answered B YES, and named real development B stars that must
keep their answer (they skip where the real-data cache cannot be built)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector, SpectrumView
from agent.policies.rule_based.compact_stars import compact_helium, whole_he1_4471
from agent.policies.rule_based.findings import Assessment, _narrow_line
from agent.policies.rule_based.hot_stars import score_b
from agent.real_corpus import CorpusEntry, load_entry
from agent.resolution import Resolution
from agent.spectra import Spectrum

STIS = Resolution((3000.0, 11000.0), (5.5, 5.5), source="user")
HE_I = (4027.3, 4389.2, 4472.7, 4714.5, 4923.3, 5017.1, 5877.3)


def compact_star(
    lines: dict[float, tuple[float, float]], *, snr: float = 150.0, seed: int = 7
) -> Spectrum:
    """A hot continuum (F ~ lambda^-3) on 2.7 Å pixels with Gaussian lines of (EW, FWHM) in Å,
    each FWHM the intrinsic width with the 5.5 Å line-spread function added in quadrature."""
    wave = np.arange(3500.0, 7000.0, 2.7)
    profile = np.zeros_like(wave)
    for centre, (ew, intrinsic) in lines.items():
        sigma = math.hypot(intrinsic, 5.5) / (2.0 * math.sqrt(2.0 * math.log(2.0)))
        profile += (
            ew * np.exp(-0.5 * ((wave - centre) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        )
    continuum = (wave / 5000.0) ** -3.0
    noise = continuum / snr
    flux = (
        continuum * (1.0 - np.minimum(profile, 0.95))
        + np.random.default_rng(seed).normal(0.0, 1.0, wave.size) * noise
    )
    return Spectrum(wave, flux, ivar=noise**-2, survey="table", resolution=STIS)


# a DB white dwarf: Stark-broadened He I only (FWHM 30 Å, EW 3-8 Å), no hydrogen
DB = {centre: (8.0 if centre == 4472.7 else 4.0, 30.0) for centre in HE_I}
# a B2 V star: He I of 1-1.5 Å at 4 Å FWHM, Balmer lines of 5 Å EW and a core ~9 Å wide (the
# development part's B2 IV stars: H-beta 3.8-4.3 Å, FWHM 500-530 km/s), Mg II, Si III
B2V = {
    **{centre: (1.2 if centre == 4472.7 else 0.6, 4.0) for centre in HE_I},
    4102.9: (5.0, 9.0),
    4341.7: (5.0, 9.0),
    4862.7: (5.0, 9.0),
    4482.4: (0.15, 3.0),
    4553.9: (0.2, 3.0),
}
# an sdO star: He II 4686 of 1 Å, weak He I, weak Balmer lines 25 Å wide (~1600 km/s)
SDO = {
    4687.0: (1.0, 8.0),
    4542.9: (0.5, 8.0),
    4472.7: (0.3, 8.0),
    4102.9: (2.5, 25.0),
    4341.7: (2.5, 25.0),
    4862.7: (2.5, 25.0),
}


def test_it_measures_a_broad_he_i_4471_whole_where_the_narrow_window_sees_only_its_core() -> None:
    broad = SpectrumView(compact_star(DB))
    narrow = SpectrumView(compact_star(B2V))
    whole_broad, whole_narrow = whole_he1_4471(broad), whole_he1_4471(narrow)
    core = _narrow_line(broad, "He I 4471", 4472.7)
    assert whole_broad is not None and whole_broad.ew is not None
    assert whole_narrow is not None and whole_narrow.ew is not None
    assert core is not None and core.ew is not None
    assert whole_broad.ew == pytest.approx(8.0, rel=0.2)
    assert whole_narrow.ew == pytest.approx(1.35, abs=0.3)  # He I 4471 with Mg II 4481
    assert core.ew < 0.5 * whole_broad.ew  # the ±7 Å window against flanks in the wings


def test_it_counts_the_whole_he_i_4471_of_a_db_white_dwarf_against_b_but_not_a_b2_star() -> None:
    task = get_task("B")
    db, b2 = Assessment(bias=0.0), Assessment(bias=0.0)
    compact_helium(db, SpectrumView(compact_star(DB)), task)
    compact_helium(b2, SpectrumView(compact_star(B2V)), task)
    assert db.score <= -3.0
    assert any("DB white dwarf" in (f.alternative or "") for f in db.findings)
    assert b2.score == 0.0


def test_it_does_not_score_a_db_white_dwarf_with_broad_he_i_as_a_b_star() -> None:
    # before the compact-star rules the narrow He I windows read this DB's line cores as a B
    # star's He I and it scored +0.16, on the YES side (the outside set's DBQ4 LDS 749B: +4.0)
    view = SpectrumView(compact_star(DB))
    assert score_b(view, get_task("B")).score < 0.0


def test_it_counts_he_ii_4686_and_weak_broad_balmer_lines_of_an_sdo_against_b() -> None:
    task = get_task("B")
    sdo = Assessment(bias=0.0)
    compact_helium(sdo, SpectrumView(compact_star(SDO)), task)
    texts = " ".join(f.text for f in sdo.findings if f.weight < 0)
    assert "He II 4686" in texts and "weak Balmer lines" in texts
    assert sdo.score <= -4.0
    assert score_b(SpectrumView(compact_star(SDO)), task).score < 0.0


def test_it_answers_an_sdo_no_for_b() -> None:
    decision = (
        RuleBasedInspector(library=None)
        .begin(spectrum=compact_star(SDO), task=get_task("B"), use_tool=False)
        .decision
    )
    assert decision is not None and decision["prediction"] == "NO"


@pytest.fixture(scope="module")
def development(real: dict[str, CorpusEntry]) -> dict[str, CorpusEntry]:
    return {key: entry for key, entry in real.items() if entry.split == "development"}


@pytest.mark.parametrize(
    "identifier",
    # B0.5 Iae and B1.5 Iae (weak, narrow Balmer lines), B1 III, B2 IV, B3 V (strongest He I)
    ["miles-m0732", "miles-m0751", "miles-m0737", "miles-m0011", "miles-m0548"],
)
def test_it_leaves_real_early_b_stars_without_a_compact_star_finding(
    development: dict, identifier: str
) -> None:
    found = Assessment(bias=0.0)
    compact_helium(found, SpectrumView(load_entry(development[identifier])), get_task("B"))
    assert found.score == 0.0, [f.text for f in found.findings]


def test_it_reads_no_b_type_from_an_h_beta_in_emission() -> None:
    # an H-beta at or below zero EW (emission, or a DB's He I 4713/4922 in its flanks: LDS 749B
    # read -2.6 Å) is no Balmer line weakened from the A maximum; it used to weigh +1 for B
    emitting = compact_star({**B2V, 4862.7: (-3.0, 9.0)})
    texts = [finding.text for finding in score_b(SpectrumView(emitting), get_task("B")).findings]
    assert not any("below the A-star Balmer maximum" in text for text in texts)
    absorbing = compact_star(B2V)
    texts = [finding.text for finding in score_b(SpectrumView(absorbing), get_task("B")).findings]
    assert any("below the A-star Balmer maximum" in text for text in texts)
