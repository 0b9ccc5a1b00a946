"""The rule-based inspector: measures a spectrum's arrays and reasons in the Spec-o3 format.

It is the demo's default policy and the draft generator when no LLM is configured. It works
only from what any policy may see: the spectrum's arrays (wavelength, flux, ivar, mask,
redshift) and the task definition. It never reads labels, subtypes or generator internals.

How an episode goes:

1. ``begin`` measures everything once, in the rest frame: Balmer/He/metal lines (equivalent
   width, FWHM, significance against ``ivar``), molecular band depths at their heads with the
   right shading, and the continuum colour. A scorer turns the measurements into *findings*,
   each a sentence with numbers and a signed weight in log-odds; the sum plus a prior bias is
   the score, and ``P(YES) = logistic(score)``.
2. The windows of the task definition are ranked by how much evidence they carry (the summed
   absolute weights of their findings). Those inside the spectrum's coverage that carry
   evidence are planned for inspection, strongest first, at least two and at most
   ``max_tool_calls`` (and ``max_windows``).
3. ``generate`` writes one turn per planned window: a ``<think>`` citing the numbers measured
   in the window just shown (and what the tool said about it), then the next ``<tool_call>``.
   The last turn weighs the evidence for and against, names the contaminant the evidence
   points to, and answers ``\\boxed{YES}`` or ``\\boxed{NO}`` with a justification.

Scorers are keyed by task code (CV, CS, SS, MG, WD, O, B, A); a task added by an expert
without code gets the GENERIC scorer, which reads the window kinds: emission windows reward
significant emission, absorption windows significant absorption, band windows band depth.
"""

from __future__ import annotations

from agent.policies.rule_based.emission import score_cv
from agent.policies.rule_based.findings import Assessment, Finding, Scorer, window_for
from agent.policies.rule_based.generic import GENERIC, SCORERS, score_generic, scorer_for
from agent.policies.rule_based.hot_stars import HE_I_LINES, HE_II_LINES, score_a, score_b, score_o
from agent.policies.rule_based.inspector import (
    PlannedWindow,
    RuleBasedEpisode,
    RuleBasedInspector,
    default_calibration,
)
from agent.policies.rule_based.molecular import (
    SWAN_HEADS,
    SWAN_RED_HEAD,
    ZRO_HEADS,
    score_cs,
    score_mg,
    score_ss,
)
from agent.policies.rule_based.view import (
    BLUE_BAND,
    BOXCAR_SIGMA_FWHM,
    CALIBRATION_PATH,
    COVERED_FRACTION,
    DICHROIC,
    LAMOST_PIXEL_DEX,
    MIN_PLANNED,
    MIN_WEIGHT,
    MODEL_NAME,
    POLICY_KIND,
    RED_BAND,
    SKY_LINES,
    SNR_BAND,
    STRONG,
    SpectrumView,
)
from agent.policies.rule_based.white_dwarfs import score_wd

__all__ = [
    "Assessment",
    "BLUE_BAND",
    "BOXCAR_SIGMA_FWHM",
    "CALIBRATION_PATH",
    "COVERED_FRACTION",
    "DICHROIC",
    "Finding",
    "GENERIC",
    "HE_II_LINES",
    "HE_I_LINES",
    "LAMOST_PIXEL_DEX",
    "MIN_PLANNED",
    "MIN_WEIGHT",
    "MODEL_NAME",
    "POLICY_KIND",
    "PlannedWindow",
    "RED_BAND",
    "RuleBasedEpisode",
    "RuleBasedInspector",
    "SCORERS",
    "SKY_LINES",
    "SNR_BAND",
    "STRONG",
    "SWAN_HEADS",
    "SWAN_RED_HEAD",
    "Scorer",
    "SpectrumView",
    "ZRO_HEADS",
    "default_calibration",
    "score_a",
    "score_b",
    "score_cs",
    "score_cv",
    "score_generic",
    "score_mg",
    "score_o",
    "score_ss",
    "score_wd",
    "scorer_for",
    "window_for",
]
