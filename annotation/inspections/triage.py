"""Triage: why a finished candidate goes to experts, with its model's confidence as recalibrated
on the team's vetted labels when there is a recalibration (annotation.learning fits it and
registers where to read it; this domain imports no higher one), and the re-routing of finished
candidates after a refit."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db import transaction

from agent.calibration import PlattScaling
from agent.vetting_statistics import apply_fit, raw_p_yes
from annotation.inspections.models import Candidate, CandidateState, Rollout, TriageReason

MOVABLE = ("", TriageReason.LOW_CONFIDENCE)


@dataclass(frozen=True)
class ConfidenceRule:
    """A model's recalibration on a task (Platt on the log-odds of its P(YES)) and, when staff
    set a target purity, the P(YES) threshold a YES must reach (None: no threshold meets the
    target, so every YES goes to experts)."""

    slope: float
    intercept: float
    has_target: bool = False
    yes_threshold: float | None = None

    def p_yes(self, verdict: str, confidence: float | None) -> float:
        return apply_fit(PlattScaling(self.slope, self.intercept), raw_p_yes(verdict, confidence))


RuleSource = Callable[[set[tuple[int, str]]], dict[tuple[int, str], ConfidenceRule]]
_RULE_SOURCES: list[RuleSource] = []


def register_confidence_rules(source: RuleSource) -> None:
    """Where the rules come from: (task id, model key) pairs -> their rules (AppConfig.ready)."""
    if source not in _RULE_SOURCES:
        _RULE_SOURCES.append(source)


def confidence_rules(pairs: set[tuple[int, str]]) -> dict[tuple[int, str], ConfidenceRule]:
    rules: dict[tuple[int, str], ConfidenceRule] = {}
    for source in _RULE_SOURCES:
        rules.update(source(pairs))
    return rules


# --- calibration sets (the shift sentinel, annotation.inspections.shifts) ----------------------


@dataclass(frozen=True)
class CalibrationSet:
    """The spectra a model's confidence was calibrated on, for one task."""

    fit_id: int | None
    label: str  # in words, for the run page
    spectrum_ids: tuple[int, ...]


CalibrationSetSource = Callable[[int, str], CalibrationSet | None]
_SOURCES: list[CalibrationSetSource] = []


def register_calibration_sets(source: CalibrationSetSource) -> None:
    """Where calibration sets come from: (task id, model key) -> the set (AppConfig.ready)."""
    if source not in _SOURCES:
        _SOURCES.append(source)


def calibration_set(task_id: int, model_key: str) -> CalibrationSet | None:
    for source in _SOURCES:
        found = source(task_id, model_key)
        if found is not None:
            return found
    return None


def confidence_is_low(
    *, verdict: str, confidence: float | None, threshold: float, rule: ConfidenceRule | None
) -> bool:
    """Under the run's threshold (the raw confidence without a rule, the recalibrated one in the
    verdict with it); a YES under the rule's target-purity threshold when staff set a target."""
    if rule is None:
        return (confidence or 0.0) < threshold
    q = rule.p_yes(verdict, confidence)
    if verdict == "YES" and rule.has_target:
        return rule.yes_threshold is None or q < rule.yes_threshold
    return (q if verdict == "YES" else 1.0 - q) < threshold


def _scope_kinds(rollouts: list[Rollout]) -> set[str]:
    """The kinds of scope note ("out of scope", "coverage") any rollout's policy recorded in
    its decision (the rule-based inspector does; other policies record none)."""
    kinds: set[str] = set()
    for rollout in rollouts:
        data = rollout.data if isinstance(rollout.data, dict) else {}
        meta = data.get("meta")
        decision = meta.get("decision") if isinstance(meta, dict) else None
        evidence = decision.get("evidence") if isinstance(decision, dict) else None
        notes = evidence.get("scope") if isinstance(evidence, dict) else None
        for note in notes if isinstance(notes, list) else []:
            if isinstance(note, dict) and isinstance(note.get("kind"), str):
                kinds.add(note["kind"])
    return kinds


def triage_reason(
    *,
    verdict: str,
    confidence: float | None,
    threshold: float,
    rollouts: list[Rollout],
    rule: ConfidenceRule | None = None,
    held: str = "",
) -> str:
    """Why the candidate goes to experts, blank when it does not: no verdict; the policy said
    the spectrum lies outside what it knows (a class none of the task's criteria describe);
    the windows the decision rests on are missing; a low confidence (``confidence_is_low``);
    or, for a confident answer, the shift sentinel's hold (``held``: distribution shift, or
    the comparison with the calibration set not done yet; annotation.inspections.shifts). The
    first two send a candidate to experts whatever its confidence."""
    if not verdict:
        return TriageReason.NO_VERDICT
    kinds = _scope_kinds(rollouts)
    # "library": the comparison with real spectra of known type disagrees with the rules or
    # finds the spectrum outside the library (agent.policies.rule_based.library)
    if "out of scope" in kinds or "library" in kinds:
        return TriageReason.OUTSIDE_KNOWLEDGE
    if "coverage" in kinds:
        return TriageReason.MISSING_DATA
    if confidence_is_low(verdict=verdict, confidence=confidence, threshold=threshold, rule=rule):
        return TriageReason.LOW_CONFIDENCE
    return held


@transaction.atomic
def candidates_confidence_route(
    *, to_experts: Iterable[int], automatic: Iterable[int]
) -> dict[str, int]:
    """Re-route finished candidates after a refit: send ``to_experts`` to experts for low
    confidence and take ``automatic`` off their queue; returns how many changed each way. Only
    the confidence reason moves: no verdict, outside what the policy knows and missing data
    keep a candidate with experts. The caller records the change in the audit log (one entry
    for the recalibration that caused it, not one per candidate)."""
    movable = Candidate.objects.filter(state=CandidateState.DONE, triage_reason__in=MOVABLE)
    sent = (
        movable.filter(pk__in=list(to_experts))
        .exclude(triage_reason=TriageReason.LOW_CONFIDENCE)
        .update(triage_reason=TriageReason.LOW_CONFIDENCE, needs_expert=True)
    )
    released = movable.filter(
        pk__in=list(automatic), triage_reason=TriageReason.LOW_CONFIDENCE
    ).update(triage_reason="", needs_expert=False)
    return {"to_experts": sent, "automatic": released}
