"""Writes of the vetting loop, each audit-logged: recalibration fits and the triage they drive,
target purities, audit samples, gold items and vetters' answers on them."""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max

from agent.calibration import expected_calibration_error, reliability_bins
from agent.vetting_statistics import (
    MIN_LABELS,
    PRIOR_STRENGTH,
    ThresholdEstimate,
    apply_fit,
    purity_threshold,
    raw_p_yes,
    recalibrate,
)
from annotation.core import services as core_services
from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.core.models import Job
from annotation.core.roles import Role, has_role
from annotation.core.services import audit_log_record
from annotation.inspections.decision_history import expert_answer
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    ExpertDecisionValue,
    InspectionRun,
)
from annotation.inspections.shifts import shift_checks_recalibrate
from annotation.inspections.triage import (
    MOVABLE,
    ConfidenceRule,
    candidates_confidence_route,
    confidence_is_low,
)
from annotation.learning import selectors
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

JOB_KIND = "recalibration"
ROUTE_CHUNK = 10_000  # candidates re-routed per UPDATE after a refit
METHOD = "platt-logit-prior"
# Bins of the recalibrated confidence in the verdict, for audit strata.
AUDIT_EDGES = (0.0, 0.6, 0.8, 0.9, 0.99, 1.0)
MAX_PER_STRATUM = 50


def _require(actor: User, *roles: Role, action: str) -> None:
    if not has_role(actor, *roles):
        needed = " or ".join(role.value for role in roles)
        raise NotAllowed(f"{action} needs the {needed} role")


# --- recalibration and triage --------------------------------------------------------------------


@transaction.atomic
def recalibration_start(*, task: Task, model_key: str, actor: User) -> Job:
    """Refit (as a job) the recalibration of ``model_key`` on ``task`` (every model on the task
    when blank) on the vetted labels, then re-route its candidates."""
    _require(actor, Role.STAFF, Role.ML_ENGINEER, action="refitting a calibration")
    keys = {key for key, _ in selectors.models_on_task(task)}
    if model_key and model_key not in keys:
        raise WorkflowError(f"model {model_key[:200]!r} has no finished candidate on {task.code}")
    return core_services.job_create(
        kind=JOB_KIND, params={"task": task.code, "model_key": model_key}, created_by=actor
    )


@transaction.atomic
def triage_target_set(*, task: Task, target_purity: float, actor: User) -> tuple[TriageTarget, Job]:
    """Staff's target purity for the task's auto-accepted YES verdicts; every model's threshold
    follows in a recalibration job."""
    _require(actor, Role.STAFF, action="setting a target purity")
    if not 0.5 <= target_purity < 1.0:
        raise WorkflowError(f"target purity must be at least 0.5 and below 1; got {target_purity}")
    before = selectors.current_target(task)
    target = TriageTarget.objects.create(task=task, target_purity=target_purity, set_by=actor)
    audit_log_record(
        actor=actor,
        action="triage_target_set",
        obj=target,
        from_state=f"{before.target_purity:g}" if before else "",
        to_state=f"{target_purity:g}",
        comment=f"task {task.code}",
    )
    job = core_services.job_create(
        kind=JOB_KIND, params={"task": task.code, "model_key": ""}, created_by=actor
    )
    return target, job


def _reliability(p_yes: list[float], truth: list[bool]) -> dict[str, Any]:
    bins = reliability_bins(p_yes, truth, n_bins=10)
    return {
        "ece": round(expected_calibration_error(bins), 4),
        "bins": [
            {
                "low": b.low,
                "high": b.high,
                "count": b.count,
                "mean": b.mean_confidence,
                "share": b.accuracy,
            }
            for b in bins
        ],
    }


@transaction.atomic
def calibration_refit(
    *, task: Task, model_key: str, actor: User | None, job: Job | None = None
) -> CalibrationFit | None:
    """A new version of the model's recalibration on the task from its candidates whose
    spectrum has a vetted label (None with fewer than MIN_LABELS such candidates)."""
    # only the candidates whose spectrum is labelled: the rest of a 10^6-candidate run is not
    # read at all
    rows = selectors.model_candidates(task=task, model_key=model_key, labelled_only=True)
    labels = selectors.labels_by_spectrum(task=task, spectrum_ids=[r["spectrum_id"] for r in rows])
    used = [r for r in rows if r["spectrum_id"] in labels]
    if len(used) < MIN_LABELS:
        return None
    raw = [raw_p_yes(r["verdict"], r["confidence"]) for r in used]
    truth = [labels[r["spectrum_id"]][1] == "YES" for r in used]
    scaling = recalibrate(raw, truth)
    recalibrated = [apply_fit(scaling, p) for p in raw]
    version = (
        CalibrationFit.objects.filter(task=task, model_key=model_key).aggregate(v=Max("version"))[
            "v"
        ]
        or 0
    ) + 1
    label = (
        InspectionRun.objects.filter(task=task, model_key=model_key)
        .order_by("-id")
        .values_list("model_label", flat=True)
        .first()
    )
    fit = CalibrationFit.objects.create(
        task=task,
        model_key=model_key,
        model_label=label or "",
        version=version,
        method=METHOD,
        params={
            "slope": scaling.slope,
            "intercept": scaling.intercept,
            "prior_strength": PRIOR_STRENGTH,
        },
        n_labels=len(used),
        positives=sum(truth),
        labels=[
            {
                "label_id": labels[r["spectrum_id"]][0],
                "spectrum_id": r["spectrum_id"],
                "candidate_id": r["pk"],
                "value": labels[r["spectrum_id"]][1],
                "raw": round(p, 6),
            }
            for r, p in zip(used, raw, strict=True)
        ],
        reliability={
            "raw": _reliability(raw, truth),
            "recalibrated": _reliability(recalibrated, truth),
        },
        job=job,
        created_by=actor if actor is not None and actor.is_authenticated else None,
    )
    audit_log_record(
        actor=actor,
        action="calibration_refit",
        obj=fit,
        to_state=f"v{version}",
        comment=f"task {task.code}: {fit.model_label or model_key} on {len(used)} vetted labels",
        data={"task": task.code, "model_key": model_key, **fit.params, "labels": len(used)},
    )
    return fit


@transaction.atomic
def triage_apply(
    *, task: Task, model_key: str, fit: CalibrationFit, actor: User | None
) -> TriageThreshold:
    """Re-route the model's candidates on the task with the recalibrated confidence: a YES goes
    to experts below the threshold the task's target purity gives (when staff set one), any
    other verdict below its run's threshold. Only the low-confidence reason moves."""
    scaling = selectors.calibrator(fit)
    if scaling is None:
        raise WrongState("the recalibration has no parameters")
    target = selectors.current_target(task)
    estimate = None
    if target is not None:
        stored = fit.labels
        # the YES verdicts' raw P(YES), 8 bytes each: the rows themselves are streamed twice
        population = np.fromiter(
            (
                raw_p_yes(r["verdict"], r["confidence"])
                for r in _movable(task=task, model_key=model_key)
                if r["verdict"] == "YES"
            ),
            dtype=np.float64,
        )
        estimate = purity_threshold(
            population_raw=population,
            labelled_raw=[item["raw"] for item in stored],
            labelled_truth=[item["value"] == "YES" for item in stored],
            target=target.target_purity,
            seed=fit.pk,
        )
    rule = ConfidenceRule(
        slope=scaling.slope,
        intercept=scaling.intercept,
        has_target=estimate is not None,
        yes_threshold=estimate.threshold if estimate is not None else None,
    )
    changed = {"to_experts": 0, "automatic": 0}
    routed = automatic_count = 0
    to_experts: list[int] = []
    automatic: list[int] = []
    for r in _movable(task=task, model_key=model_key):
        low = confidence_is_low(
            verdict=r["verdict"],
            confidence=r["confidence"],
            threshold=r["run__confidence_threshold"],
            rule=rule,
        )
        (to_experts if low else automatic).append(r["pk"])
        if len(to_experts) + len(automatic) >= ROUTE_CHUNK:
            routed, automatic_count = routed + len(to_experts), automatic_count + len(automatic)
            _add(changed, candidates_confidence_route(to_experts=to_experts, automatic=automatic))
            to_experts, automatic = [], []
    routed, automatic_count = routed + len(to_experts), automatic_count + len(automatic)
    _add(changed, candidates_confidence_route(to_experts=to_experts, automatic=automatic))
    threshold = TriageThreshold.objects.create(
        task=task,
        model_key=model_key,
        fit=fit,
        target=target,
        threshold=estimate.threshold if estimate else None,
        threshold_low=estimate.low if estimate else None,
        threshold_high=estimate.high if estimate else None,
        details=_estimate_details(estimate, routed=routed, automatic=automatic_count),
        changed=changed,
    )
    audit_log_record(
        actor=actor,
        action="triage_applied",
        obj=threshold,
        to_state=f"{threshold.threshold:.4f}" if threshold.threshold is not None else "",
        comment=f"task {task.code}: {fit.model_label or model_key} v{fit.version}",
        data={"task": task.code, "model_key": model_key, "fit": fit.pk, **changed},
    )
    return threshold


def _movable(*, task: Task, model_key: str) -> Iterator[dict[str, Any]]:
    """The model's candidates on the task whose route a recalibration may change (streamed)."""
    return (
        r
        for r in selectors.iter_model_candidates(task=task, model_key=model_key)
        if r["triage_reason"] in MOVABLE
    )


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


def _estimate_details(
    estimate: ThresholdEstimate | None, *, routed: int, automatic: int
) -> dict[str, Any]:
    details: dict[str, Any] = {"to_experts": routed, "automatic": automatic}
    if estimate is not None:
        details.update(
            resamples=estimate.resamples,
            labelled_above=estimate.labelled_above,
            labelled_yes_above=estimate.labelled_yes_above,
            labelled_purity_low=estimate.labelled_purity_low,
            labelled_purity_high=estimate.labelled_purity_high,
        )
    return details


def recalibrate_task(
    *, task: Task, model_key: str, actor: User | None, job: Job | None
) -> dict[str, Any]:
    """Refit each model (or the one given) and re-route its candidates: the job's body."""
    keys = [model_key] if model_key else [key for key, _ in selectors.models_on_task(task)]
    result: dict[str, Any] = {}
    for key in keys:
        fit = calibration_refit(task=task, model_key=key, actor=actor, job=job)
        if fit is None:
            result[key] = {"fit": None, "reason": f"fewer than {MIN_LABELS} vetted labels"}
            continue
        threshold = triage_apply(task=task, model_key=key, fit=fit, actor=actor)
        result[key] = {
            "fit": fit.pk,
            "version": fit.version,
            "threshold": threshold.threshold,
            **threshold.changed,
            # the shifted runs compared again with the new calibration set (their vetted
            # labels are in it now); after triage_apply, so a shifted run stays held
            "shift_checks": shift_checks_recalibrate(task_id=task.pk, model_key=key),
        }
    return result


# --- audit samples -------------------------------------------------------------------------------


def _bin(confidence: float) -> tuple[float, float]:
    for low, high in zip(AUDIT_EDGES, AUDIT_EDGES[1:], strict=False):
        if confidence < high:
            return low, high
    return AUDIT_EDGES[-2], AUDIT_EDGES[-1]


@transaction.atomic
def audit_sample_draw(
    *, task: Task, model_key: str, per_stratum: int, actor: User, seed: int | None = None
) -> AuditSample:
    """Draw up to ``per_stratum`` of the model's candidates (one per spectrum) at random from
    each stratum: verdict x auto-accepted or routed to experts x bin of the recalibrated
    confidence in the verdict. Their vetting gives the stratified estimates."""
    _require(actor, Role.STAFF, action="drawing an audit sample")
    if not 1 <= per_stratum <= MAX_PER_STRATUM:
        raise WorkflowError(f"per stratum must be 1-{MAX_PER_STRATUM}; got {per_stratum}")
    fit = selectors.fit_for(task_id=task.pk, model_key=model_key)
    rows = (
        Candidate.objects.filter(
            state=CandidateState.DONE, run__task=task, run__model_key=model_key
        )
        .order_by("spectrum_id", "-id")
        .values("pk", "spectrum_id", "verdict", "confidence", "needs_expert")
    )
    members: dict[str, list[int]] = {}
    meta: dict[str, dict[str, Any]] = {}
    seen: set[int] = set()
    for row in rows:
        if row["spectrum_id"] in seen:
            continue
        seen.add(row["spectrum_id"])
        verdict = row["verdict"] or "none"
        own = selectors.recalibrated_confidence(
            verdict=row["verdict"], confidence=row["confidence"], fit=fit
        )
        own = (
            own
            if own is not None
            else (row["confidence"] if row["confidence"] is not None else 0.5)
        )
        low, high = _bin(own)
        accepted = verdict == "YES" and not row["needs_expert"]
        key = f"{verdict}|{'auto' if not row['needs_expert'] else 'experts'}|{low:g}-{high:g}"
        members.setdefault(key, []).append(row["pk"])
        meta[key] = {
            "key": key,
            "verdict": verdict,
            "accepted": accepted,
            "routed": row["needs_expert"],
            "low": low,
            "high": high,
        }
    if not members:
        raise WrongState(f"{model_key[:200]!r} has no finished candidate on {task.code}")
    seed = secrets.randbits(32) if seed is None else seed
    rng = random.Random(seed)
    sample = AuditSample.objects.create(
        task=task, model_key=model_key, fit=fit, per_stratum=per_stratum, created_by=actor
    )
    items: list[AuditSampleItem] = []
    strata: list[dict[str, Any]] = []
    for key in sorted(members):
        chosen = rng.sample(members[key], min(per_stratum, len(members[key])))
        items.extend(AuditSampleItem(sample=sample, candidate_id=pk, stratum=key) for pk in chosen)
        strata.append({**meta[key], "population": len(members[key])})
    AuditSampleItem.objects.bulk_create(items)
    sample.strata = strata
    sample.save(update_fields=["strata"])
    audit_log_record(
        actor=actor,
        action="audit_sample_drawn",
        obj=sample,
        to_state="open",
        comment=f"task {task.code}: {len(items)} candidates in {len(strata)} strata",
        data={"task": task.code, "model_key": model_key, "seed": seed, "per_stratum": per_stratum},
    )
    return sample


@transaction.atomic
def audit_sample_close(*, sample: AuditSample, actor: User) -> None:
    """Take the sample's items out of the vetting queue (its estimates stay)."""
    _require(actor, Role.STAFF, action="closing an audit sample")
    if AuditSample.objects.filter(pk=sample.pk, open=True).update(open=False) != 1:
        raise WrongState("the audit sample is closed already")
    audit_log_record(
        actor=actor, action="audit_sample_closed", obj=sample, from_state="open", to_state="closed"
    )


# --- gold items ----------------------------------------------------------------------------------


@transaction.atomic
def gold_item_mark(*, candidate: Candidate, actor: User) -> GoldItem:
    """Make a candidate whose spectrum has a vetted label for its task a gold item, its answer
    that label; refused when another run's candidate of the spectrum is one for the task."""
    _require(actor, Role.STAFF, action="marking gold items")
    task_id = InspectionRun.objects.values_list("task_id", flat=True).get(pk=candidate.run_id)
    label = (
        SpectrumLabel.objects.filter(
            spectrum_id=candidate.spectrum_id, task_id=task_id, state__in=LabelState.LABELLED
        )
        .exclude(value="")
        .first()
    )
    if label is None:
        raise WrongState("only a candidate whose spectrum has a vetted label can be a gold item")
    other = (
        GoldItem.objects.filter(
            candidate__spectrum_id=candidate.spectrum_id, candidate__run__task_id=task_id
        )
        .exclude(candidate=candidate)
        .first()
    )
    if other is not None:  # one gold item per spectrum and task, however many runs
        raise WrongState(
            f"this spectrum has a gold item for the task already (gold item {other.pk}, "
            f"candidate {other.candidate_id})"
        )
    gold, created = GoldItem.objects.update_or_create(
        candidate=candidate, defaults={"answer": label.value, "active": True, "marked_by": actor}
    )
    audit_log_record(
        actor=actor,
        action="gold_item_marked",
        obj=gold,
        to_state=label.value,
        data={"candidate": candidate.pk, "label": label.pk, "created": created},
    )
    return gold


@transaction.atomic
def gold_item_retire(*, gold: GoldItem, actor: User) -> None:
    _require(actor, Role.STAFF, action="retiring gold items")
    if GoldItem.objects.filter(pk=gold.pk, active=True).update(active=False) != 1:
        raise WrongState("the gold item is retired already")
    audit_log_record(
        actor=actor, action="gold_item_retired", obj=gold, from_state="active", to_state="retired"
    )


def gold_for_vetter(*, candidate: Candidate, vetter: User) -> GoldItem | None:
    """The candidate's active gold item when a decision of ``vetter`` on it is a gold answer:
    they made no vetting decision on its spectrum for the task, on any run's candidate (one who
    helped make its label is not tested on it; their answer replaces their earlier one)."""
    gold = GoldItem.objects.filter(candidate=candidate, active=True).first()
    if gold is None:
        return None
    task_id = InspectionRun.objects.values_list("task_id", flat=True).get(pk=candidate.run_id)
    answered = expert_answer(
        spectrum_id=candidate.spectrum_id, task_id=task_id, expert_id=vetter.pk
    )
    return gold if answered is None else None


@transaction.atomic
def gold_answer_record(*, gold: GoldItem, vetter: User, answer: str) -> GoldAnswer:
    """The vetter's answer on a gold item (a later one replaces it); it makes no label."""
    if answer not in ExpertDecisionValue.values:
        raise WorkflowError(f"decision must be YES, NO or unsure, got {answer!r}")
    record, created = GoldAnswer.objects.update_or_create(
        gold=gold, vetter=vetter, defaults={"answer": answer, "correct": answer == gold.answer}
    )
    audit_log_record(
        actor=vetter,
        action="gold_answer",
        obj=record,
        to_state=answer,
        data={"gold": gold.pk, "correct": record.correct, "changed": not created},
    )
    return record


@transaction.atomic
def gold_answer_withdraw(*, gold: GoldItem, vetter: User) -> str:
    record = GoldAnswer.objects.filter(gold=gold, vetter=vetter).first()
    if record is None:
        raise WrongState("you have no decision on this candidate to undo")
    answer = record.answer
    record.delete()
    audit_log_record(actor=vetter, action="gold_answer_withdrawn", obj=gold, from_state=answer)
    return answer
