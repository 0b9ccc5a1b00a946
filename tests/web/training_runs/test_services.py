"""Training runs from the app: services, the gpu-queue task with the tiny model, the API twins."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core import errors as core_errors
from annotation.core.models import JobState
from annotation.curation.models import DatasetExport
from annotation.spectra.models import Task
from annotation.training_runs import services as training_runs_services
from annotation.training_runs.models import PolicyCheckpoint, TrainingMetric, TrainingRun
from tests.factories import UserFactory, make_spectrum
from training.checkpoint import load_lineage

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("training_dirs")]


@pytest.fixture
def trainer(db):
    return UserFactory(username="trainer", roles=["ml_engineer"])


@pytest.fixture
def colleague(db):
    return UserFactory(username="colleague", roles=["ml_engineer"])


@pytest.fixture
def labelled_spectra(db):
    cv = Task.objects.get(code="CV")
    return [
        make_spectrum(object_id=f"RL-{label}", dataset="rl-tests", task=cv, label=label, seed=seed)
        for seed, label in enumerate(["YES", "NO"])
    ]


def start_sft(trainer, export, tiny_model_path, **overrides):
    return training_runs_services.training_run_create(
        stage="sft",
        preset="cpu-tiny",
        base_model=str(tiny_model_path),
        dataset_export=export,
        overrides=overrides,
        created_by=trainer,
    )


def finished(run):
    run.refresh_from_db()
    run.job.refresh_from_db()
    return run


def losses(run):
    return list(run.metrics.filter(name="loss").order_by("step").values_list("step", flat=True))


# --- through the task, with the tiny model ------------------------------------------------------


@pytest.mark.slow
def test_it_stores_the_loss_of_every_sft_step(
    trainer, export, tiny_model_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        run = start_sft(trainer, export, tiny_model_path)
    assert finished(run).job.state == JobState.SUCCEEDED
    assert losses(run) == [1, 2]
    assert (run.job.done, run.job.total) == (2, 2)


@pytest.mark.slow
def test_it_registers_the_finished_checkpoint_with_its_lineage(
    trainer, export, tiny_model_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        run = start_sft(trainer, export, tiny_model_path, max_steps=1, learning_rate=0.05)
    checkpoint = PolicyCheckpoint.objects.get(run=run)
    lineage = load_lineage(checkpoint.path)
    assert (checkpoint.stage, checkpoint.base_model) == ("sft", str(tiny_model_path))
    assert lineage.dataset["sources"]["dataset_export"]["version"] == export.version
    assert lineage.config["SpecvetSFTConfig"]["learning_rate"] == 0.05
    assert checkpoint.dataset_version == lineage.dataset_version
    assert checkpoint.policy_spec() == {"kind": "transformers", "model_path": checkpoint.path}


@pytest.mark.slow
def test_it_trains_grpo_on_labelled_spectra_and_stores_reward_metrics(
    trainer, labelled_spectra, tiny_model_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        run = training_runs_services.training_run_create(
            stage="grpo",
            preset="cpu-tiny",
            base_model=str(tiny_model_path),
            label_source={"dataset": "rl-tests", "split": "", "tasks": ["CV"], "limit": 10},
            created_by=trainer,
        )
    assert finished(run).job.state == JobState.SUCCEEDED, run.job.error
    names = set(run.metrics.filter(step=1).values_list("name", flat=True))
    assert {"reward_mean", "tool_calls_mean", "response_length_mean"} <= names
    assert PolicyCheckpoint.objects.get(run=run).lineage["dataset"]["rows"] == 2


def test_it_stores_why_a_run_failed(trainer, export, tmp_path, django_capture_on_commit_callbacks):
    missing = tmp_path / "no-such-model"
    with django_capture_on_commit_callbacks(execute=True):
        run = start_sft(trainer, export, missing)
    assert finished(run).job.state == JobState.FAILED
    assert f"The base model folder {missing} does not exist" in run.error
    assert "python -m training.tiny_model" in run.error  # says how to make one
    assert not PolicyCheckpoint.objects.filter(run=run).exists()


# --- services ------------------------------------------------------------------------------------


def test_it_writes_the_preset_the_overrides_and_this_runs_data_into_the_config(
    trainer, export, tiny_model_path
):
    run = start_sft(trainer, export, tiny_model_path, learning_rate=0.001, use_lora=True)
    assert run.config["learning_rate"] == 0.001 and run.config["use_lora"] is True
    assert run.config["use_cpu"] is True  # from training/configs/sft_cpu_tiny.yaml
    assert run.config["sharegpt"] == [f"{run.output_dir}/dataset/sharegpt.json"]
    assert "smoke_tasks" not in run.config
    assert run.config["output_dir"] == run.output_dir


def test_it_writes_a_run_config_the_command_line_reads(trainer, export, tiny_model_path):
    from agent.formats import load_sharegpt_file
    from annotation.training_runs.jobs import prepare_data, write_run_config
    from training.sft import parse_args

    run = start_sft(trainer, export, tiny_model_path, learning_rate=0.003)
    output = Path(run.output_dir)
    output.mkdir(parents=True)
    prepare_data(run, output)
    model_args, data_args, _, training_args = parse_args(
        ["--config", str(write_run_config(run, output))]
    )
    assert (model_args.model_name_or_path, training_args.learning_rate) == (
        str(tiny_model_path),
        0.003,
    )
    (trajectory,) = load_sharegpt_file(Path(data_args.sharegpt[0]))
    assert (trajectory.task, len(trajectory.steps)) == ("CV", 2)


def test_it_unpacks_only_the_sharegpt_files_of_an_export(tmp_path):
    from annotation.training_runs.jobs import extract_sft_export

    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("sharegpt.json", "[]")
        bundle.writestr("sharegpt_images/a.png", b"png")
        bundle.writestr("../escaped.txt", "x")
        bundle.writestr("sharegpt_images/../../escaped.png", b"x")
    export = DatasetExport(version=9, content_hash="0" * 64, manifest={})
    export.archive.save("tampered.zip", ContentFile(archive.getvalue()), save=True)
    extract_sft_export(export, tmp_path / "run" / "dataset")
    found = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert [name for name in found if not name.startswith("media/")] == [
        "run/dataset/sharegpt.json",
        "run/dataset/sharegpt_images/a.png",
    ]


def test_it_enqueues_the_run_only_once_the_transaction_commits(
    trainer, export, tiny_model_path, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = start_sft(trainer, export, tiny_model_path)
    assert len(callbacks) == 1
    assert finished(run).job.state == JobState.QUEUED


def test_it_refuses_an_sft_run_without_a_dataset_export(trainer, tiny_model_path):
    with pytest.raises(core_errors.WorkflowError, match="SFT needs a dataset export"):
        start_sft(trainer, None, tiny_model_path)


def test_it_refuses_grpo_when_no_spectrum_is_labelled_for_the_tasks(trainer, labelled_spectra):
    with pytest.raises(
        core_errors.WorkflowError, match="no spectrum labelled YES or NO for tasks WD"
    ):
        training_runs_services.training_run_create(
            stage="grpo",
            preset="cpu-tiny",
            label_source={"dataset": "rl-tests", "tasks": ["WD"], "limit": 10},
            created_by=trainer,
        )


def test_it_names_an_override_it_does_not_know(trainer, export, tiny_model_path):
    with pytest.raises(core_errors.WorkflowError, match=r"unknown overrides \['warmup'\]"):
        start_sft(trainer, export, tiny_model_path, warmup=3)


def test_it_keeps_the_last_value_of_a_metric_logged_twice_in_one_step(
    trainer, export, tiny_model_path
):
    run = start_sft(trainer, export, tiny_model_path)
    training_runs_services.training_metrics_record(run_id=run.pk, step=3, metrics={"loss": 2.0})
    training_runs_services.training_metrics_record(
        run_id=run.pk, step=3, metrics={"loss": 1.5, "epoch": 1.0}
    )
    rows = TrainingMetric.objects.filter(run=run, step=3).order_by("name")
    assert list(rows.values_list("name", "value")) == [("epoch", 1.0), ("loss", 1.5)]


def test_it_drops_the_metrics_of_an_interrupted_attempt_when_redelivered(
    trainer, export, tiny_model_path
):
    run = start_sft(trainer, export, tiny_model_path)
    assert training_runs_services.training_run_claim(run_id=run.pk)
    training_runs_services.training_metrics_record(run_id=run.pk, step=1, metrics={"loss": 2.0})
    assert training_runs_services.training_run_claim(run_id=run.pk)
    assert not TrainingMetric.objects.filter(run=run).exists()


def test_it_reports_each_step_and_stops_training_once_cancelled(trainer, export, tiny_model_path):
    from annotation.training_runs.jobs import JobControlCallback

    run = start_sft(trainer, export, tiny_model_path)
    training_runs_services.training_run_claim(run_id=run.pk)
    callback, control = JobControlCallback(run.pk, run.job_id), SimpleNamespace()
    callback.on_step_end(None, SimpleNamespace(global_step=3, max_steps=10), control)
    assert not getattr(control, "should_training_stop", False)
    training_runs_services.training_run_cancel(run=run, actor=trainer)
    callback.on_step_end(None, SimpleNamespace(global_step=4, max_steps=10), control)
    assert control.should_training_stop is True
    assert (finished(run).job.done, run.job.total) == (4, 10)


def test_it_registers_nothing_for_a_run_cancelled_before_it_finished(
    trainer, export, tiny_model_path, lineage_folder
):
    run = start_sft(trainer, export, tiny_model_path)
    training_runs_services.training_run_claim(run_id=run.pk)
    assert training_runs_services.training_run_cancel(run=run, actor=trainer)
    result = training_runs_services.training_run_finish(
        run_id=run.pk, checkpoint_path=lineage_folder, result={}
    )
    assert result is None and not PolicyCheckpoint.objects.exists()


def test_it_registers_a_checkpoint_trained_from_the_command_line(trainer, lineage_folder):
    checkpoint = training_runs_services.policy_checkpoint_register(
        path=lineage_folder, name="cli-sft", actor=trainer
    )
    assert (checkpoint.stage, checkpoint.dataset_version) == ("sft", "ab12cd34ef56ab78")
    assert checkpoint.run is None


def test_it_refuses_to_register_a_folder_without_lineage(trainer, tiny_model_path):
    with pytest.raises(core_errors.WorkflowError, match="was not registered"):
        training_runs_services.policy_checkpoint_register(
            path=tiny_model_path, name="bare", actor=trainer
        )


def test_it_evaluates_a_registered_checkpoint_by_name(trainer, lineage_folder):
    from annotation.management.commands.evaluate import _policy_spec

    training_runs_services.policy_checkpoint_register(
        path=lineage_folder, name="cli-sft", actor=trainer
    )
    spec = _policy_spec({"policy": "rule-based", "checkpoint": "cli-sft"})
    assert spec == {"kind": "transformers", "model_path": str(lineage_folder.resolve())}


def test_it_names_the_registered_checkpoints_when_evaluate_gets_an_unknown_one(
    trainer, lineage_folder
):
    training_runs_services.policy_checkpoint_register(
        path=lineage_folder, name="cli-sft", actor=trainer
    )
    with pytest.raises(CommandError, match=r"no checkpoint named 'nope'.*cli-sft"):
        call_command("evaluate", "--checkpoint", "nope")


# --- API -----------------------------------------------------------------------------------------


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.slow
def test_it_starts_a_tiny_sft_run_through_the_api(
    trainer, export, tiny_model_path, django_capture_on_commit_callbacks
):
    body = {
        "stage": "sft",
        "preset": "cpu-tiny",
        "base_model": str(tiny_model_path),
        "dataset_export": export.version,
        "overrides": {"max_steps": 1},
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = api(trainer).post(reverse("api_training_create"), body, format="json")
    assert response.status_code == 201, response.content
    detail = api(trainer).get(reverse("api_training_detail", args=[response.json()["id"]])).json()
    assert detail["state"] == "succeeded"
    assert detail["checkpoint"]["lineage"]["dataset"]["sources"]["dataset_export"]["version"] == 1


def test_it_answers_a_refused_run_with_the_reason(trainer, tiny_model_path):
    body = {"stage": "sft", "preset": "cpu-tiny", "base_model": str(tiny_model_path)}
    response = api(trainer).post(reverse("api_training_create"), body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "detail": "SFT needs a dataset export of accepted or expert-revised trajectories"
    }


def test_it_follows_metrics_after_a_given_row(trainer, export, tiny_model_path):
    run = start_sft(trainer, export, tiny_model_path)
    training_runs_services.training_metrics_record(run_id=run.pk, step=1, metrics={"loss": 2.0})
    first = TrainingMetric.objects.get(run=run).pk
    training_runs_services.training_metrics_record(run_id=run.pk, step=2, metrics={"loss": 1.0})
    url = reverse("api_training_metrics", args=[run.pk])
    rows = api(trainer).get(url, {"after": first, "name": "loss"}).json()["results"]
    assert [(r["step"], r["value"]) for r in rows] == [(2, 1.0)]


def test_it_lists_registered_policies_with_the_spec_an_inspection_run_takes(
    trainer, lineage_folder
):
    training_runs_services.policy_checkpoint_register(
        path=lineage_folder, name="cli-sft", actor=trainer
    )
    (row,) = api(trainer).get(reverse("api_policy_checkpoint_list")).json()["results"]
    assert row["policy_spec"] == {
        "kind": "transformers",
        "model_path": str(lineage_folder.resolve()),
    }


def test_it_lets_only_the_creator_or_staff_cancel_a_run(
    trainer, colleague, export, tiny_model_path
):
    run = start_sft(trainer, export, tiny_model_path)
    url = reverse("api_training_cancel", args=[run.pk])
    assert api(colleague).post(url).status_code == 403
    assert api(trainer).post(url).json()["state"] == "cancelled"


def test_it_refuses_the_api_to_an_anonymous_client(trainer, export, tiny_model_path):
    run = start_sft(trainer, export, tiny_model_path)
    assert APIClient().get(reverse("api_training_detail", args=[run.pk])).status_code == 401
    assert TrainingRun.objects.count() == 1


def test_it_documents_every_training_endpoint_in_the_schema(trainer):
    schema = json.loads(api(trainer).get(reverse("api_schema"), {"format": "json"}).content)
    for path in (
        "/api/training/",
        "/api/training/create/",
        "/api/training/{run_id}/",
        "/api/training/{run_id}/metrics/",
        "/api/training/{run_id}/cancel/",
        "/api/policies/",
    ):
        assert path in schema["paths"]


def test_it_starts_grpo_through_the_api_from_a_label_source(
    trainer, labelled_spectra, tiny_model_path
):
    body = {
        "stage": "grpo",
        "preset": "cpu-tiny",
        "base_model": str(tiny_model_path),
        "label_source": {"dataset": "rl-tests", "tasks": ["cv"]},
    }
    response = api(trainer).post(reverse("api_training_create"), body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["label_source"] == {
        "dataset": "rl-tests",
        "split": "",
        "tasks": ["CV"],
        "limit": training_runs_services.LABEL_SOURCE_MAX,
    }
