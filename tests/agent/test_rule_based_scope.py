"""What the rule-based inspector does not know (agent/policies/rule_based/scope.py): spectra of a
class no task describes and spectra without the windows a decision rests on are answered without
confidence, and the reason says why."""

from __future__ import annotations

import math

import numpy as np

from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector
from agent.resolution import Resolution
from agent.spectra import Spectrum

R2000 = Resolution((3000.0, 11000.0), (2.5, 4.5), source="user")


def spectrum(
    lines: dict[float, tuple[float, float]],
    *,
    slope: float = -3.0,
    gap: tuple[float, float] | None = None,
    snr: float = 80.0,
    seed: int = 5,
) -> Spectrum:
    """A power-law continuum with Gaussian lines {centre: (EW Å, > 0 absorption; FWHM Å)} on
    1 Å pixels, 3650-9300 Å, optionally without the pixels of ``gap``."""
    wave = np.arange(3650.0, 9300.0, 1.0)
    profile = np.zeros_like(wave)
    for centre, (ew, fwhm) in lines.items():
        sigma = fwhm / (2.0 * math.sqrt(2.0 * math.log(2.0)))
        profile += (
            ew * np.exp(-0.5 * ((wave - centre) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        )
    continuum = (wave / 5000.0) ** slope
    noise = continuum / snr
    flux = (
        continuum * (1.0 - profile)
        + np.random.default_rng(seed).normal(0.0, 1.0, wave.size) * noise
    )
    if gap is not None:
        keep = (wave < gap[0]) | (wave > gap[1])
        wave, flux, noise = wave[keep], flux[keep], noise[keep]
    return Spectrum(wave, flux, ivar=noise**-2, survey="table", resolution=R2000)


def decide(data: Spectrum, task: str) -> tuple[dict, str]:
    inspector = RuleBasedInspector(library=None)  # the rules' own notes, on spectra built here
    episode = inspector.begin(spectrum=data, task=get_task(task), use_tool=False)
    assert episode.decision is not None
    return episode.decision, episode.generate([{"role": "user", "content": "go"}])


def subjects(decision: dict) -> list[str]:
    return [note["subject"] for note in decision["evidence"]["scope"]]


# a WC star: broad He II 4686, C III 4650 and C IV 5808 in emission, no Balmer emission
WOLF_RAYET = {
    4686.0: (-30.0, 35.0),
    4650.0: (-25.0, 35.0),
    5808.0: (-60.0, 60.0),
    5696.0: (-10.0, 40.0),
}
# a dwarf nova: broad Balmer emission stronger than its He II 4686
DWARF_NOVA = {
    6564.6: (-70.0, 30.0),
    4862.7: (-35.0, 28.0),
    4341.7: (-20.0, 26.0),
    4102.9: (-12.0, 26.0),
    4686.0: (-8.0, 25.0),
    5877.3: (-6.0, 25.0),
}
BALMER_DWARF = {6564.6: (6.0, 30.0), 4862.7: (8.0, 30.0), 4341.7: (8.0, 30.0), 4102.9: (8.0, 30.0)}
HE_I = {4027.3: (0.8, 4.0), 4472.7: (1.0, 4.0), 4923.3: (0.5, 4.0), 5877.3: (0.7, 4.0)}


def test_it_says_a_wolf_rayet_star_is_outside_what_it_knows_instead_of_calling_it_a_cv() -> None:
    decision, answer = decide(spectrum(WOLF_RAYET), "CV")
    assert "a Wolf-Rayet star" in subjects(decision)
    assert decision["confidence"] < 0.9
    assert "outside what I know" in answer and "Wolf-Rayet" in answer


def test_it_keeps_a_dwarf_nova_in_scope_for_the_cv_task() -> None:
    decision, _ = decide(spectrum(DWARF_NOVA), "CV")
    assert "a Wolf-Rayet star" not in subjects(decision)
    assert decision["prediction"] == "YES"


def test_it_flags_a_be_star_for_the_b_task() -> None:
    be = {**BALMER_DWARF, **HE_I, 6564.6: (-25.0, 12.0)}
    decision, answer = decide(spectrum(be), "B")
    assert "a Be (emission-line) star" in subjects(decision)
    assert "H-alpha in emission" in answer
    plain, _ = decide(spectrum({**BALMER_DWARF, **HE_I}), "B")
    assert plain["evidence"]["scope"] == []


def test_it_flags_a_supergiant_by_its_narrow_balmer_lines() -> None:
    narrow = {6564.6: (1.5, 3.5), 4862.7: (2.5, 3.5), 4341.7: (2.5, 3.5), 4102.9: (2.5, 3.5)}
    decision, answer = decide(spectrum({**narrow, 3934.8: (0.3, 3.0)}), "A")
    assert "a supergiant" in subjects(decision)
    assert "supergiant" in answer
    dwarf, _ = decide(spectrum({**BALMER_DWARF, 3934.8: (1.0, 3.0)}), "A")
    assert "a supergiant" not in subjects(dwarf)


def test_it_names_the_missing_tio_windows_and_answers_without_confidence() -> None:
    """The M3 III of issue 23 had a gap over 4752-7851 Å and was answered NO at 0.97."""
    cool = {5168.4: (3.0, 40.0), 8542.1: (3.0, 4.0), 8662.1: (2.5, 4.0)}
    decision, answer = decide(spectrum(cool, slope=3.0, gap=(4752.0, 7851.0)), "MG")
    notes = decision["evidence"]["scope"]
    assert [note["kind"] for note in notes] == ["coverage"]
    assert "TiO 7056" in notes[0]["text"] and "not covered" in notes[0]["text"]
    assert decision["confidence"] < 0.9
    assert "not decidable from these data" in answer


def rebinned(data: Spectrum, pixels: int) -> Spectrum:
    """``data`` averaged over ``pixels`` adjacent pixels: the same star on a coarser grid."""
    size = data.wavelength.size // pixels * pixels
    wave = data.wavelength[:size].reshape(-1, pixels).mean(axis=1)
    flux = data.flux[:size].reshape(-1, pixels).mean(axis=1)
    assert data.ivar is not None
    ivar = data.ivar[:size].reshape(-1, pixels).sum(axis=1)
    return Spectrum(wave, flux, ivar=ivar, survey="table", resolution=R2000)


def test_it_counts_a_window_sampled_too_coarsely_as_missing() -> None:
    """He I lines ~4-8 Å wide on 5 Å pixels (the Pickles grid) and 10 Å pixels (BPGS) cannot be
    read; v2 answered such B stars at score 0 without saying why (issue 23)."""
    b_star = spectrum({**BALMER_DWARF, **HE_I})
    fine, _ = decide(b_star, "B")
    assert fine["evidence"]["scope"] == []
    for pixels in (5, 10):
        decision, answer = decide(rebinned(b_star, pixels), "B")
        notes = decision["evidence"]["scope"]
        assert [note["kind"] for note in notes] == ["coverage"], pixels
        assert "He I 4471 sampled too coarsely" in notes[0]["text"]
        assert f"pixel {pixels:.1f} Å" in notes[0]["text"]
        assert decision["confidence"] < 0.9
        assert "sampled too coarsely" in answer


def test_it_calls_a_window_too_noisy_when_its_snr_is_below_the_limit() -> None:
    decision, _ = decide(spectrum(BALMER_DWARF, snr=2.0), "A")
    texts = " ".join(note["text"] for note in decision["evidence"]["scope"])
    assert "too noisy" in texts


def test_it_knows_a_wc_star_by_its_c_iv_5808_when_the_blue_end_is_lost() -> None:
    """STELIB's HD 37680 (WC) has no good pixels below ~5000 Å; it was called a CV at 0.95."""
    red_only = spectrum({5808.0: (-300.0, 60.0), 6564.6: (-40.0, 60.0)}, gap=(3640.0, 5300.0))
    decision, _ = decide(red_only, "CV")
    assert "a Wolf-Rayet star" in subjects(decision)
    assert decision["confidence"] < 0.9


def test_it_does_not_decide_a_cv_from_h_alpha_alone() -> None:
    """H-alpha emission without H-beta or He II 4687 fits a CV, a Be star or a WN star alike."""
    red_only = spectrum({6564.6: (-60.0, 30.0), 5877.3: (-6.0, 25.0)}, gap=(3640.0, 5300.0))
    decision, answer = decide(red_only, "CV")
    kinds = [note["kind"] for note in decision["evidence"]["scope"]]
    assert "coverage" in kinds
    assert decision["confidence"] < 0.9
    assert "H-beta" in answer and "not covered" in answer


def test_it_gives_the_real_pixel_width_of_a_window_narrower_than_one_pixel() -> None:
    """On 50 Å pixels (the KPNO and Hamuy tables) the 35 Å Ca II K window holds one pixel: the
    note said "pixel inf Å" where the pixel is 50 Å wide."""
    a_star = spectrum({**BALMER_DWARF, 3934.8: (1.0, 3.0)})
    decision, _ = decide(rebinned(a_star, 50), "A")
    texts = " ".join(note["text"] for note in decision["evidence"]["scope"])
    assert "Ca II K sampled too coarsely (pixel 50.0 Å" in texts
    assert "inf" not in texts
    assert decision["confidence"] < 0.9


def test_it_reads_tio_troughs_on_16_angstrom_pixels_but_not_on_50() -> None:
    """An M star's TiO depression runs ~75 Å redward of the head: 16 Å pixels (Hamuy) see it,
    so the MG answer is not pulled for 'sampled too coarsely'; 50 Å pixels do not."""
    m_giant = spectrum({7080.0: (30.0, 60.0), 6185.0: (20.0, 50.0), 8542.1: (3.0, 4.0)}, slope=3.0)
    coarse, _ = decide(rebinned(m_giant, 16), "MG")
    assert not any("TiO" in s for s in subjects(coarse))
    coarser, _ = decide(rebinned(m_giant, 50), "MG")
    texts = " ".join(note["text"] for note in coarser["evidence"]["scope"])
    assert "TiO 7056 sampled too coarsely (pixel 50.0 Å" in texts


def test_it_takes_no_featureless_continuum_on_50_angstrom_pixels_for_a_white_dwarf() -> None:
    """O stars in the KPNO 50 Å tables were answered WD YES at 0.74 from 'no line beyond 4σ':
    lines a few Å wide cannot show on 50 Å pixels, so their absence is no evidence."""
    hot = spectrum({4862.7: (2.5, 8.0), 4341.7: (2.5, 8.0), 4102.9: (2.5, 8.0)}, snr=60.0)
    decision, _ = decide(rebinned(hot, 50), "WD")
    assert decision["prediction"] == "NO"
    featureless = [f for f in decision["evidence"]["findings"] if "featureless" in f["text"]]
    assert featureless and featureless[0]["weight"] == 0.0
    assert "no evidence of a DC white dwarf" in featureless[0]["text"]


def test_it_keeps_the_largest_pull_a_fit_can_choose_below_confidence_0_9() -> None:
    """Every development fit sat at the limit, so the limit is a choice with a bound: a noted
    answer at P(YES) 1 must stay below 0.9, and the fits must be able to reach the limit."""
    from agent.policies.rule_based.inspector import pulled
    from agent.policies.rule_based.scope import MAX_PULL, PULL_GRID

    assert pulled(1.0, MAX_PULL) < 0.9
    assert pulled(1.0, 0.95) < 0.9  # a stored pull above the limit is clipped
    assert max(PULL_GRID) == MAX_PULL and min(PULL_GRID) == 0.0
