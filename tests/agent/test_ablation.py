"""Evidence ablation per verdict (agent.ablation): windows, the ablated spectrum, the control, and
re-runs with the rule-based inspector and with model-like policies that see only the messages."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agent.ablation import (
    CITED_HALF_WIDTH,
    AblationSummary,
    ablate_spectrum,
    ablate_verdict,
    cited_windows,
    control_windows,
    evidence_windows,
    merge_windows,
)
from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector
from agent.render import GREY_LEVELS
from agent.rollout import inspect
from agent.spectra import Spectrum
from agent.synthetic import generate_sample

CV = get_task("CV")
H_ALPHA_ZOOM = (6480.0, 6650.0)


def drawn(subtype: str, *, label: bool, seed: int = 1) -> Spectrum:
    rng = np.random.default_rng(seed)
    return generate_sample("CV", label, rng=rng, subtype=subtype, snr=40.0).spectrum


def flat_with_line(*, ivar: bool = True, sigma: float = 0.05) -> Spectrum:
    """A flat continuum at 1 with Gaussian noise and a strong emission line at 6564.6 Å."""
    rng = np.random.default_rng(0)
    wavelength = np.arange(4000.0, 8000.0, 1.0)
    flux = 1.0 + sigma * rng.standard_normal(wavelength.size)
    flux += 3.0 * np.exp(-0.5 * ((wavelength - 6564.6) / 6.0) ** 2)
    inverse = np.full(wavelength.size, 1.0 / sigma**2) if ivar else None
    return Spectrum(wavelength=wavelength, flux=flux, ivar=inverse, object_id="flat")


# --- windows ------------------------------------------------------------------------------------


def test_it_parses_the_lines_a_justification_cites() -> None:
    text = (
        "Broad Hα (FWHM 1515 km/s, EW -42.0 Å) and He II 4686 in emission; the window "
        "4820-4905 Å shows H-beta too; TiO 7054 is absent."
    )
    windows = {(w.lo, w.hi): w.name for w in cited_windows(text)}
    assert (4820.0, 4905.0) in windows  # an explicit range
    assert (6564.6 - CITED_HALF_WIDTH, 6564.6 + CITED_HALF_WIDTH) in windows  # a named line
    assert (4686 - CITED_HALF_WIDTH, 4686 + CITED_HALF_WIDTH) in windows  # ion + number
    assert (7054 - CITED_HALF_WIDTH, 7054 + CITED_HALF_WIDTH) in windows  # band + number
    # km/s and an equivalent width in Å are not wavelengths
    assert all(not (1400 < lo < 1600) and not (0 < lo < 100) for lo, _ in windows)


def test_it_gives_a_cited_line_the_task_window_that_holds_it() -> None:
    windows = cited_windows("H-alpha is strong; He I 5876 too.", task=CV)
    ranges = {(w.lo, w.hi) for w in windows}
    assert (6500.0, 6630.0) in ranges  # the task's H-alpha window, by name
    assert (5830.0, 5930.0) in ranges  # the task's He I 5876 window, by name


def test_it_takes_the_ranges_shown_by_zooms_but_not_the_full_view_again() -> None:
    spectrum = flat_with_line()
    policy = _Scripted([_call(*H_ALPHA_ZOOM, "H-alpha"), _call(4000, 8000, "all"), _answer("")])
    trajectory = inspect(spectrum, CV, policy)
    windows = evidence_windows(trajectory, task=CV, coverage=(4000.0, 7999.0))
    assert [(w.lo, w.hi, w.source, w.name) for w in windows] == [
        (6480.0, 6650.0, "zoom", "H-alpha")
    ]


def test_it_merges_overlapping_windows_within_the_coverage() -> None:
    merged = merge_windows([(6600, 6700), (6500, 6650), (100, 200), (7900, 8100)], (4000, 8000))
    assert merged == [(6500, 6700), (7900, 8000)]


# --- the ablated spectrum -----------------------------------------------------------------------


def test_it_replaces_the_window_by_the_continuum_and_leaves_the_rest_alone() -> None:
    spectrum = flat_with_line()
    ablated = ablate_spectrum(spectrum, [(6500.0, 6630.0)], seed=3)
    inside = (spectrum.wavelength >= 6500) & (spectrum.wavelength <= 6630)
    assert spectrum.flux[inside].max() > 3.5  # the line was there
    assert abs(float(np.median(ablated.flux[inside])) - 1.0) < 0.02  # the continuum now
    assert ablated.flux[inside].max() < 1.3
    assert np.array_equal(ablated.flux[~inside], spectrum.flux[~inside])
    assert ablated.ivar is not None and spectrum.ivar is not None
    assert np.array_equal(ablated.ivar, spectrum.ivar)
    assert spectrum.flux[inside].max() > 3.5  # the original is untouched


@pytest.mark.parametrize("ivar", [True, False])
def test_it_keeps_the_noise_level_honest(ivar: bool) -> None:
    spectrum = flat_with_line(ivar=ivar, sigma=0.05)
    ablated = ablate_spectrum(spectrum, [(6300.0, 6800.0)], seed=5)
    inside = (spectrum.wavelength >= 6300) & (spectrum.wavelength <= 6800)
    scatter = float(np.std(ablated.flux[inside]))
    assert 0.04 < scatter < 0.06, scatter  # neither a noiseless line nor inflated noise


def test_it_ablates_the_same_way_for_the_same_seed_only() -> None:
    spectrum = flat_with_line()
    first = ablate_spectrum(spectrum, [(6500.0, 6630.0)], seed=11)
    again = ablate_spectrum(spectrum, [(6500.0, 6630.0)], seed=11)
    other = ablate_spectrum(spectrum, [(6500.0, 6630.0)], seed=12)
    assert first.digest() == again.digest() != other.digest()


def test_it_ablates_in_the_rest_frame_of_a_redshifted_spectrum() -> None:
    rest = flat_with_line()
    shifted = Spectrum(
        wavelength=rest.wavelength * 1.1, flux=rest.flux, ivar=rest.ivar, redshift=0.1
    )
    ablated = ablate_spectrum(shifted, [(6500.0, 6630.0)], seed=3)
    inside = (shifted.rest_wavelength >= 6500) & (shifted.rest_wavelength <= 6630)
    assert ablated.flux[inside].max() < 1.3


def test_it_places_control_windows_of_the_same_widths_clear_of_the_evidence() -> None:
    evidence = [(6500.0, 6630.0), (4820.0, 4905.0)]
    control = control_windows(evidence, (4000.0, 8000.0), seed=2)
    assert sorted(round(hi - lo, 6) for lo, hi in control) == [85.0, 130.0]
    for lo, hi in control:
        assert 4000.0 <= lo < hi <= 8000.0
        assert all(hi <= a or lo >= b for a, b in evidence)
    assert control == control_windows(evidence, (4000.0, 8000.0), seed=2)
    assert control != control_windows(evidence, (4000.0, 8000.0), seed=3)


# --- re-running the rule-based inspector --------------------------------------------------------


def test_it_flips_a_cv_whose_lines_are_masked_and_not_with_random_windows() -> None:
    spectrum = drawn("cv_dwarf_nova", label=True)
    policy = RuleBasedInspector()
    trajectory = inspect(spectrum, CV, policy)
    result = ablate_verdict(spectrum, CV, trajectory, lambda: policy, seed=7)
    assert result.before is not None
    assert result.stored.prediction == result.before.prediction == "YES"
    assert result.after is not None and result.after.prediction == "NO"
    assert result.flipped and not result.insensitive and result.outcome == "flips"
    assert result.control_outcome is not None and not result.control_flipped
    assert any(w.name == "H-alpha" for w in result.windows)


def test_it_gives_the_same_result_for_the_same_seed() -> None:
    spectrum = drawn("be_star", label=False, seed=2)
    policy = RuleBasedInspector()
    trajectory = inspect(spectrum, CV, policy)
    first = ablate_verdict(spectrum, CV, trajectory, lambda: policy, seed=21).as_dict()
    again = ablate_verdict(spectrum, CV, trajectory, lambda: RuleBasedInspector(), seed=21)
    assert json.dumps(first, sort_keys=True) == json.dumps(again.as_dict(), sort_keys=True)


def test_it_says_when_there_is_no_evidence_to_mask() -> None:
    spectrum = flat_with_line()
    trajectory = inspect(spectrum, CV, _Scripted([_answer("it is blue")]))
    result = ablate_verdict(spectrum, CV, trajectory, lambda: _Scripted([]), seed=1)
    assert not result.ran and result.outcome == "no evidence" and result.reason


# --- model policies: only the messages ----------------------------------------------------------


class _Scripted:
    name = "scripted"

    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)

    def info(self) -> dict[str, Any]:
        return {"name": self.name}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.turns.pop(0) if self.turns else _answer("H-alpha")


class ImageReadingPolicy:
    """A model stand-in: it sees only the conversation, zooms into H-alpha and answers YES when
    the curve's median sits low in the plot (a line above it set the y range)."""

    name = "image-reader"

    def info(self) -> dict[str, Any]:
        return {"name": self.name}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        images = [
            part["png"] for message in messages for part in message["content"]
            if part["type"] == "image"
        ]  # fmt: skip
        if len(images) < 2:
            return _call(*H_ALPHA_ZOOM, "H-alpha")
        pixels = np.asarray(Image.open(io.BytesIO(images[-1])))
        rows, columns = np.nonzero(pixels >= GREY_LEVELS)  # the data line's palette entries
        per_column = [rows[columns == c].mean() for c in np.unique(columns)]
        low = (np.median(per_column) - rows.min()) / (rows.max() - rows.min())
        return _answer("Strong H-alpha emission." if low > 0.8 else "No H-alpha line.", low > 0.8)


class SeededGuesser:
    """A sampling model stand-in: answers from its own RNG stream, seeded when built; it cites
    H-alpha whatever it saw (an answer that does not rest on its evidence)."""

    name = "seeded-guesser"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def info(self) -> dict[str, Any]:
        return {"name": self.name}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return _answer("H-alpha settles it.", bool(self.rng.random() < 0.5))


def test_it_runs_a_model_policy_through_the_messages_alone() -> None:
    spectrum = drawn("cv_dwarf_nova", label=True)
    trajectory = inspect(spectrum, CV, ImageReadingPolicy())
    assert trajectory.answer is not None and trajectory.answer.prediction == "YES"
    result = ablate_verdict(spectrum, CV, trajectory, ImageReadingPolicy, seed=4)
    assert result.before is not None and result.before.confidence is None  # states none
    assert result.after is not None and result.after.prediction == "NO"
    assert result.flipped and result.control_outcome is not None and not result.control_flipped
    assert result.decisive == [(6480.0, 6650.0)]


def test_it_flags_an_answer_that_ignores_its_evidence_and_reproduces_with_a_seeded_sampler() -> (
    None
):
    spectrum = drawn("cv_dwarf_nova", label=True)
    trajectory = inspect(spectrum, CV, SeededGuesser(5))
    first = ablate_verdict(spectrum, CV, trajectory, lambda: SeededGuesser(5), seed=9)
    again = ablate_verdict(spectrum, CV, trajectory, lambda: SeededGuesser(5), seed=9)
    assert first.as_dict() == again.as_dict()
    assert first.insensitive and first.outcome == "insensitive"  # same stream, same answer


def test_it_counts_own_and_control_flips_apart() -> None:
    spectrum = drawn("cv_dwarf_nova", label=True)
    policy = RuleBasedInspector()
    summary = AblationSummary()
    trajectory = inspect(spectrum, CV, policy)
    summary.add(ablate_verdict(spectrum, CV, trajectory, lambda: policy, seed=1, confident_at=0.5))
    empty = inspect(flat_with_line(), CV, _Scripted([_answer("blue")]))
    summary.add(ablate_verdict(flat_with_line(), CV, empty, lambda: policy, seed=1))
    figures = summary.as_dict()
    assert (figures["n"], figures["flipped"], figures["control_flipped"]) == (1, 1, 0)
    assert figures["no_evidence"] == 1 and figures["confident_survival_rate"] == 0.0


def _call(lo: float, hi: float, label: str) -> str:
    arguments = {"wavelength_range": [lo, hi], "label": label}
    payload = json.dumps({"name": "spectral_visualization_tool", "arguments": arguments})
    return f"<think>look at {label}</think><tool_call>{payload}</tool_call>"


def _answer(justification: str, yes: bool = True) -> str:
    box = "YES" if yes else "NO"
    return f"<think>weighing</think><answer>\\boxed{{{box}}} {justification}</answer>"
