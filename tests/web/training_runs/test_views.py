"""Training pages: start a run, follow it live, choose its checkpoint as an inspection policy."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotation.core import services as core_services
from annotation.core.models import JobState
from annotation.inspections.models import InspectionRun
from annotation.spectra.models import Task
from annotation.training_runs import services as training_runs_services
from annotation.training_runs.models import TrainingMetric, TrainingRun
from tests.factories import UserFactory, make_spectrum

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("training_dirs")]


@pytest.fixture
def colleague(db):
    return UserFactory(username="colleague", roles=["ml_engineer"])


@pytest.fixture
def run(ml_engineer, export, tiny_model_path):
    return training_runs_services.training_run_create(
        stage="sft",
        preset="cpu-tiny",
        base_model=str(tiny_model_path),
        dataset_export=export,
        created_by=ml_engineer,
    )


@pytest.fixture
def checkpoint(ml_engineer, lineage_folder):
    return training_runs_services.policy_checkpoint_register(
        path=lineage_folder, name="cli-sft", actor=ml_engineer
    )


def poll(client, run, after=0):
    return client.get(
        reverse("training_detail", args=[run.pk]),
        {"part": "progress", "after": after},
        HTTP_HX_REQUEST="true",
    )


def json_script(body: str, element_id: str):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', body)
    assert match, f"no json_script {element_id}"
    return json.loads(match.group(1))


@pytest.mark.slow
def test_it_starts_a_tiny_sft_run_from_the_page(
    ml_client, export, tiny_model_path, django_capture_on_commit_callbacks
):
    form = {
        "stage": "sft",
        "preset": "cpu-tiny",
        "base_model": str(tiny_model_path),
        "dataset_export": export.pk,
        "max_steps": 1,
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = ml_client.post(reverse("training_create"), form)
    run = TrainingRun.objects.get()
    assert response["Location"] == reverse("training_detail", args=[run.pk])
    page = ml_client.get(response["Location"]).content.decode()
    assert "succeeded" in page
    assert f"Checkpoint registered as policy <strong>sft-run-{run.pk}</strong>" in page


def test_it_explains_what_a_grpo_run_lacks(ml_client):
    response = ml_client.post(reverse("training_create"), {"stage": "grpo", "preset": "gpu"})
    body = response.content.decode()
    assert response.status_code == 200
    assert "GRPO needs labelled spectra; choose their data set" in body
    assert "choose at least one task" in body
    assert not TrainingRun.objects.exists()


def test_it_shows_the_services_refusal_on_the_form(ml_client, export):
    form = {"stage": "sft", "preset": "gpu", "dataset_export": export.pk}
    body = ml_client.post(reverse("training_create"), form).content.decode()
    assert "the gpu preset names no base model" in body


def test_it_offers_the_labelled_data_sets_for_grpo(ml_client):
    make_spectrum(
        object_id="RL-1", dataset="rl-tests", task=Task.objects.get(code="CV"), label="NO"
    )
    make_spectrum(object_id="UNLABELLED", dataset="uploads-only")
    body = ml_client.get(reverse("training_create"), {"stage": "grpo"}).content.decode()
    assert '<option value="rl-tests">' in body
    assert "uploads-only" not in body


def test_it_keeps_polling_while_the_run_is_queued(ml_client, run):
    response = poll(ml_client, run)
    assert response.status_code == 200
    assert 'hx-trigger="every 2s"' in response.content.decode()


def test_it_stops_polling_once_the_run_has_finished(ml_client, run, lineage_folder):
    training_runs_services.training_run_claim(run_id=run.pk)
    training_runs_services.training_run_finish(
        run_id=run.pk, checkpoint_path=lineage_folder, result={}
    )
    response = poll(ml_client, run)
    assert response.status_code == 286
    assert "hx-trigger" not in response.content.decode()


def test_it_sends_each_poll_only_the_points_recorded_since_the_last(ml_client, run):
    training_runs_services.training_metrics_record(run_id=run.pk, step=1, metrics={"loss": 2.5})
    first = json_script(poll(ml_client, run).content.decode(), "training-points")
    training_runs_services.training_metrics_record(run_id=run.pk, step=2, metrics={"loss": 2.0})
    body = poll(ml_client, run, after=first["last_id"]).content.decode()
    assert json_script(body, "training-points")["series"]["loss"] == {"x": [2], "y": [2.0]}
    last = TrainingMetric.objects.filter(run=run).latest("id").pk
    assert f"after={last}" in body


def test_it_draws_the_figure_6_curves_from_data_not_inline_script(ml_client, run):
    training_runs_services.training_metrics_record(
        run_id=run.pk, step=1, metrics={"loss": 2.5, "reward_mean": 0.4, "val_f1": 0.5}
    )
    body = ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    series = json_script(body, "training-chart")["series"]
    assert (series["loss"]["y"], series["reward_mean"]["y"], series["val_f1"]["y"]) == (
        [2.5],
        [0.4],
        [0.5],
    )
    assert "js/training.js" in body and "vendor/plotly-" in body
    assert not re.search(r"<script(?![^>]*(\bsrc=|application/json))", body)


def test_it_escapes_a_failure_message(ml_client, run):
    training_runs_services.training_run_claim(run_id=run.pk)
    core_services.job_fail(job_id=run.job_id, error="ValueError: <script>alert('pwned')</script>")
    body = ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in body
    assert "<script>alert" not in body


def test_it_escapes_a_run_name_in_the_list(ml_client, export, tiny_model_path, ml_engineer):
    training_runs_services.training_run_create(
        stage="sft",
        preset="cpu-tiny",
        base_model=str(tiny_model_path),
        dataset_export=export,
        name='<img src=x onerror="alert(1)">',
        created_by=ml_engineer,
    )
    body = ml_client.get(reverse("training_list")).content.decode()
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body
    assert "<img src=x" not in body


def test_it_redirects_an_outsider_to_the_login_page(run):
    for url in (
        reverse("training_list"),
        reverse("training_create"),
        reverse("training_detail", args=[run.pk]),
    ):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_lets_only_the_creator_or_staff_cancel_from_the_page(ml_client, colleague, run):
    other = Client()
    other.force_login(colleague)
    assert other.post(reverse("training_cancel", args=[run.pk])).status_code == 403
    ml_client.post(reverse("training_cancel", args=[run.pk]))
    run.job.refresh_from_db()
    assert run.job.state == JobState.CANCELLED


def test_it_links_training_from_the_navigation(ml_client):
    body = ml_client.get(reverse("home")).content.decode()
    assert f'href="{reverse("training_list")}"' in body


def test_it_lists_registered_policies_with_their_lineage(ml_client, checkpoint):
    body = ml_client.get(reverse("training_list")).content.decode()
    assert "cli-sft" in body and "ab12cd34ef56ab78" in body
    assert f"?policy=checkpoint&amp;checkpoint={checkpoint.pk}" in body


# --- the checkpoint as an inspection policy -----------------------------------------------------


def test_it_offers_a_registered_checkpoint_as_an_inspection_policy_with_its_lineage(
    ml_client, checkpoint, tiny_model_path
):
    body = ml_client.get(reverse("run_create")).content.decode()
    assert "Registered checkpoint" in body
    assert f"cli-sft · SFT · data ab12cd34ef56ab78 · base {tiny_model_path} · lr 2e-05" in body


def test_it_starts_an_inspection_run_with_the_checkpoint_as_policy(ml_client, checkpoint):
    make_spectrum(object_id="CAND-1", task=Task.objects.get(code="CV"), label="YES")
    form = {
        "task": "CV",
        "labelled_for_task": "on",
        "limit": 10,
        "policy": "checkpoint",
        "checkpoint": checkpoint.pk,
        "temperature": 0,
        "rollouts": 1,
        "max_tool_calls": 8,
        "confidence_threshold": 0.5,
    }
    ml_client.post(reverse("run_create"), form)
    run = InspectionRun.objects.get()
    assert run.policy_spec == {"kind": "transformers", "model_path": checkpoint.path}
    page = ml_client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "Policy cli-sft: registered checkpoint" in page and "ab12cd34ef56ab78" in page


def test_it_asks_which_checkpoint_when_none_is_chosen(ml_client, checkpoint):
    form = {"task": "CV", "limit": 10, "policy": "checkpoint", "temperature": 0, "rollouts": 1}
    form |= {"max_tool_calls": 8, "confidence_threshold": 0.5}
    body = ml_client.post(reverse("run_create"), form).content.decode()
    assert "choose one of the registered checkpoints" in body
    assert not InspectionRun.objects.exists()


def test_it_explains_a_missing_base_model_without_a_traceback(ml_client, run, tmp_path):
    from annotation.training_runs import jobs as training_jobs

    missing = tmp_path / "specvet-tiny-qwen25vl"
    TrainingRun.objects.filter(pk=run.pk).update(base_model=str(missing))
    training_runs_services.training_run_claim(run_id=run.pk)
    training_jobs.run_training(run.pk)
    run.job.refresh_from_db()
    assert run.job.state == JobState.FAILED
    body = ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    assert f"python -m training.tiny_model {missing}" in body
    assert "Traceback" not in body and "Technical details" not in body
    assert 'value="0"' in body and 'value="100"' not in body  # failed at step 0, not 100 %
    assert 'id="charts-empty"' in body and 'id="chart-loss"' not in body


def test_it_folds_an_unexpected_failures_traceback_under_its_reason(ml_client, run):
    training_runs_services.training_run_claim(run_id=run.pk)
    core_services.job_fail(
        job_id=run.job_id,
        error='OSError: disk full\n\nTraceback (most recent call last):\n  File "x"',
    )
    body = ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    reason = body.index("OSError: disk full")
    assert reason < body.index("<summary>Technical details</summary>") < body.index("Traceback")


def test_it_shows_each_stage_only_its_own_charts(ml_client, run):
    training_runs_services.training_metrics_record(run_id=run.pk, step=1, metrics={"loss": 2.5})
    body = ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    assert 'id="chart-loss"' in body
    assert 'id="chart-reward"' not in body and 'id="chart-length"' not in body
    # An SFT run without validation tasks measures no F1: no empty F1 chart (issue 26).
    assert not run.config.get("validation_tasks")
    assert 'id="chart-f1"' not in body


def test_it_shows_the_f1_chart_of_an_sft_run_that_validates(ml_client, run):
    training_runs_services.training_metrics_record(
        run_id=run.pk, step=1, metrics={"loss": 2.5, "val_f1": 0.5}
    )
    body = ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    assert 'id="chart-f1"' in body


def test_it_takes_the_cancel_button_away_once_a_polled_run_has_finished(
    ml_client, run, lineage_folder
):
    assert "Cancel run" in ml_client.get(reverse("training_detail", args=[run.pk])).content.decode()
    training_runs_services.training_run_claim(run_id=run.pk)
    training_runs_services.training_metrics_record(run_id=run.pk, step=1, metrics={"loss": 2.5})
    training_runs_services.training_run_finish(
        run_id=run.pk, checkpoint_path=lineage_folder, result={}
    )
    body = poll(ml_client, run).content.decode()
    actions = re.search(r'<div id="training-actions" hx-swap-oob="true">(.*?)</div>', body, re.S)
    assert actions is not None and "Cancel run" not in actions.group(1)
    # the steps logged: the "charts fill in" note goes
    empty = re.search(r'<p[^>]*id="charts-empty"[^>]*>', body)
    assert empty is not None and "hx-swap-oob" in empty.group(0) and "hidden" in empty.group(0)
    assert "The charts fill in" not in body


def test_it_says_no_step_was_logged_when_a_polled_run_finishes_without_one(ml_client, run):
    training_runs_services.training_run_claim(run_id=run.pk)
    core_services.job_fail(job_id=run.job_id, error="OSError: disk full")
    body = poll(ml_client, run).content.decode()
    assert re.search(r'id="charts-empty" hx-swap-oob="true">No step was logged', body)


def test_it_marks_each_stages_data_fields_for_the_form_to_show_one_stage(ml_client):
    body = ml_client.get(reverse("training_create")).content.decode()
    assert '<fieldset data-stage="sft">' in body and '<fieldset data-stage="grpo">' in body
    assert "js/training.js" in body


def test_it_names_the_base_model_field_by_its_label_when_refusing_its_folder(ml_client, export):
    # Issue 37: the refusal said "model_path" under a field labelled "Base model".
    form = {
        "stage": "sft",
        "preset": "cpu-tiny",
        "base_model": "/nowhere/qwen",
        "dataset_export": export.pk,
    }
    response = ml_client.post(reverse("training_create"), form)
    body = response.content.decode()
    assert "Base model &#x27;/nowhere/qwen&#x27; is neither a registered checkpoint" in body
    assert "model_path" not in body
    assert not TrainingRun.objects.exists()
