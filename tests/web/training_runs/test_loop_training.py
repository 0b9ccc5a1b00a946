"""Training from the loop's exports (issue 25): an SFT run on expert revisions and a DPO run on
preference pairs, each with the tiny model on the CPU; the checkpoint's lineage names the export
and the decisions behind its rows."""

from __future__ import annotations

import math

import pytest

from annotation.core.errors import WorkflowError
from annotation.core.models import JobState
from annotation.curation.revised import revised_export_create
from annotation.inspections.lineage import weights_sha256
from annotation.rating.preferences import preference_export_create
from annotation.training_runs import services
from annotation.training_runs.models import PolicyCheckpoint
from tests.factories import UserFactory, make_revised_curation

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def revisions(db, training_dirs):
    people = {
        "reviser": UserFactory(username="rev", roles=["expert"]),
        "auditors": [UserFactory(username="a1"), UserFactory(username="a2")],
    }
    return [make_revised_curation(**people, object_id=f"REV-T{i}", seed=70 + i) for i in range(2)]


def train(trainer, stage, export, tiny_model_path, capture):
    with capture(execute=True):
        run = services.training_run_create(
            stage=stage,
            preset="cpu-tiny",
            base_model=str(tiny_model_path),
            dataset_export=export,
            overrides={"max_steps": 1},
            created_by=trainer,
        )
    run.refresh_from_db()
    run.job.refresh_from_db()
    assert run.job.state == JobState.SUCCEEDED, run.job.error
    return PolicyCheckpoint.objects.get(run=run)


@pytest.fixture
def trainer(db):
    return UserFactory(username="trainer", roles=["ml_engineer"])


def test_it_trains_sft_on_expert_revisions_and_names_them(
    revisions, trainer, tiny_model_path, django_capture_on_commit_callbacks
):
    export = revised_export_create(actor=trainer)
    checkpoint = train(trainer, "sft", export, tiny_model_path, django_capture_on_commit_callbacks)
    learned = checkpoint.lineage["dataset"]["sources"]["dataset_export"]
    assert learned["kind"] == "revised" and learned["version"] == export.version
    assert learned["content_hash"] == export.content_hash
    assert learned["decisions"] == export.manifest["decisions"]
    assert learned["curations"] == sorted(c.pk for c in revisions)
    assert checkpoint.lineage["dataset"]["rows"] == 2


def test_it_trains_dpo_on_preference_pairs_and_names_them(
    revisions, trainer, tiny_model_path, django_capture_on_commit_callbacks
):
    export = preference_export_create(actor=trainer)
    assert export.manifest["rows"] == 2
    checkpoint = train(trainer, "dpo", export, tiny_model_path, django_capture_on_commit_callbacks)
    assert checkpoint.stage == "dpo" and checkpoint.lineage["stage"] == "dpo"
    learned = checkpoint.lineage["dataset"]["sources"]["dataset_export"]
    assert learned["kind"] == "preference" and learned["rows"] == 2
    assert learned["decisions"]["revisions"] == [[c.pk, 2] for c in revisions]
    assert checkpoint.lineage["dataset"]["rows"] == 2
    # One optimizer step at the preset's learning rate moved the weights.
    assert weights_sha256(checkpoint.path) != weights_sha256(tiny_model_path)
    # At the first step the policy is its own reference: the DPO loss is -log sigmoid(0).
    assert checkpoint.lineage["metrics"]["loss"] == pytest.approx(math.log(2), abs=1e-3)


def test_it_refuses_a_stage_the_export_does_not_feed(revisions, trainer, tiny_model_path):
    revised = revised_export_create(actor=trainer)
    preference = preference_export_create(actor=trainer)
    with pytest.raises(WorkflowError, match="DPO needs a preference export"):
        services.training_run_create(
            stage="dpo",
            preset="cpu-tiny",
            base_model=str(tiny_model_path),
            dataset_export=revised,
            created_by=trainer,
        )
    with pytest.raises(WorkflowError, match="SFT needs a dataset export"):
        services.training_run_create(
            stage="sft",
            preset="cpu-tiny",
            base_model=str(tiny_model_path),
            dataset_export=preference,
            created_by=trainer,
        )
