"""The O / B boundary of the rule-based inspector on hand-made R ~ 500 spectra (5 Å pixels, as
the Pickles library): He II 4687/5412 persist into B0, so only He II 4542 against He I 4471, the
MK criterion, may call a spectrum an O star. The B / A boundary on hand-made R ~ 2000 spectra
(0.9 Å pixels, as MILES): He I 4471 / Mg II 4481, read only where the lines are resolved."""

from __future__ import annotations

import math

import numpy as np

from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector, SpectrumView
from agent.policies.rule_based.hot_stars import (
    B0_RATIO,
    _ca_k,
    _mk_ratio,
    a_supergiant,
    b_a_ratio,
)
from agent.resolution import Resolution
from agent.spectra import Spectrum

LOW_RESOLUTION = Resolution((3000.0, 11000.0), (6.0, 22.0), source="user")
BALMER = {4102.9: 3.0, 4341.7: 3.0, 4862.7: 3.0, 6564.6: 2.5}
# vacuum Å: EW in Å. A B0 V star: He I strong, He II 4542 weak beside it, 4687/5412 still there
B0_LINES = {
    **BALMER,
    4027.3: 1.0,  # He I
    4389.2: 0.5,
    4472.7: 1.2,
    4923.3: 0.6,
    5877.3: 0.8,
    4482.4: 0.1,  # Mg II
    4201.0: 0.15,  # He II
    4542.9: 0.2,
    4687.0: 0.45,
    5413.0: 0.4,
    4553.9: 0.25,  # Si III
    4569.1: 0.15,
    4576.0: 0.1,
}
# an O9 V star: He II 4542 about half of He I 4471
O9_LINES = {
    **BALMER,
    4027.3: 0.7,
    4389.2: 0.3,
    4472.7: 0.9,
    4923.3: 0.35,
    5877.3: 0.5,
    4201.0: 0.35,
    4542.9: 0.45,
    4687.0: 0.6,
    5413.0: 0.7,
}


def hot_star(lines: dict[float, float], *, snr: float = 150.0, seed: int = 3) -> Spectrum:
    """A hot continuum (F ~ lambda^-3) with Gaussian absorption lines of FWHM 12 Å."""
    wave = np.arange(3650.0, 9300.0, 5.0)
    profile = np.zeros_like(wave)
    for centre, ew in lines.items():
        fwhm = 30.0 if centre in BALMER else 12.0
        sigma = fwhm / (2.0 * math.sqrt(2.0 * math.log(2.0)))
        profile += (
            ew * np.exp(-0.5 * ((wave - centre) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        )
    continuum = (wave / 5000.0) ** -3.0
    noise = continuum / snr
    flux = (
        continuum * (1.0 - profile)
        + np.random.default_rng(seed).normal(0.0, 1.0, wave.size) * noise
    )
    return Spectrum(wave, flux, ivar=noise**-2, survey="table", resolution=LOW_RESOLUTION)


def decide(spectrum: Spectrum, task: str) -> dict:
    inspector = RuleBasedInspector()
    decision = inspector.begin(spectrum=spectrum, task=get_task(task), use_tool=False).decision
    assert decision is not None
    return decision


def test_it_measures_he_i_4471_and_he_ii_4542_apart_from_their_blends_on_5_angstrom_pixels() -> (
    None
):
    mk = _mk_ratio(SpectrumView(hot_star(B0_LINES)))
    assert mk is not None
    assert mk.he1 == np.clip(mk.he1, 1.0, 1.4)  # not the 1.3 Å of He I 4471 + Mg II 4481
    assert mk.he2 == np.clip(mk.he2, 0.1, 0.3)  # nor the 0.45 Å of He II 4542 + Si III 4553
    assert mk.excess(B0_RATIO) < 1.0


def test_it_does_not_call_a_b0_star_with_he_ii_4687_and_5412_an_o_star() -> None:
    spectrum = hot_star(B0_LINES)
    o_answer = decide(spectrum, "O")
    assert o_answer["prediction"] == "NO", o_answer["evidence"]["findings"]
    assert decide(spectrum, "B")["prediction"] == "YES"


def test_it_calls_an_o9_star_with_he_ii_4542_half_of_he_i_4471_an_o_star() -> None:
    spectrum = hot_star(O9_LINES)
    assert decide(spectrum, "O")["prediction"] == "YES"
    assert decide(spectrum, "B")["prediction"] == "NO"


def test_it_stays_below_0_9_for_an_o_star_when_the_mk_ratio_cannot_be_measured() -> None:
    spectrum = hot_star(O9_LINES)
    spectrum.mask |= (spectrum.wavelength > 4440.0) & (spectrum.wavelength < 4610.0)
    answer = decide(spectrum, "O")
    texts = " ".join(f["text"] for f in answer["evidence"]["findings"])
    assert "not measurable" in texts
    assert answer["evidence"]["probability_yes"] < 0.9


FINE_RESOLUTION = Resolution((3000.0, 11000.0), (2.0, 2.0), source="user")


def fine_star(
    lines: dict[float, float],
    *,
    balmer: tuple[float, float] = (14.0, 20.0),
    resolution: Resolution = FINE_RESOLUTION,
    snr: float = 200.0,
    seed: int = 5,
) -> Spectrum:
    """An A-type continuum on 0.9 Å pixels: Balmer lines of (EW, FWHM) ``balmer`` in Å, metal
    and helium lines of 2.5 Å FWHM (a 2 Å line-spread function and some rotation)."""
    wave = np.arange(3650.0, 9300.0, 0.9)
    profile = np.zeros_like(wave)
    balmer_lines = {3971.2: 0.8, 4102.9: 1.0, 4341.7: 1.0, 4862.7: 1.0, 6564.6: 0.9}
    everything = [(c, balmer[0] * f, balmer[1]) for c, f in balmer_lines.items()]
    everything += [(c, ew, 2.5) for c, ew in lines.items()]
    for centre, ew, fwhm in everything:
        sigma = fwhm / (2.0 * math.sqrt(2.0 * math.log(2.0)))
        profile += (
            ew * np.exp(-0.5 * ((wave - centre) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        )
    continuum = (wave / 5000.0) ** -2.5
    noise = continuum / snr
    flux = (
        continuum * (1.0 - profile)
        + np.random.default_rng(seed).normal(0.0, 1.0, wave.size) * noise
    )
    return Spectrum(wave, flux, ivar=noise**-2, survey="table", resolution=resolution)


# vacuum Å: EW in Å. A B8 star: He I 4471 about as strong as Mg II 4481; an A0 star: Mg II only
B8_LINES = {4027.3: 0.3, 4472.7: 0.35, 4923.3: 0.2, 4482.4: 0.35, 3934.8: 0.3}
A0_LINES = {4472.7: 0.02, 4482.4: 0.35, 3934.8: 0.9}


def test_it_reads_he_i_4471_against_mg_ii_4481_ten_angstroms_apart() -> None:
    b8, _ = b_a_ratio(
        SpectrumView(fine_star(B8_LINES)), _mk_ratio(SpectrumView(fine_star(B8_LINES)))
    )
    a0_view = SpectrumView(fine_star(A0_LINES))
    a0, text = b_a_ratio(a0_view, _mk_ratio(a0_view))
    assert b8 is not None and a0 is not None
    assert b8 == np.clip(b8, 0.8, 1.25)
    assert a0 == np.clip(a0, -0.15, 0.2), text


def test_it_does_not_read_the_b_a_ratio_where_the_resolution_blends_the_two_lines() -> None:
    blurred = fine_star(B8_LINES, resolution=Resolution((3000.0, 11000.0), (9.0, 9.0), "user"))
    view = SpectrumView(blurred)
    ratio, text = b_a_ratio(view, _mk_ratio(view))
    assert ratio is None
    assert "blends them" in text


def test_it_counts_he_i_4471_as_strong_as_mg_ii_4481_against_an_a_star() -> None:
    """B8: He I 4471 = Mg II 4481. The old rule counted He I 4471 only where it exceeded Mg II
    4481 by 3 sigma (B7 and earlier) and said nothing here."""
    findings = decide(fine_star(B8_LINES), "A")["evidence"]["findings"]
    ratio = [f for f in findings if f["text"].startswith("He I 4471 / Mg II 4481")]
    assert ratio and ratio[0]["weight"] < -1.0, findings


def test_it_recognises_an_a0_supergiant_by_its_narrow_balmer_lines_and_mg_ii_without_he_i() -> None:
    """An A0 Ia: H-beta 5 Å at ~8 Å FWHM, Ca II K 0.8 Å (below the 1-3 Å of A2-A5 Ia, which
    the old rule required), Mg II 4481 0.45 Å and no He I 4471: an A star for A, not a B star
    for B."""
    spectrum = fine_star({4482.4: 0.45, 3934.8: 0.8, 4923.9: 0.3}, balmer=(5.0, 8.0))
    view = SpectrumView(spectrum)
    hb = view.line("H-beta", 4862.7, 40.0, [(4780.0, 4815.0), (4910.0, 4945.0)])
    assert a_supergiant(view, hb, _ca_k(view), _mk_ratio(view))
    b_answer = decide(spectrum, "B")
    assert any("an A supergiant" in f["text"] for f in b_answer["evidence"]["findings"])
    assert b_answer["evidence"]["rules_probability"] < 0.5


def test_it_keeps_a_b8_supergiant_with_he_i_4471_out_of_the_a_supergiants() -> None:
    """B8 Ib: the same narrow Balmer lines and weak K, but He I 4471 as strong as Mg II 4481."""
    spectrum = fine_star({**B8_LINES, 3934.8: 0.8}, balmer=(5.0, 8.0))
    view = SpectrumView(spectrum)
    hb = view.line("H-beta", 4862.7, 40.0, [(4780.0, 4815.0), (4910.0, 4945.0)])
    assert not a_supergiant(view, hb, _ca_k(view), _mk_ratio(view))
