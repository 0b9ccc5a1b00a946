"""Recalibration on vetted labels, the triage it drives, target purity, audit samples and gold
items (annotation.learning.services)."""

from __future__ import annotations

import pytest

from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.core.models import AuditLog, Job
from annotation.inspections import services as inspection_services
from annotation.inspections.models import Candidate, ExpertDecision, InspectionRun, TriageReason
from annotation.learning import selectors, services
from annotation.learning.models import AuditSampleItem, CalibrationFit, GoldAnswer
from annotation.spectra.models import SpectrumLabel, Task
from tests.factories import make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

MODEL = ("checkpoint:over", "overconfident checkpoint")


def label(candidate: Candidate, value: str, *experts) -> None:
    for user in experts:
        inspection_services.expert_decision_record(candidate=candidate, expert=user, decision=value)


SEEDS = iter(range(5000, 100000))  # equal seeds would make one spectrum of two names


def inspected(
    rows: dict[str, tuple[str, float]], *, threshold: float, owner, prefix: str, model=MODEL
):
    spectra = {name: make_spectrum(object_id=f"{prefix}-{name}", seed=next(SEEDS)) for name in rows}
    run = make_inspected(
        spectra=list(spectra.values()),
        verdicts={row.pk: rows[name] for name, row in spectra.items()},
        created_by=owner,
        threshold=threshold,
        model=model,
    )
    return run, {name: run.candidates.get(spectrum=row) for name, row in spectra.items()}


@pytest.fixture
def overconfident(owner, expert, outsider):
    """A model that says YES at 0.9 and is right half the time (10 vetted labels), and six
    spectra it answered YES at 0.88 that nobody vetted: over the run's 0.75, so not routed."""
    rows = {f"L{i}": ("YES", 0.9) for i in range(10)} | {f"U{i}": ("YES", 0.88) for i in range(6)}
    run, candidates = inspected(rows, threshold=0.75, owner=owner, prefix="OVER")
    for i in range(10):
        label(candidates[f"L{i}"], "YES" if i % 2 else "NO", expert, outsider)
    return run, candidates


def test_it_routes_to_experts_what_recalibration_finds_overconfident(overconfident, staff):
    """Recalibration changes which candidates the triage sends to experts (issue 25)."""
    run, candidates = overconfident
    unvetted = [candidates[f"U{i}"].pk for i in range(6)]
    assert not Candidate.objects.filter(pk__in=unvetted, needs_expert=True).exists()
    result = services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    routed = Candidate.objects.filter(pk__in=unvetted)
    assert {(c.needs_expert, c.triage_reason) for c in routed} == {
        (True, TriageReason.LOW_CONFIDENCE)
    }
    assert result[MODEL[0]]["to_experts"] == 16  # the labelled ones too (the queue skips them)
    fit = CalibrationFit.objects.get(task=run.task, model_key=MODEL[0])
    assert fit.n_labels == 10 and fit.positives == 5 and fit.version == 1
    assert 0.4 < selectors.recalibrated_confidence(verdict="YES", confidence=0.9, fit=fit) < 0.7
    assert {item["value"] for item in fit.labels} == {"YES", "NO"}
    assert fit.reliability["recalibrated"]["ece"] < fit.reliability["raw"]["ece"]
    actions = set(AuditLog.objects.values_list("action", flat=True))
    assert {"calibration_refit", "triage_applied"} <= actions


def test_it_routes_a_candidate_finishing_after_the_refit_by_the_recalibrated_confidence(
    overconfident, owner, staff
):
    run, _ = overconfident
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    _, later = inspected({"N": ("YES", 0.88)}, threshold=0.75, owner=owner, prefix="LATER")
    finished = Candidate.objects.get(pk=later["N"].pk)
    assert (finished.needs_expert, finished.triage_reason) == (True, TriageReason.LOW_CONFIDENCE)
    _, other = inspected(
        {"N": ("YES", 0.88)},
        threshold=0.75,
        owner=owner,
        prefix="OTHER",
        model=("checkpoint:other", "another model"),
    )
    assert not Candidate.objects.get(pk=other["N"].pk).needs_expert  # no fit: raw 0.88 >= 0.75


def test_it_releases_what_recalibration_finds_underconfident(owner, expert, outsider, staff):
    rows = {f"L{i}": ("YES", 0.6) for i in range(8)} | {"U": ("YES", 0.62)}
    run, candidates = inspected(rows, threshold=0.75, owner=owner, prefix="UNDER")
    for i in range(8):
        label(candidates[f"L{i}"], "YES", expert, outsider)
    assert Candidate.objects.get(pk=candidates["U"].pk).needs_expert
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    released = Candidate.objects.get(pk=candidates["U"].pk)
    assert (released.needs_expert, released.triage_reason) == (False, "")


def test_it_never_moves_a_candidate_routed_for_another_reason(overconfident, staff):
    run, candidates = overconfident
    scoped = candidates["U0"]
    Candidate.objects.filter(pk=scoped.pk).update(
        triage_reason=TriageReason.OUTSIDE_KNOWLEDGE, needs_expert=True
    )
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    assert Candidate.objects.get(pk=scoped.pk).triage_reason == TriageReason.OUTSIDE_KNOWLEDGE


def test_it_numbers_fits_per_task_and_model(overconfident, staff):
    run, _ = overconfident
    task = run.task
    first = services.calibration_refit(task=task, model_key=MODEL[0], actor=staff)
    second = services.calibration_refit(task=task, model_key=MODEL[0], actor=staff)
    assert (first.version, second.version) == (1, 2)
    assert selectors.fit_for(task_id=task.pk, model_key=MODEL[0]) == second


def test_it_fits_nothing_below_two_labels(owner, staff):
    run, _ = inspected({"A": ("YES", 0.9)}, threshold=0.5, owner=owner, prefix="FEW")
    assert services.calibration_refit(task=run.task, model_key=MODEL[0], actor=staff) is None
    result = services.recalibrate_task(task=run.task, model_key="", actor=staff, job=None)
    assert result[MODEL[0]]["fit"] is None


def test_it_starts_a_recalibration_job_for_staff_and_ml_engineers_only(
    overconfident, staff, ml_engineer, expert, django_capture_on_commit_callbacks
):
    run, _ = overconfident
    with pytest.raises(NotAllowed):
        services.recalibration_start(task=run.task, model_key=MODEL[0], actor=expert)
    with pytest.raises(WorkflowError, match="no finished candidate"):
        services.recalibration_start(task=run.task, model_key="nope", actor=staff)
    with django_capture_on_commit_callbacks(execute=True):
        job = services.recalibration_start(task=run.task, model_key=MODEL[0], actor=ml_engineer)
    job = Job.objects.get(pk=job.pk)
    assert job.state == "succeeded", job.error
    assert job.result["models"][MODEL[0]]["version"] == 1


@pytest.fixture
def graded(owner, expert, outsider):
    """YES at raw 0.95 is always right, at 0.7 right half the time; with the run's threshold at
    0.5 every YES is accepted until staff set a target purity."""
    rows = (
        {f"H{i}": ("YES", 0.95) for i in range(8)}
        | {f"M{i}": ("YES", 0.7) for i in range(8)}
        | {"UH": ("YES", 0.95), "UM": ("YES", 0.7)}
    )
    run, candidates = inspected(rows, threshold=0.5, owner=owner, prefix="GRADE")
    for i in range(8):
        label(candidates[f"H{i}"], "YES", expert, outsider)
        label(candidates[f"M{i}"], "YES" if i % 2 else "NO", expert, outsider)
    return run, candidates


def test_it_sends_yes_below_the_target_purity_threshold_to_experts(graded, staff, expert):
    run, candidates = graded
    with pytest.raises(NotAllowed):
        services.triage_target_set(task=run.task, target_purity=0.9, actor=expert)
    with pytest.raises(WorkflowError, match="target purity"):
        services.triage_target_set(task=run.task, target_purity=1.0, actor=staff)
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    assert not Candidate.objects.get(pk=candidates["UM"].pk).needs_expert  # no target yet
    services.triage_target_set(task=run.task, target_purity=0.9, actor=staff)
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    assert Candidate.objects.get(pk=candidates["UM"].pk).needs_expert
    assert not Candidate.objects.get(pk=candidates["UH"].pk).needs_expert
    threshold = selectors.calibration_overview(run.task, runs=InspectionRun.objects.all())[
        0
    ].threshold
    assert threshold.threshold is not None and threshold.target.target_purity == 0.9
    assert threshold.threshold_low is not None and threshold.threshold_low <= threshold.threshold
    assert threshold.details["labelled_above"] >= 8


def test_it_draws_a_stratified_audit_sample_and_estimates_from_its_labels(
    graded, staff, expert, outsider
):
    run, candidates = graded
    services.recalibrate_task(task=run.task, model_key=MODEL[0], actor=staff, job=None)
    with pytest.raises(NotAllowed):
        services.audit_sample_draw(task=run.task, model_key=MODEL[0], per_stratum=2, actor=expert)
    sample = services.audit_sample_draw(
        task=run.task, model_key=MODEL[0], per_stratum=2, actor=staff, seed=1
    )
    assert sum(stratum["population"] for stratum in sample.strata) == 18
    items = AuditSampleItem.objects.filter(sample=sample)
    assert items.count() == sum(min(2, s["population"]) for s in sample.strata)
    estimate = selectors.audit_estimate(sample)
    # Every sampled candidate but UH and UM is labelled already.
    unlabelled = {candidates["UH"].pk, candidates["UM"].pk}
    assert estimate.labelled == items.exclude(candidate_id__in=unlabelled).count()
    for pk in set(items.values_list("candidate_id", flat=True)) & unlabelled:
        label(Candidate.objects.get(pk=pk), "YES", expert, outsider)
    estimate = selectors.audit_estimate(sample)
    assert estimate.labelled == items.count()
    assert estimate.purity.value is not None
    assert estimate.purity.low <= estimate.purity.value <= estimate.purity.high
    assert estimate.completeness.value is not None
    services.audit_sample_close(sample=sample, actor=staff)
    with pytest.raises(WrongState):
        services.audit_sample_close(sample=sample, actor=staff)


def test_it_keeps_gold_answers_out_of_labels(overconfident, staff, expert, outsider):
    _, candidates = overconfident
    vetted = candidates["L1"]
    with pytest.raises(WrongState, match="vetted label"):
        services.gold_item_mark(candidate=candidates["U1"], actor=staff)
    with pytest.raises(NotAllowed):
        services.gold_item_mark(candidate=vetted, actor=expert)
    gold = services.gold_item_mark(candidate=vetted, actor=staff)
    assert gold.answer == "YES"
    newcomer = type(expert).objects.create(username="newcomer")
    before = SpectrumLabel.objects.get(spectrum_id=vetted.spectrum_id)
    answer = services.gold_answer_record(gold=gold, vetter=newcomer, answer="NO")
    assert answer.correct is False
    after = SpectrumLabel.objects.get(spectrum_id=vetted.spectrum_id)
    assert (after.value, after.state, after.decisions) == (
        before.value,
        before.state,
        before.decisions,
    )
    assert not ExpertDecision.objects.filter(expert=newcomer).exists()
    services.gold_answer_record(gold=gold, vetter=newcomer, answer="YES")
    assert GoldAnswer.objects.get(gold=gold, vetter=newcomer).correct is True
    # Who helped label the spectrum answers as an expert, not as a gold answer.
    assert services.gold_for_vetter(candidate=vetted, vetter=expert) is None
    assert services.gold_for_vetter(candidate=vetted, vetter=newcomer) == gold
    records = {r.username: r for r in selectors.gold_records()}
    assert (records["newcomer"].answered, records["newcomer"].correct) == (1, 1)
    services.gold_item_retire(gold=gold, actor=staff)
    assert services.gold_for_vetter(candidate=vetted, vetter=newcomer) is None


def test_it_refuses_a_target_purity_for_a_task_from_non_staff(ml_engineer):
    with pytest.raises(NotAllowed):
        services.triage_target_set(
            task=Task.objects.get(code="CV"), target_purity=0.99, actor=ml_engineer
        )
