from __future__ import annotations

import pytest

from annotation.core import errors as core_errors
from annotation.inspections import jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState, CatalogEntry, LiveStep, Rollout
from tests.factories import ScriptedPolicy, UserFactory, answer_turn, make_spectrum, tool_call_turn

pytestmark = pytest.mark.django_db


class ConfidentPolicy(ScriptedPolicy):
    """Scripted turns plus a reported confidence, like the rule-based inspector."""

    def __init__(self, turns, confidence):
        super().__init__(turns)
        self.confidence = confidence


@pytest.fixture
def vetter(db):
    """Starts the runs and vets; no roles, as the services do not check them."""
    return UserFactory(username="vetter")


def use_policy(monkeypatch, factory):
    monkeypatch.setattr(jobs, "policy_for", lambda spec, sampling=None: factory())


def start_run(cv, vetter, spectra, **kwargs):
    return inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=vetter,
        **kwargs,
    )


def test_it_runs_each_candidate_and_stores_steps_verdict_and_catalog(
    monkeypatch, cv, vetter, django_capture_on_commit_callbacks
):
    use_policy(
        monkeypatch,
        lambda: ConfidentPolicy([tool_call_turn(6500, 6630, "H-alpha"), answer_turn("YES")], 0.9),
    )
    spectra = [make_spectrum(object_id=f"C{i}", seed=i) for i in range(2)]
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, vetter, spectra)
    candidates = list(run.candidates.all())
    assert {c.state for c in candidates} == {CandidateState.DONE}
    assert {c.verdict for c in candidates} == {"YES"}
    assert candidates[0].confidence == pytest.approx(0.9)
    assert LiveStep.objects.filter(candidate=candidates[0]).count() == 2
    entry = CatalogEntry.objects.get(candidate=candidates[0])
    assert (entry.object_id, entry.task_code, entry.verdict) == ("C0", "CV", "YES")


def test_it_sends_uncertain_candidates_to_the_expert_queue(
    monkeypatch, cv, vetter, django_capture_on_commit_callbacks
):
    use_policy(monkeypatch, lambda: ConfidentPolicy([answer_turn("NO")], 0.6))
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, vetter, [make_spectrum()], confidence_threshold=0.75)
    candidate = run.candidates.get()
    assert candidate.needs_expert is True
    inspections_services.expert_decision_record(candidate=candidate, expert=vetter, decision="YES")
    assert CatalogEntry.objects.get(candidate=candidate).expert_decision == "YES"


def test_it_takes_the_majority_over_rollouts(
    monkeypatch, cv, vetter, django_capture_on_commit_callbacks
):
    turns = [answer_turn("YES"), answer_turn("NO"), answer_turn("YES")]
    use_policy(monkeypatch, lambda: ScriptedPolicy(turns))
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, vetter, [make_spectrum()], rollouts=3)
    candidate = run.candidates.get()
    assert candidate.verdict == "YES"
    assert candidate.vote_share == pytest.approx(2 / 3)
    assert Rollout.objects.filter(candidate=candidate).count() == 3


def test_it_fails_a_candidate_with_the_reason_and_retries_it(
    monkeypatch, cv, vetter, django_capture_on_commit_callbacks
):
    class Down(ScriptedPolicy):
        def generate(self, messages):
            raise RuntimeError("endpoint http://127.0.0.1:9/v1 unreachable after 3 attempts")

    use_policy(monkeypatch, lambda: Down([]))
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, vetter, [make_spectrum()])
    candidate = run.candidates.get()
    assert candidate.state == CandidateState.FAILED
    assert "unreachable" in candidate.error
    use_policy(monkeypatch, lambda: ScriptedPolicy([answer_turn("NO")]))
    with django_capture_on_commit_callbacks(execute=True):
        inspections_services.candidate_retry(candidate=candidate, actor=vetter)
    candidate.refresh_from_db()
    assert (candidate.state, candidate.verdict) == (CandidateState.DONE, "NO")


def test_it_resumes_without_duplicating_finished_rollouts(monkeypatch, cv, vetter):
    use_policy(monkeypatch, lambda: ScriptedPolicy([answer_turn("YES")] * 2))
    run = start_run(cv, vetter, [make_spectrum()], rollouts=2)
    candidate = run.candidates.get()
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    # A first worker finished rollout 0 and wrote one live step of rollout 1, then died.
    jobs.run_candidate(candidate.pk)
    Rollout.objects.filter(candidate=candidate, index=1).delete()
    Candidate.objects.filter(pk=candidate.pk).update(state=CandidateState.RUNNING)
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    jobs.run_candidate(candidate.pk)
    assert Rollout.objects.filter(candidate=candidate).count() == 2
    assert LiveStep.objects.filter(candidate=candidate, rollout_index=1).count() == 1


def test_it_cancels_pending_candidates(monkeypatch, cv, vetter):
    run = start_run(
        cv, vetter, [make_spectrum(object_id="A"), make_spectrum(object_id="B", seed=1)]
    )
    assert inspections_services.inspection_run_cancel(run=run, actor=vetter) == 2
    assert not inspections_services.candidate_claim(candidate_id=run.candidates.first().pk)


def test_it_refuses_an_unknown_policy_kind(cv, vetter):
    with pytest.raises(core_errors.WorkflowError, match="policy kind"):
        inspections_services.inspection_run_create(
            task=cv,
            spectrum_ids=[make_spectrum().pk],
            policy_spec={"kind": "magic"},
            created_by=vetter,
        )


def test_it_stores_nothing_of_a_run_whose_creation_fails_half_way(monkeypatch, cv, vetter):
    """Creation is one transaction: a failure after the run row (here, the audit entry) leaves
    no run without candidates, nor candidates without their audit trail."""
    from annotation.inspections.models import InspectionRun

    def broken_audit(**kwargs):
        raise RuntimeError("audit store down")

    monkeypatch.setattr(inspections_services, "audit_log_record", broken_audit)
    with pytest.raises(RuntimeError, match="audit store down"):
        start_run(cv, vetter, [make_spectrum(), make_spectrum()])
    assert InspectionRun.objects.count() == 0
    assert Candidate.objects.count() == 0


class ScopedPolicy(ScriptedPolicy):
    """Answers confidently but records, as the rule-based inspector does, why it should not."""

    def __init__(self, turns, confidence, kind):
        super().__init__(turns, confidence)
        self.kind = kind

    def begin(self, **episode):
        started = super().begin(**episode)
        note = {"kind": self.kind, "subject": "a Wolf-Rayet star", "text": "broad He II 4686"}
        started.decision = {"confidence": self.confidence, "evidence": {"scope": [note]}}
        return started


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("out of scope", "outside what I know"),
        ("coverage", "missing data"),
        # issue 36: the rules and real library spectra disagree, or the spectrum is outside it
        ("library", "outside what I know"),
    ],
)
def test_it_sends_what_the_policy_does_not_know_to_experts_with_its_reason(
    monkeypatch, cv, vetter, django_capture_on_commit_callbacks, kind, reason
):
    use_policy(monkeypatch, lambda: ScopedPolicy([answer_turn("NO")], 0.97, kind))
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, vetter, [make_spectrum()], confidence_threshold=0.75)
    candidate = run.candidates.get()
    assert candidate.confidence == pytest.approx(0.97)
    assert candidate.needs_expert is True
    assert candidate.triage_reason == reason


def test_it_names_low_confidence_and_leaves_confident_answers_without_a_reason(
    monkeypatch, cv, vetter, django_capture_on_commit_callbacks
):
    confidences = [0.6, 0.95]
    use_policy(monkeypatch, lambda: ConfidentPolicy([answer_turn("NO")], confidences.pop(0)))
    spectra = [make_spectrum(object_id=f"T{i}", seed=i) for i in range(2)]
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, vetter, spectra, confidence_threshold=0.75)
    by_confidence = {round(c.confidence, 2): c for c in run.candidates.all()}
    assert by_confidence[0.6].triage_reason == "low confidence"
    assert by_confidence[0.6].needs_expert is True
    assert by_confidence[0.95].triage_reason == ""
    assert by_confidence[0.95].needs_expert is False
