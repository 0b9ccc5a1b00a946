"""Inspection reads: run progress and metrics, live steps, inspected ranges."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Min, QuerySet
from django.utils import timezone

from annotation.blinding import candidates_visible_to, catalog_entries_visible_to
from annotation.core.leases import leases_held
from annotation.core.selectors import ETA_MIN_ITEMS, eta_seconds, eta_text
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    LiveStep,
    ModelPromotion,
    Rollout,
    ShiftCheck,
    ShiftState,
    TriageReason,
)

# --- vetting decisions ---------------------------------------------------------------------------


def decision_refusal(*, candidate: Candidate, expert: Any) -> str:
    """Why ``expert`` may not decide ``candidate`` now ("" when they may): staff closed it, or
    assigned it to another expert. Open audit samples' candidates are exempt (their caller
    says so: the samples belong to a higher domain)."""
    if candidate.queue_closed_reason:
        return (
            f"staff closed this candidate ({candidate.queue_closed_reason}); it takes no "
            "decision until staff requeue it"
        )
    if candidate.assigned_to_id is not None and candidate.assigned_to_id != expert.pk:
        return "staff assigned this candidate to another expert; only they may decide it"
    return ""


# --- inspection runs ----------------------------------------------------------------------------


def _run_candidates(run: InspectionRun, user: Any) -> QuerySet[Candidate]:
    """The run's candidates; with a user, only those they may read, so no figure of the run
    tells a rater what a hidden candidate answered."""
    rows = run.candidates.all()
    return rows if user is None else candidates_visible_to(user=user, rows=rows)


def interrupted_candidate_ids(
    *, rows: QuerySet[Candidate], now: datetime | None = None
) -> set[int]:
    """Of ``rows``, the running candidates no live worker runs: a worker killed mid-run left
    them "running", and the broker would hand them out again only after its visibility timeout
    (an hour on Redis; never on the filesystem broker). On PostgreSQL a worker holds a
    candidate's lease for as long as it runs it (``core.leases``), and the server drops the
    lease with a dead worker's connection: a running candidate whose lease nobody holds is
    interrupted, at once. SQLite has no leases: there a running candidate is taken for
    interrupted once nothing was heard from it (its claim, a live step, a rollout) for
    ``CANDIDATE_INTERRUPTED_AFTER`` seconds."""
    running = list(
        rows.filter(state=CandidateState.RUNNING).order_by().values_list("pk", "started_at")
    )
    if not running:
        return set()
    held = leases_held("candidate", [pk for pk, _ in running])
    if held is not None:
        return {pk for pk, _ in running if pk not in held}
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.CANDIDATE_INTERRUPTED_AFTER)
    ids = [pk for pk, _ in running]
    heard = {pk: started for pk, started in running if started is not None}
    for model in (LiveStep, Rollout):
        last = (
            model.objects.filter(candidate_id__in=ids)
            .order_by()
            .values("candidate_id")
            .annotate(last=Max("created_at"))
            .values_list("candidate_id", "last")
        )
        for pk, at in last:
            heard[pk] = max(at, heard.get(pk, at))
    # a candidate never claimed (no start) was not left by a worker: not interrupted
    return {pk for pk, at in heard.items() if at < cutoff}


@dataclass(frozen=True)
class CandidateStatus:
    """Where a candidate truly is, for its live page: ``state`` is one of pending, waiting
    (for a retry after a model endpoint outage, at ``retry_at``), running, interrupted (left
    running by a lost worker), done, failed or cancelled; ``reason`` the stored why."""

    state: str
    headline: str
    reason: str = ""
    retry_at: datetime | None = None
    retry_due: bool = False  # the retry's time has passed: it waits for a free worker

    @property
    def finished(self) -> bool:
        return self.state in (CandidateState.DONE, CandidateState.FAILED, CandidateState.CANCELLED)


def candidate_status(*, candidate: Candidate, now: datetime | None = None) -> CandidateStatus:
    """The candidate's state as stored, with an interrupted one told from a running one
    (``interrupted_candidate_ids``) and a pending one waiting for a retry from one queued."""
    state, attempts = candidate.state, candidate.attempts
    of_max = f"attempt {attempts} of {settings.JOB_MAX_ATTEMPTS}"
    if state == CandidateState.RUNNING:
        if candidate.pk in interrupted_candidate_ids(
            rows=Candidate.objects.filter(pk=candidate.pk), now=now
        ):
            return CandidateStatus(
                "interrupted",
                f"Interrupted ({of_max}): no live worker runs it",
                "the worker that ran it was killed or lost; staff may send it again now, or the "
                "broker sends it again after its visibility timeout",
            )
        return CandidateStatus("running", f"Running ({of_max})")
    if state == CandidateState.PENDING:
        if candidate.retry_at is not None:
            due = candidate.retry_at <= (now or timezone.now())
            return CandidateStatus(
                "waiting",
                "Waiting to be sent again" if not due else "Waiting for a free worker",
                candidate.error,
                candidate.retry_at,
                due,
            )
        if attempts:
            return CandidateStatus(
                "pending", f"Queued again after {attempts} attempt{'s' if attempts > 1 else ''}"
            )
        return CandidateStatus("pending", "Queued: not started yet")
    if state == CandidateState.FAILED:
        return CandidateStatus("failed", "Failed", candidate.error)
    if state == CandidateState.CANCELLED:
        return CandidateStatus("cancelled", "Cancelled", candidate.error)
    return CandidateStatus(state, state.capitalize())


def run_progress(
    *, run: InspectionRun, user: Any = None, now: datetime | None = None
) -> dict[str, Any]:
    """Candidate counts by state, the pace, and the ETA of the rest at the pace so far (from the
    first candidate's start; "ETA —" until 2 are done, and none once finished or cancelled)."""
    candidates = _run_candidates(run, user)
    counts = dict(
        candidates.order_by().values_list("state").annotate(n=Count("id")).values_list("state", "n")
    )
    total = sum(counts.values())
    interrupted = (
        len(interrupted_candidate_ids(rows=candidates, now=now))
        if counts.get(CandidateState.RUNNING)
        else 0
    )
    done = counts.get(CandidateState.DONE, 0)
    failed = counts.get(CandidateState.FAILED, 0)
    cancelled = counts.get(CandidateState.CANCELLED, 0)
    times = candidates.filter(state=CandidateState.DONE).aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )
    per_minute = None
    if done and times["first"] and times["last"] and times["last"] > times["first"]:
        per_minute = done / ((times["last"] - times["first"]).total_seconds() / 60.0)
    remaining = total - done - failed - cancelled
    eta = None
    if remaining and not run.cancelled and done + failed >= ETA_MIN_ITEMS:
        eta = eta_seconds(
            started_at=candidates.aggregate(first=Min("started_at"))["first"],
            processed=done + failed,
            remaining=remaining,
            now=now,
        )
    return {
        "total": total,
        "done": done,
        "failed": failed,
        "cancelled": cancelled,
        "running": counts.get(CandidateState.RUNNING, 0) - interrupted,
        "interrupted": interrupted,
        "pending": counts.get(CandidateState.PENDING, 0),
        "remaining": remaining,
        "finished": total == done + failed + cancelled,
        "percent": round(100 * (done + failed + cancelled) / total) if total else 100,
        "per_minute": per_minute,
        "needs_expert": candidates.filter(needs_expert=True).count(),
        "eta_seconds": eta,
        "eta": eta_text(eta),
    }


def run_metrics(*, run: InspectionRun, user: Any = None) -> dict[str, Any] | None:
    """On a labelled set: F1/accuracy, the reliability diagram and the F1-coverage curve."""
    from agent.calibration import expected_calibration_error, f1_coverage_curve, reliability_bins
    from agent.metrics import classification_report

    rows = list(
        _run_candidates(run, user)
        .filter(
            state=CandidateState.DONE, spectrum__task=run.task, spectrum__label__in=["YES", "NO"]
        )
        .values_list("spectrum__label", "verdict", "confidence")
    )
    if not rows:
        return None
    labels = [label for label, _, _ in rows]
    predictions = [verdict or None for _, verdict, _ in rows]
    confidences = [min(1.0, max(0.0, confidence or 0.0)) for _, _, confidence in rows]
    report = classification_report(labels, predictions)
    # Calibration is of the answers given: a candidate with no answer has no confidence to
    # calibrate (counted as 0 it made "ECE 0.000" of a run that never answered).
    answered = [i for i, prediction in enumerate(predictions) if prediction is not None]
    bins = reliability_bins(
        [confidences[i] for i in answered],
        [predictions[i] == labels[i] for i in answered],
        n_bins=10,
    )
    curve = f1_coverage_curve(labels, predictions, confidences)
    return {
        "n": report.n,
        "answered": len(answered),
        "no_answer": report.n - len(answered),
        "accuracy": report.accuracy,
        "f1": report.f1,
        "precision": report.precision,
        "recall": report.recall,
        "confusion": report.confusion.as_dict(),
        "ece": expected_calibration_error(bins) if answered else None,
        "reliability": [
            {
                "low": b.low,
                "high": b.high,
                "count": b.count,
                "confidence": b.mean_confidence,
                "accuracy": b.accuracy,
            }
            for b in bins
        ],
        "coverage": [
            {
                "coverage": p.coverage,
                "threshold": p.threshold,
                "f1": p.f1,
                "accuracy": p.accuracy,
                "n": p.n_automatic,
            }
            for p in curve
        ],
    }


def live_steps_after(*, candidate: Candidate, after: int) -> list[LiveStep]:
    return list(candidate.live_steps.filter(pk__gt=after).order_by("id"))


def inspected_ranges(steps: list[dict[str, Any]]) -> list[list[float]]:
    """The windows a trajectory's tool calls looked at (for shading the plot)."""
    ranges = []
    for step in steps:
        result = step.get("tool_result") or {}
        image = result.get("image") or {}
        if image.get("wavelength_range"):
            ranges.append(image["wavelength_range"])
    return ranges


def run_reproducibility(*, run: InspectionRun, user: Any) -> dict[str, Any]:
    """What the run's background re-check found, for its page and API: whether its policy
    reproduces exactly (and why not), the sample, how many were checked and the mismatches the
    user may see (blinding hides candidates as everywhere else)."""
    from annotation.inspections.run_policies import deterministic

    record = run.reproducibility or {}
    exact, why_not = deterministic(run)
    mismatches = list(record.get("mismatches", []))
    if mismatches:
        visible = set(
            candidates_visible_to(user=user)
            .filter(pk__in=[m["candidate"] for m in mismatches])
            .values_list("pk", flat=True)
        )
        mismatches = [m for m in mismatches if m["candidate"] in visible]
    return {
        "deterministic": exact,
        "not_rechecked_because": why_not,
        "rate": record.get("rate"),
        "first_candidate": record.get("first"),
        "checked": int(record.get("checked", 0)),
        "mismatched": int(record.get("mismatched", 0)),
        "last_checked_at": record.get("last_checked_at"),
        "mismatches": mismatches,
    }


# --- the vetted part, from the verdicts already stored ---------------------------------------


def current_models() -> dict[str, str]:
    """task code -> the key of its current model (its latest promotion)."""
    current: dict[str, str] = {}
    rows = ModelPromotion.objects.order_by("-created_at", "-id").values_list(
        "task__code", "model_key"
    )
    for task_code, model_key in rows:
        current.setdefault(task_code, model_key)
    return current


def vetted_figures_by_model(*, user: Any) -> list[dict[str, Any]]:
    """Each model's stored verdicts against the vetted labels, per task: one row per (task,
    model) with the evaluation figures, over the catalog entries ``user`` may read. A spectrum
    counts once per model (its newest entry), with its own label and its own verdict."""
    from agent.real_evaluation import part_report

    rows = catalog_entries_visible_to(
        user=user, rows=CatalogEntry.objects.exclude(vetted_label="").exclude(model_key="")
    ).order_by("-id")
    seen: set[tuple[str, str, int | None]] = set()
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for task, key, label, spectrum, truth, verdict, confidence in rows.values_list(
        "task_code",
        "model_key",
        "model_label",
        "candidate__spectrum_id",
        "vetted_label",
        "verdict",
        "confidence",
    ).iterator(chunk_size=5000):
        if (task, key, spectrum) in seen:
            continue
        seen.add((task, key, spectrum))
        group = groups.setdefault(
            (task, key), {"label": label, "truth": [], "verdicts": [], "confidences": []}
        )
        group["truth"].append(truth)
        group["verdicts"].append(verdict or None)
        group["confidences"].append(confidence)
    current = current_models()
    table = []
    for (task, key), group in sorted(groups.items()):
        report = part_report(group["truth"], group["verdicts"], group["confidences"])
        table.append(
            {
                "task": task,
                "model_key": key,
                "model_label": group["label"] or key,
                "current": current.get(task) == key,
                "n": report.n,
                "positives": report.positives,
                "accuracy": _shown(report.accuracy),
                "balanced_accuracy": _shown(report.balanced_accuracy),
                "f1": _shown(report.f1),
                "ece": _shown(report.ece),
                "confident_wrong": report.confident_wrong,
                # the same figures as numbers (None: undefined), for the API
                "values": {
                    key: _number(getattr(report, key))
                    for key in ("accuracy", "balanced_accuracy", "f1", "ece")
                },
            }
        )
    return table


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 4)


def _shown(value: float | None) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.2f}"


# --- the shift sentinel (annotation.inspections.shifts) ------------------------------------------


@dataclass(frozen=True)
class ShiftHold:
    """What a run's latest shift check holds back from automatic acceptance: every confident
    answer while the comparison is pending or failed; once it is done, those of the shifted
    groups ("" the whole run, "survey=<survey>" a subset)."""

    state: str
    groups: frozenset[str] = frozenset()

    def reason(self, survey: str) -> str:
        """The triage reason for a confident answer on a spectrum of ``survey`` ("": none)."""
        if self.state in (ShiftState.PENDING, ShiftState.FAILED):
            return TriageReason.SHIFT_PENDING
        if self.state == ShiftState.SHIFTED and (
            "" in self.groups or f"survey={survey}" in self.groups
        ):
            return TriageReason.DISTRIBUTION_SHIFT
        return ""

    def shifted(self, survey: str) -> bool:
        """A spectrum of ``survey`` lies in a shifted group (the catalog's ``shifted``)."""
        return self.reason(survey) == TriageReason.DISTRIBUTION_SHIFT


NO_HOLD = ShiftHold(state=ShiftState.CLEAR)


def shift_holds(run_ids: set[int]) -> dict[int, ShiftHold]:
    """run id -> the hold of its latest shift check (runs never checked are absent)."""
    if not run_ids:
        return {}
    holds: dict[int, ShiftHold] = {}
    rows = ShiftCheck.objects.filter(run_id__in=run_ids).order_by("run_id", "-id")
    for run_id, state, groups in rows.values_list("run_id", "state", "shifted_groups"):
        if run_id not in holds:
            holds[run_id] = ShiftHold(state=state, groups=frozenset(groups or ()))
    return holds


def latest_shift_check(run: InspectionRun) -> ShiftCheck | None:
    return ShiftCheck.objects.filter(run=run).order_by("-id").first()


def run_shift(*, run: InspectionRun, user: Any) -> dict[str, Any] | None:
    """The run's latest shift check for its page and API (None: never compared), with how many
    of the candidates this user may read are held for experts by it. A run never compared gets
    state "not checked" and the reason, so its page never shows confident answers accepted
    without saying that no comparison was made and why."""
    check = latest_shift_check(run)
    if check is None:
        return shift_not_checked(run)
    held = (
        candidates_visible_to(user=user)
        .filter(
            run=run,
            triage_reason__in=[TriageReason.DISTRIBUTION_SHIFT, TriageReason.SHIFT_PENDING],
        )
        .count()
    )
    return {
        "id": check.pk,
        "state": check.state,
        "flagged": check.state in (ShiftState.SHIFTED, ShiftState.PENDING, ShiftState.FAILED),
        "reference": check.reference,
        "calibration_fit_id": check.calibration_fit_id,
        "n_run": check.n_run,
        "n_reference": check.n_reference,
        "shifted_groups": [key or "the whole run" for key in check.shifted_groups],
        "groups": check.groups,
        "library": check.library,
        "routed": check.routed,
        "error": check.error,
        "held_for_experts": held,
        "created_at": check.created_at.isoformat(),
        "finished_at": check.finished_at.isoformat() if check.finished_at else None,
        "history": list(
            ShiftCheck.objects.filter(run=run)
            .order_by("-id")
            .values("id", "state", "reference", "created_at")[:10]
        ),
    }


def shift_not_checked(run: InspectionRun) -> dict[str, Any]:
    """Why ``run`` has no shift check: its model has no calibration set of at least
    MIN_REFERENCE vetted labels on the task (nothing to compare with), or it got one after the
    run was created (compare it through the API)."""
    from agent.shift import MIN_REFERENCE
    from annotation.inspections.triage import calibration_set

    reference = calibration_set(run.task_id, run.model_key)
    if reference is None or len(reference.spectrum_ids) < MIN_REFERENCE:
        reason = (
            f"its model has no recalibration on task {run.task.code} with at least "
            f"{MIN_REFERENCE} vetted labels, so there is no calibration set to compare its "
            "spectra with; its confident answers rest on the model's own calibration (the "
            "rule-based inspector's: the development part of the real corpus) and were accepted "
            "without a shift check"
        )
    else:
        reason = (
            f"its model's calibration set ({reference.label}) came after the run was created; "
            "compare the run with it through the API to check it"
        )
    return {
        "id": None,
        "state": "not checked",
        "flagged": False,
        "reason": reason,
        "reference": "",
        "n_run": 0,
        "n_reference": 0,
        "shifted_groups": [],
        "groups": [],
        "library": "",
        "routed": {},
        "error": "",
        "held_for_experts": 0,
        "history": [],
    }
