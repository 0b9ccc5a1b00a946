"""The O / B boundary of the rule-based inspector on hand-made R ~ 500 spectra (5 Å pixels, as
the Pickles library): He II 4687/5412 persist into B0, so only He II 4542 against He I 4471, the
MK criterion, may call a spectrum an O star."""

from __future__ import annotations

import math

import numpy as np

from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector, SpectrumView
from agent.policies.rule_based.hot_stars import B0_RATIO, _mk_ratio
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
