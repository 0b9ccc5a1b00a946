"""Reads of the vetting loop: the latest recalibration of a model on a task, the candidates and
labels it is fit on, audit estimates, and each vetter's record on gold items."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet

from agent.calibration import PlattScaling
from agent.vetting_statistics import (
    StratifiedEstimate,
    Stratum,
    apply_fit,
    raw_p_yes,
    stratified_ratio,
    wilson_interval,
)
from annotation.inspections.models import Candidate, CandidateState, CatalogEntry, InspectionRun
from annotation.inspections.triage import CalibrationSet, ConfidenceRule
from annotation.learning.models import (
    AuditSample,
    AuditSampleItem,
    CalibrationFit,
    GoldAnswer,
    GoldItem,
    TriageTarget,
    TriageThreshold,
)
from annotation.spectra.labels import LabelState
from annotation.spectra.models import SpectrumLabel, Task

MODEL_CANDIDATES_CHUNK = 5_000  # rows read at a time by iter_model_candidates


def latest_fits(*, task_ids: Iterable[int] | None = None) -> dict[tuple[int, str], CalibrationFit]:
    """(task id, model key) -> that model's newest recalibration on the task."""
    rows = CalibrationFit.objects.order_by("task_id", "model_key", "-version")
    if task_ids is not None:
        rows = rows.filter(task_id__in=list(task_ids))
    fits: dict[tuple[int, str], CalibrationFit] = {}
    for fit in rows.defer("labels"):
        fits.setdefault((fit.task_id, fit.model_key), fit)
    return fits


def calibrator(fit: CalibrationFit | None) -> PlattScaling | None:
    if fit is None:
        return None
    return PlattScaling(float(fit.params["slope"]), float(fit.params["intercept"]))


def recalibrated_p_yes(
    *, verdict: str, confidence: float | None, fit: CalibrationFit | None
) -> float | None:
    scaling = calibrator(fit)
    if scaling is None or verdict not in ("YES", "NO"):
        return None
    return apply_fit(scaling, raw_p_yes(verdict, confidence))


def recalibrated_confidence(
    *, verdict: str, confidence: float | None, fit: CalibrationFit | None
) -> float | None:
    """The recalibrated probability of the candidate's own verdict (None without a fit)."""
    q = recalibrated_p_yes(verdict=verdict, confidence=confidence, fit=fit)
    if q is None:
        return None
    return q if verdict == "YES" else 1.0 - q


def fit_for(*, task_id: int, model_key: str) -> CalibrationFit | None:
    return (
        CalibrationFit.objects.filter(task_id=task_id, model_key=model_key)
        .order_by("-version")
        .first()
    )


def iter_model_candidates(
    *, task: Task, model_key: str, labelled_only: bool = False
) -> Iterator[dict[str, Any]]:
    """The model's finished candidates on the task with a verdict, one per spectrum (its
    latest), with their run's threshold, in spectrum order: what recalibration and triage work
    on. Streamed in bounded memory (a run of 10^6 candidates is never held at once);
    ``labelled_only``: just those whose spectrum has a vetted label for the task (what a refit
    fits), chosen in the database."""
    rows = Candidate.objects.filter(
        state=CandidateState.DONE, run__task=task, run__model_key=model_key
    ).exclude(verdict="")
    if labelled_only:
        rows = rows.filter(spectrum_id__in=_labelled(task).values("spectrum_id"))
    values = rows.order_by("spectrum_id", "-id").values_list(
        "pk",
        "spectrum_id",
        "verdict",
        "confidence",
        "triage_reason",
        "run__confidence_threshold",
    )
    last = None
    for pk, spectrum_id, verdict, confidence, reason, threshold in values.iterator(
        chunk_size=MODEL_CANDIDATES_CHUNK
    ):
        if spectrum_id == last:  # an older candidate of the same spectrum
            continue
        last = spectrum_id
        yield {
            "pk": pk,
            "spectrum_id": spectrum_id,
            "verdict": verdict,
            "confidence": confidence,
            "triage_reason": reason,
            "run__confidence_threshold": threshold,
        }


def model_candidates(
    *, task: Task, model_key: str, labelled_only: bool = False
) -> list[dict[str, Any]]:
    """``iter_model_candidates`` as a list."""
    return list(iter_model_candidates(task=task, model_key=model_key, labelled_only=labelled_only))


def _labelled(task: Task) -> QuerySet[SpectrumLabel]:
    return SpectrumLabel.objects.filter(task=task, state__in=LabelState.LABELLED).exclude(value="")


def labels_by_spectrum(*, task: Task, spectrum_ids: Iterable[int]) -> dict[int, tuple[int, str]]:
    """spectrum id -> (label id, value) for the spectra labelled for the task."""
    rows = _labelled(task).filter(spectrum_id__in=list(spectrum_ids))
    return {
        spectrum: (pk, value)
        for pk, spectrum, value in rows.values_list("pk", "spectrum_id", "value")
    }


def models_on_task(
    task: Task, *, runs: QuerySet[InspectionRun] | None = None
) -> list[tuple[str, str]]:
    """(model key, label) of every model with a finished candidate on the task (of ``runs``
    only, when given: the runs a reader may see)."""
    candidates = Candidate.objects.filter(run__task=task, state=CandidateState.DONE)
    if runs is not None:
        candidates = candidates.filter(run__in=runs)
    rows = (
        candidates.exclude(run__model_key="")
        .values_list("run__model_key", "run__model_label")
        .distinct()
    )
    return sorted(set(rows))


def current_target(task: Task) -> TriageTarget | None:
    return TriageTarget.objects.filter(task=task).order_by("-created_at", "-id").first()


@dataclass(frozen=True)
class ModelCalibration:
    model_key: str
    model_label: str
    fit: CalibrationFit | None
    threshold: TriageThreshold | None
    fits: list[CalibrationFit]


def tasks_with_models(runs: QuerySet[InspectionRun]) -> list[str]:
    """Codes of the tasks (sorted) where a model has a finished candidate in ``runs``: what the
    calibration page may open on."""
    codes = (
        Candidate.objects.filter(run__in=runs, state=CandidateState.DONE)
        .exclude(run__model_key="")
        .order_by()
        .values_list("run__task__code", flat=True)
        .distinct()
    )
    return sorted(set(codes))


def calibration_overview(task: Task, *, runs: QuerySet[InspectionRun]) -> list[ModelCalibration]:
    """Per model on the task (of the ``runs`` a reader may see): its fits (newest first) and
    the threshold the newest gave."""
    overview = []
    for key, label in models_on_task(task, runs=runs):
        fits = list(
            CalibrationFit.objects.filter(task=task, model_key=key)
            .order_by("-version")
            .defer("labels")
        )
        threshold = (
            TriageThreshold.objects.filter(task=task, model_key=key).order_by("-id").first()
            if fits
            else None
        )
        overview.append(ModelCalibration(key, label, fits[0] if fits else None, threshold, fits))
    return overview


# --- audit samples -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditEstimate:
    sample: AuditSample
    strata: list[dict[str, Any]]  # each stratum with its sampled, labelled and YES counts
    purity: StratifiedEstimate
    completeness: StratifiedEstimate
    labelled: int
    sampled: int


def audit_estimate(sample: AuditSample) -> AuditEstimate:
    """Purity of the auto-accepted YES verdicts and their completeness (the share of the true
    YES they hold), each a stratified estimate from the sample's vetted labels."""
    items = list(
        AuditSampleItem.objects.filter(sample=sample).values_list(
            "stratum", "candidate__spectrum_id"
        )
    )
    labels = labels_by_spectrum(task=sample.task, spectrum_ids=[spectrum for _, spectrum in items])
    counts: dict[str, list[int]] = {}
    for stratum, spectrum in items:
        tally = counts.setdefault(stratum, [0, 0, 0])
        tally[0] += 1
        if spectrum in labels:
            tally[1] += 1
            tally[2] += labels[spectrum][1] == "YES"
    rows = []
    strata = []
    for meta in sample.strata:
        sampled, labelled, yes = counts.get(meta["key"], [0, 0, 0])
        rows.append({**meta, "sampled": sampled, "labelled": labelled, "yes": yes})
        strata.append(Stratum(meta["key"], int(meta["population"]), labelled, yes))
    accepted = {meta["key"] for meta in sample.strata if meta["accepted"]}
    purity = stratified_ratio(
        strata,
        numerator=lambda s: s.key in accepted,
        denominator=lambda s: s.key in accepted,
        weight_by_yes=False,
    )
    completeness = stratified_ratio(
        strata,
        numerator=lambda s: s.key in accepted,
        denominator=lambda s: True,
        weight_by_yes=True,
    )
    return AuditEstimate(
        sample=sample,
        strata=rows,
        purity=purity,
        completeness=completeness,
        labelled=sum(row["labelled"] for row in rows),
        sampled=len(items),
    )


def audit_samples(task: Task) -> QuerySet[AuditSample]:
    return AuditSample.objects.filter(task=task).order_by("-id")


def open_audit_candidates() -> QuerySet[AuditSampleItem]:
    return AuditSampleItem.objects.filter(sample__open=True)


def in_open_audit_sample(candidate_id: int) -> bool:
    """Whether the candidate waits for experts in an open audit sample (staff's closing and
    assignment leave those to every expert)."""
    return open_audit_candidates().filter(candidate_id=candidate_id).exists()


# --- gold ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldRecord:
    vetter_id: int
    username: str
    answered: int
    correct: int
    accuracy: float | None
    low: float
    high: float


def gold_records() -> list[GoldRecord]:
    """Each vetter's answers on gold items: how many, how many right, accuracy with a Wilson
    interval ("unsure" counts as wrong: the answer is known)."""
    rows = (
        GoldAnswer.objects.values("vetter_id", "vetter__username")
        .annotate(answered=Count("id"), correct=Count("id", filter=Q(correct=True)))
        .order_by("vetter__username")
    )
    records = []
    for row in rows:
        low, high = wilson_interval(row["correct"], row["answered"])
        records.append(
            GoldRecord(
                vetter_id=row["vetter_id"],
                username=row["vetter__username"],
                answered=row["answered"],
                correct=row["correct"],
                accuracy=row["correct"] / row["answered"] if row["answered"] else None,
                low=low,
                high=high,
            )
        )
    return records


def confidence_rules_for(pairs: set[tuple[int, str]]) -> dict[tuple[int, str], ConfidenceRule]:
    """(task id, model key) -> the rule the latest recalibration set for triage (one query;
    registered with ``inspections.triage`` so a candidate finishing later is routed by it)."""
    if not pairs:
        return {}
    rows = (
        TriageThreshold.objects.filter(
            task_id__in={task for task, _ in pairs}, model_key__in={key for _, key in pairs}
        )
        .select_related("fit")
        .order_by("task_id", "model_key", "-id")
    )
    rules: dict[tuple[int, str], ConfidenceRule] = {}
    for row in rows:
        pair = (row.task_id, row.model_key)
        if pair in pairs and pair not in rules:
            rules[pair] = ConfidenceRule(
                slope=float(row.fit.params["slope"]),
                intercept=float(row.fit.params["intercept"]),
                has_target=row.target_id is not None,
                yes_threshold=row.threshold,
            )
    return rules


def calibration_set_for(task_id: int, model_key: str) -> CalibrationSet | None:
    """The spectra of the vetted labels the model's latest recalibration on the task was fit on
    (registered with ``inspections.shifts``: the shift sentinel compares runs with them)."""
    fit = (
        CalibrationFit.objects.filter(task_id=task_id, model_key=model_key)
        .select_related("task")
        .order_by("-version", "-id")
        .first()
    )
    if fit is None:
        return None
    ids = tuple(
        sorted({int(item["spectrum_id"]) for item in fit.labels if item.get("spectrum_id")})
    )
    label = (
        f"calibration set of recalibration v{fit.version} on task {fit.task.code}: "
        f"{len(ids)} vetted spectra"
    )
    return CalibrationSet(fit_id=fit.pk, label=label, spectrum_ids=ids)


def gold_eligible_entries(entries: QuerySet[CatalogEntry]) -> QuerySet[CatalogEntry]:
    """The catalog entries staff may mark gold, newest first: one per labelled spectrum and
    task (a label is about a spectrum and a task, however many runs inspected it), leaving out
    the spectra and tasks with a gold item already, active or retired."""
    labelled = entries.filter(label_state__in=LabelState.LABELLED, candidate__isnull=False)
    newest = (
        labelled.order_by()
        .values("spectrum_id", "task_code")
        .annotate(last=Max("pk"))
        .values("last")
    )
    has_gold = GoldItem.objects.filter(
        candidate__spectrum_id=OuterRef("spectrum_id"),
        candidate__run__task__code=OuterRef("task_code"),
    )
    return labelled.filter(pk__in=newest).exclude(Exists(has_gold)).order_by("-id")
