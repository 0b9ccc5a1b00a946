"""The rules combined with the data-driven comparison with real library spectra
(``agent.library_match``), and every reason the combined answer cannot be confident.

One documented way, fitted on the development part only (``python -m agent.bench.real
calibrate`` writes ``LIBRARY_CALIBRATION_PATH``):

- the library's evidence s = D(nearest negative) - D(nearest positive) becomes
  P_lib = logistic(slope s + intercept) (Platt), fitted with each development object left out
  of its own library;
- where the library decides the task (``agent.library_match.DECIDABLE``) and the spectrum could
  be compared, logit P = a logit(P_rules) + (1 - a) logit(P_lib) + c, a logarithmic opinion
  pool whose a and c are fitted on the development answers (``fit_weights``); elsewhere P = P_rules;
- then every reason not to be confident is a scope note, and an answer with any note is pulled
  towards 0.5 by the task's fitted pull (at most ``MAX_PULL``, so it stays below 0.9):

  * the rules' own notes (outside what they know, decisive windows missing or too noisy);
  * **evidence missing**: a finding of the scorer says the feature its decision rests on could
    not be measured ("not covered", "not measurable");
  * **disagreement**: the rules and the library on opposite sides of 0.5;
  * **out of library**: the spectrum is farther from every library spectrum labelled for the
    task than the development spectra ever are from theirs (the task's ``ool`` distance: the
    largest development nearest-distance after dropping the top ``OOL_QUANTILE``);
  * **resolution**: the spectrum is too coarse (or too short) for any working resolution of
    the library, for a task only the library can check;
  * for a task the library cannot decide (CV, WD, CS, SS: no or too few library positives) a
    YES on a spectrum the library explains as one of its negatives, or a NO on a spectrum
    outside the library.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from agent.library_match import DECIDABLE, TIERS, TaskEvidence
from agent.policies.rule_based.findings import Assessment
from agent.policies.rule_based.scope import COVERAGE, MAX_PULL, PULL_GRID, ScopeNote

LIBRARY_CALIBRATION_PATH = Path(__file__).resolve().parents[2] / "data" / "library_calibration.json"
LIBRARY = "library"
OOL_QUANTILE = 0.02  # share of development spectra allowed beyond the out-of-library distance
DEFAULT_COMBINED_PULL = 0.5
_MISSING = ("not covered", "not measurable", "cannot be measured")


@dataclass(frozen=True)
class Combined:
    probability: float  # before the pull of the notes
    rules_probability: float
    library_probability: float | None
    notes: tuple[ScopeNote, ...]  # the rules' notes and the library's
    pull: float


@cache
def default_library_fits() -> dict[str, dict[str, Any]]:
    """Per task: ``platt`` (slope, intercept), ``weights`` (rules, library, intercept),
    ``ool`` (distance) and ``pull``; empty when the file is absent."""
    if not LIBRARY_CALIBRATION_PATH.exists():
        return {}
    data = json.loads(LIBRARY_CALIBRATION_PATH.read_text(encoding="utf-8"))
    return {task: dict(fit) for task, fit in data["tasks"].items()}


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1.0 - 1e-6)
    return math.log(p / (1.0 - p))


def _logistic(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


def pulled(probability: float, pull: float) -> float:
    return 0.5 + min(max(pull, 0.0), MAX_PULL) * (probability - 0.5)


def missing_evidence(assessment: Assessment) -> ScopeNote | None:
    """A coverage note when a finding of the scorer says what it needed could not be measured:
    an answer resting on absent evidence is never confident."""
    missing = [
        f.text
        for f in assessment.findings
        if f.weight != 0.0 and any(word in f.text for word in _MISSING)
    ]
    if not missing:
        return None
    return ScopeNote(
        COVERAGE,
        "; ".join(missing),
        "the evidence this answer would rest on is absent: " + "; ".join(missing),
    )


def library_probability(task: str, evidence: TaskEvidence | None, fit: Mapping[str, Any]) -> float:
    """P(YES) from the library alone; nan when it cannot decide ``task`` here."""
    if evidence is None or task not in DECIDABLE or not math.isfinite(evidence.score):
        return math.nan
    platt = fit.get("platt")
    if not platt:
        return _logistic(evidence.score)
    return _logistic(float(platt["slope"]) * evidence.score + float(platt["intercept"]))


def combine(
    task: str,
    rules_probability: float,
    rules_notes: Sequence[ScopeNote],
    evidence: TaskEvidence | None,
    *,
    library_present: bool,
    fits: Mapping[str, Mapping[str, Any]],
    rules_pull: float,
    task_name: str = "",
) -> Combined:
    """The combined P(YES), its notes and the pull (module docstring). ``evidence`` is None
    when the spectrum could not be compared; ``library_present`` False when there is no
    library here at all (the real-data cache absent): then the rules answer alone."""
    task = task.upper()
    notes = list(rules_notes)
    fit = fits.get(task, {})
    if not library_present or not fit:
        return Combined(
            rules_probability, rules_probability, None, tuple(notes), rules_pull if notes else 1.0
        )
    p_lib = library_probability(task, evidence, fit)
    probability = rules_probability
    name = task_name or task
    if task in DECIDABLE and evidence is None:
        notes.append(
            ScopeNote(
                LIBRARY,
                "no comparison with real spectra",
                "the spectrum is coarser than the library's coarsest working resolution "
                f"({TIERS[-1]:g} Å FWHM) or covers too little of 3650-9300 Å to compare with "
                "real spectra "
                f"of known type, which this {name} decision needs",
            )
        )
    combiner = fit.get("combiner")
    form = str(combiner["form"]) if combiner else ""
    vote = math.nan if evidence is None else evidence_vote(evidence, form)
    if combiner and evidence is not None and math.isfinite(vote):
        # the neighbour combiner (``combiner_features``): the vote of the nearest library
        # spectra (over the MK region for the "mk" form) stands for the library's probability
        p_lib = min(max(vote, VOTE_CLIP), 1.0 - VOTE_CLIP)
        features = combiner_features(task, rules_probability, evidence, form)
        probability = _logistic(float(np.dot(combiner["weights"], features)))
    elif math.isfinite(p_lib):
        w_rules, w_lib, intercept = fit.get("weights", (1.0, 1.0, 0.0))
        probability = _logistic(
            float(w_rules) * _logit(rules_probability) + float(w_lib) * _logit(p_lib) + intercept
        )
    if math.isfinite(p_lib) and (rules_probability - 0.5) * (p_lib - 0.5) < 0:
        notes.append(
            ScopeNote(
                LIBRARY,
                "the rules and the real spectra disagree",
                f"the rules give P(YES) {rules_probability:.2f} but comparison with real "
                f"library spectra gives {p_lib:.2f}",
            )
        )
    ool = float(fit.get("ool", math.inf))
    if evidence is not None and evidence.nearest_distance > ool:
        notes.append(
            ScopeNote(
                LIBRARY,
                "out of the library",
                f"the nearest real library spectrum is at distance "
                f"{evidence.nearest_distance:.2f}, beyond {ool:.2f}, farther than development "
                "spectra are from theirs: a kind of spectrum the library does not hold",
            )
        )
    elif evidence is not None and task not in DECIDABLE and rules_probability >= 0.5:
        negative = evidence.nearest_negative
        positive = evidence.nearest_positive
        if negative is not None and (
            positive is None or negative["distance"] < positive["distance"]
        ):
            notes.append(
                ScopeNote(
                    LIBRARY,
                    f"a {negative['type']} star of the library",
                    f"the library explains the spectrum as {negative['id']} "
                    f"({negative['type']}, distance {negative['distance']:.2f}), which is not "
                    f"a {name}",
                )
            )
    pull = float(fit.get("pull", DEFAULT_COMBINED_PULL)) if notes else 1.0
    return Combined(
        probability, rules_probability, None if math.isnan(p_lib) else p_lib, tuple(notes), pull
    )


# --- the neighbour combiners (versions of their own: rule-based/v5-knn, rule-based/v6) --------

VOTE_CLIP = 0.02  # the vote of 5 neighbours is never taken as certainty
# the spectral-type numbers (``agent.library_match.type_number``) between which a task's class
# lies: its boundaries are where one nearest spectrum decides least
BOUNDARIES = {"O": (-math.inf, 9.5), "B": (9.5, 19.5), "A": (19.5, 29.5)}
BOUNDARY_SPAN = 3.0  # subtypes from a boundary beyond which the answer counts as clear of it
DISTANCE_SPAN = 3.0  # nearest distance at which the distance term saturates
COMBINER_FORMS = {
    # logit P = w . features; "pool": a free logarithmic pool of the two parts; "boundary": the
    # two parts' log-odds shrunk near the class boundary of the neighbours' type, plus their
    # log-odds times the (saturated) distance to the nearest library spectrum
    "pool": "logit P_rules, logit vote, 1",
    "boundary": "logit P_rules h', logit vote h', logit P_rules q, logit vote q, 1 with "
    "h' = 0.3 + 0.7 min(|m|, 3)/3, m the neighbours' type number's distance inside the "
    "class's boundaries (negative outside), q = min(D_nearest, 3)/3",
    # rule-based/v6: the template fit over the MK classification region (3800-4600 Å), where
    # the B9/A0 and A9/F0 boundaries are drawn
    "mk": "logit P_rules, logit vote_MK, clip(chi2_MK, -5, 5), 1 with vote_MK the vote of the "
    "5 nearest library spectra over 3800-4600 Å and chi2_MK the best other MK letter's D^2 "
    "minus the task letter's best D^2 there",
    # rule-based/v7: the spectral type estimated by regression over 3800-5000 Å
    # (``agent.type_regression``), its Gaussian posterior integrated over the task's range
    "type": "logit P_rules, logit P_type, 1 with P_type = P(t in the task's range) under "
    "N(t_hat, sigma(t_hat)) of the type regression",
    "type+mk": "logit P_rules, logit P_type, logit vote_MK, clip(chi2_MK, -5, 5), 1: v6's "
    "features and the type regression's",
}
MK_FORM = "mk"
TYPE_FORM = "type"
TYPE_FORMS = (TYPE_FORM, "type+mk")
MK_CHI2_CLIP = 5.0  # D^2 differences beyond this (per pixel) add nothing on the development part


def uses_mk_region(fits: Mapping[str, Mapping[str, Any]], task: str) -> bool:
    """Whether ``task``'s fitted combination reads the MK-region template fit (v6)."""
    combiner = fits.get(task.upper(), {}).get("combiner") or {}
    return combiner.get("form") in (MK_FORM, "type+mk")


def uses_type_regression(fits: Mapping[str, Mapping[str, Any]], task: str) -> bool:
    """Whether ``task``'s fitted combination reads the spectral-type regression (v7)."""
    combiner = fits.get(task.upper(), {}).get("combiner") or {}
    return combiner.get("form") in TYPE_FORMS


def evidence_vote(evidence: TaskEvidence, form: str) -> float:
    """The neighbour vote a combiner form reads: over the MK region for "mk", the type
    regression's P(task) for "type", else the vote over the whole range."""
    if form == TYPE_FORM or (form in TYPE_FORMS and math.isfinite(evidence.mk_vote)):
        return evidence.type_probability
    if form in TYPE_FORMS:
        return math.nan  # "type+mk" where the MK region was not compared
    return evidence.mk_vote if form == MK_FORM else evidence.vote


def combiner_features(
    task: str, rules_probability: float, evidence: TaskEvidence, form: str
) -> list[float]:
    """The features of the neighbour combiner (``COMBINER_FORMS``)."""
    rules = _logit(rules_probability)
    vote = _logit(min(max(evidence.vote, VOTE_CLIP), 1.0 - VOTE_CLIP))
    if form == "pool":
        return [rules, vote, 1.0]
    if form in TYPE_FORMS:
        typed = _logit(min(max(evidence.type_probability, VOTE_CLIP), 1.0 - VOTE_CLIP))
        if form == TYPE_FORM:
            return [rules, typed, 1.0]
        return [rules, typed, *combiner_features(task, rules_probability, evidence, MK_FORM)[1:]]
    if form == MK_FORM:
        mk_vote = _logit(min(max(evidence.mk_vote, VOTE_CLIP), 1.0 - VOTE_CLIP))
        chi2 = min(max(evidence.mk_chi2, -MK_CHI2_CLIP), MK_CHI2_CLIP)
        return [rules, mk_vote, chi2 if math.isfinite(chi2) else 0.0, 1.0]
    if form != "boundary":
        raise ValueError(f"unknown combiner form {form!r}: one of {sorted(COMBINER_FORMS)}")
    low, high = BOUNDARIES.get(task.upper(), (-math.inf, math.inf))
    number = evidence.type_number
    margin = min(number - low, high - number) if math.isfinite(number) else 0.0
    clear = 0.3 + 0.7 * min(abs(margin), BOUNDARY_SPAN) / BOUNDARY_SPAN
    far = min(evidence.nearest_distance, DISTANCE_SPAN) / DISTANCE_SPAN
    return [rules * clear, vote * clear, rules * far, vote * far, 1.0]


def fit_combiner(
    features: Sequence[Sequence[float]], labels: Sequence[bool], l2: float
) -> list[float]:
    """Weights of logit P = w . features by least log-loss against Platt's smoothed targets
    (a rare class is not fitted to certainty), an L2 penalty ``l2`` on all but the last
    (intercept) weight. Fitted on the development part only."""
    from scipy.optimize import minimize

    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    positives = float(y.sum())
    negatives = float(y.size - positives)
    target = np.where(y, (positives + 1.0) / (positives + 2.0), 1.0 / (negatives + 2.0))

    def loss(w: np.ndarray) -> float:
        z = np.clip(x @ w, -40.0, 40.0)
        return float(np.sum(np.logaddexp(0.0, z) - target * z) + l2 * np.sum(w[:-1] ** 2))

    return [float(v) for v in minimize(loss, np.zeros(x.shape[1])).x]


# --- fitting (development part only) -----------------------------------------------------------


def fit_weights(
    rules: Sequence[float], library: Sequence[float], labels: Sequence[bool]
) -> tuple[float, float, float]:
    """The weights of a logarithmic opinion pool, logit P = a logit P_rules + (1 - a) logit
    P_lib + c with a in [0, 1] (0.05 grid) and c in [-2, 2] (0.1 grid), by least log-loss on
    the development answers. Weights summing to one cannot sharpen the two parts' log-odds (a
    free logistic regression gave MG weights summing to 2.2 and an M-giant answer at 1.00 for a
    K5 III); c moves the boundary only (the library's O scaling, from 7 positives, needs it)."""
    r = np.array([_logit(p) for p in rules])
    lib = np.array([_logit(p) for p in library])
    y = np.asarray(labels, dtype=bool)

    def loss(point: tuple[float, float]) -> float:
        a, c = point
        z = np.clip(a * r + (1.0 - a) * lib + c, -40.0, 40.0)
        return float(np.sum(np.logaddexp(0.0, z) - np.where(y, z, 0.0)))

    grid = [(round(0.05 * i, 2), round(0.1 * j, 1)) for i in range(21) for j in range(-20, 21)]
    a, c = min(grid, key=lambda point: (loss(point), abs(point[1])))
    return a, round(1.0 - a, 2), c


def fit_pull(probabilities: Sequence[float], labels: Sequence[bool]) -> float:
    """The pull towards 0.5 of noted answers with the least log-loss, on a grid up to
    MAX_PULL (DEFAULT_COMBINED_PULL without any)."""
    if not probabilities:
        return DEFAULT_COMBINED_PULL
    grid = PULL_GRID

    def loss(pull: float) -> float:
        total = 0.0
        for p, y in zip(probabilities, labels, strict=True):
            q = min(max(pulled(p, pull), 1e-6), 1.0 - 1e-6)
            total -= math.log(q if y else 1.0 - q)
        return total

    return min(grid, key=loss)


def ool_distance(distances: Sequence[float]) -> float:
    """The out-of-library distance: the development nearest-distances' (1 - OOL_QUANTILE)
    quantile (inf without any)."""
    finite = [d for d in distances if math.isfinite(d)]
    if not finite:
        return math.inf
    return float(np.quantile(finite, 1.0 - OOL_QUANTILE))
