"""agent/bench/real_fits.py's tier calibration: the combined answer's own calibration at a
coarse working resolution, fitted on the answers compared at that tier alone."""

from __future__ import annotations

import math
import random
from typing import Any

from agent.bench.real_fits import Scored, fit_tier_calibration, probability_yes
from agent.library_match import TaskEvidence

FITS: dict[str, dict[str, Any]] = {
    "B": {"platt": {"slope": 1.0, "intercept": 0.0}, "weights": [1.0, 1.0, 0.0],
          "ool": math.inf, "pull": 0.7},
}  # fmt: skip


def _answers(tier: float, right: float, n: int, seed: int) -> list[Scored]:
    """B answers at ``tier`` given at ~0.98 (rules and library agreeing), right a share
    ``right`` of the time."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        says_yes = i % 2 == 0
        sign = 1.0 if says_yes else -1.0
        found = TaskEvidence("B", sign * 2.0, None, None, 0.5, tier=tier)
        label = ("YES" if says_yes else "NO") if rng.random() < right else (
            "NO" if says_yes else "YES")  # fmt: skip
        rows.append(Scored("B", f"{tier:g}-{i}", label, sign * 2.0, evidence=found, compared=True))
    return rows


def test_it_fits_the_coarse_tier_on_the_answers_compared_there_alone() -> None:
    coarse = _answers(48.0, 0.75, 200, 1)
    fits = fit_tier_calibration([*coarse, *_answers(4.0, 1.0, 200, 2)], {}, {}, FITS)
    scaling = fits["B"]["tiers"]["48"]
    assert scaling["n"] == 200
    assert scaling["slope"] < 0.5  # 0.98 said, 0.75 right: softened
    before = probability_yes(coarse[0], {}, {}, FITS, "combined")
    after = probability_yes(coarse[0], {}, {}, fits, "combined")
    assert before is not None and after is not None
    assert before > 0.95 and 0.6 < after < 0.85
    native = _answers(4.0, 1.0, 1, 3)[0]
    assert probability_yes(native, {}, {}, fits, "combined") == probability_yes(
        native, {}, {}, FITS, "combined"
    )
    assert "tiers" not in FITS["B"]  # the fits given are not changed


def test_it_fits_nothing_without_both_classes_at_the_tier() -> None:
    fits = fit_tier_calibration(_answers(4.0, 0.75, 100, 4), {}, {}, FITS)
    assert "tiers" not in fits["B"]


def test_its_control_with_shuffled_tier_labels_learns_a_different_scaling() -> None:
    """The control that must fail: with tier labels shuffled among coarse answers and many
    native answers that are always right, the scaling no longer softens the coarse answers."""
    coarse = _answers(48.0, 0.75, 200, 5)
    native = _answers(4.0, 1.0, 800, 6)
    true = fit_tier_calibration(coarse, {}, {}, FITS)["B"]["tiers"]["48"]
    control = fit_tier_calibration(coarse, {}, {}, FITS, shuffle_from=native)["B"]["tiers"]["48"]
    assert control["n"] == true["n"] == 200
    assert control["slope"] > 2 * true["slope"]
