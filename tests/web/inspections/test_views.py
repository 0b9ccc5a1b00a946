from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.spectra.models import Task
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def labelled(db):
    cv = Task.objects.get(code="CV")
    return [
        make_spectrum(object_id="POS", task=cv, label="YES", seed=1, line_amplitude=3.0),
        make_spectrum(object_id="NEG", task=cv, label="NO", seed=2, line_amplitude=0.0),
    ]


def start(ml_client, django_capture_on_commit_callbacks, **overrides):
    data = {
        "task": "CV",
        "labelled_for_task": "on",
        "limit": 10,
        "policy": "rule-based",
        "temperature": 0,
        "rollouts": 1,
        "max_tool_calls": 8,
        "confidence_threshold": 0.99,
    } | overrides
    with django_capture_on_commit_callbacks(execute=True):
        return ml_client.post(reverse("run_create"), data)


def test_it_starts_a_run_on_the_filtered_candidates(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    response = start(ml_client, django_capture_on_commit_callbacks)
    run = InspectionRun.objects.get()
    assert response["Location"] == reverse("run_detail", args=[run.pk])
    assert set(run.candidates.values_list("spectrum__object_id", flat=True)) == {"POS", "NEG"}
    assert set(run.candidates.values_list("state", flat=True)) == {"done"}


def test_it_refuses_several_rollouts_of_a_deterministic_policy(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    response = start(ml_client, django_capture_on_commit_callbacks, rollouts=3)
    assert response.status_code == 200
    assert "deterministic" in response.content.decode()
    assert not InspectionRun.objects.exists()


def test_it_shows_progress_metrics_and_calibration_on_a_labelled_run(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    run = InspectionRun.objects.get()
    response = ml_client.get(reverse("run_detail", args=[run.pk]))
    body = response.content.decode()
    assert response.context["progress"]["finished"] is True
    assert response.context["metrics"]["n"] == 2
    assert 'id="run-metrics"' in body
    assert "2 for experts" in body  # threshold 0.99 sends both to experts


def test_it_stops_progress_polling_when_the_run_is_finished(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    run = InspectionRun.objects.get()
    response = ml_client.get(
        reverse("run_detail", args=[run.pk]), {"part": "progress"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 286


def test_it_shows_the_live_steps_with_images_and_the_inspected_windows(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    response = ml_client.get(reverse("candidate_live", args=[candidate.pk]))
    body = response.content.decode()
    assert response.context["plot_data"]["inspected"]
    assert "/images/" in body
    assert "Verdict" in body


def test_it_ends_the_step_polling_with_an_event_once_finished(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    last = candidate.live_steps.order_by("-id").first().pk
    response = ml_client.get(
        reverse("candidate_steps", args=[candidate.pk]), {"after": last}, HTTP_HX_REQUEST="true"
    )
    assert response.content == b""
    assert "candidate-finished" in response["HX-Trigger"]


def test_it_returns_new_steps_after_a_given_one(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    first = candidate.live_steps.order_by("id").first().pk
    response = ml_client.get(
        reverse("candidate_steps", args=[candidate.pk]), {"after": first}, HTTP_HX_REQUEST="true"
    )
    assert response.content.count(b'class="step card"') == candidate.live_steps.count() - 1


def test_it_reloads_the_live_page_when_another_attempt_replaced_the_steps(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    shown_attempt = candidate.attempts - 1  # the page was opened before a worker was lost
    response = ml_client.get(
        reverse("candidate_steps", args=[candidate.pk]),
        {"after": 0, "attempt": shown_attempt},
        HTTP_HX_REQUEST="true",
    )
    assert response["HX-Refresh"] == "true"


def test_it_polls_with_the_attempt_it_shows(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    Candidate.objects.filter(pk=candidate.pk).update(state=CandidateState.RUNNING)  # still going
    page = ml_client.get(reverse("candidate_live", args=[candidate.pk])).content.decode()
    assert f"attempt={candidate.attempts}" in page


def test_it_serves_stored_tool_images(ml_client, labelled, django_capture_on_commit_callbacks):
    start(ml_client, django_capture_on_commit_callbacks)
    step = (
        Candidate.objects.get(spectrum__object_id="POS")
        .live_steps.exclude(data__tool_result=None)
        .first()
    )
    sha = step.data["tool_result"]["image"]["png_sha256"]
    response = ml_client.get(reverse("image_blob", args=[sha]))
    assert response["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG")


def test_it_runs_and_reports_through_the_api(
    ml_api_client, labelled, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        created = ml_api_client.post(
            reverse("api_run_create"),
            {
                "task": "CV",
                "spectrum_ids": [s.pk for s in labelled],
                "policy": {"kind": "rule-based"},
            },
            format="json",
        )
    assert created.status_code == 201, created.data
    detail = ml_api_client.get(reverse("api_run_detail", args=[created.data["id"]]))
    assert detail.data["progress"]["done"] == 2
    assert detail.data["metrics"]["n"] == 2
    candidate_id = detail.data["candidates"][0]["id"]
    steps = ml_api_client.get(reverse("api_candidate_steps", args=[candidate_id]))
    assert steps.data["state"] == "done" and steps.data["steps"]


def test_it_rejects_a_bad_policy_through_the_api(ml_api_client, labelled):
    response = ml_api_client.post(
        reverse("api_run_create"),
        {"task": "CV", "spectrum_ids": [labelled[0].pk], "policy": {"kind": "oracle"}},
        format="json",
    )
    assert response.status_code == 400
    assert "policy kind" in response.data["detail"]


def test_it_marks_each_policys_own_fields_for_the_form_to_show_that_policy_only(ml_client):
    # Issue 26: checkpoint, model path and endpoint all showed whichever policy was chosen.
    body = ml_client.get(reverse("run_create")).content.decode()
    assert 'data-policy="checkpoint"' in body and 'name="checkpoint"' in body
    assert 'data-policy="transformers"' in body and 'data-policy="openai"' in body
    assert "js/policy_form.js" in body
    # the button sits in its own row, not in a grid column
    assert (
        '<div class="form-actions"><button type="submit" class="primary">Start run</button>' in body
    )


def test_it_says_a_run_without_answers_has_no_metrics_rather_than_ece_zero(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    # Issue 26: a run whose candidates never answered showed "TN 0 / FN 1, ECE 0.000".
    start(ml_client, django_capture_on_commit_callbacks)
    run = InspectionRun.objects.get()
    Candidate.objects.filter(run=run).update(verdict="", confidence=None)
    response = ml_client.get(reverse("run_detail", args=[run.pk]))
    body = response.content.decode()
    metrics = response.context["metrics"]
    assert metrics["answered"] == 0 and metrics["no_answer"] == 2 and metrics["ece"] is None
    assert "None of the 2 labelled candidates got a valid YES or NO answer" in body
    assert "ECE" not in body and 'id="run-metrics"' not in body


def test_it_calibrates_only_the_answers_given(
    ml_client, labelled, django_capture_on_commit_callbacks
):
    start(ml_client, django_capture_on_commit_callbacks)
    run = InspectionRun.objects.get()
    Candidate.objects.filter(run=run, spectrum__object_id="NEG").update(verdict="", confidence=None)
    answered = Candidate.objects.get(run=run, spectrum__object_id="POS")
    metrics = ml_client.get(reverse("run_detail", args=[run.pk])).context["metrics"]
    assert metrics["answered"] == 1 and metrics["no_answer"] == 1
    right = answered.verdict == "YES"
    # one answer in one bin: ECE is |accuracy - confidence| of that answer alone
    assert metrics["ece"] == pytest.approx(abs(float(right) - answered.confidence))
    assert sum(b["count"] for b in metrics["reliability"]) == 1
