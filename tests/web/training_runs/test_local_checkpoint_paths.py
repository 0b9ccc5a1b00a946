"""A local checkpoint path typed by a user is loaded only from a registered or allowed folder."""

from __future__ import annotations

import pytest

from annotation.core.errors import WorkflowError
from annotation.inspections import services as inspections_services
from annotation.spectra.models import Task
from annotation.training_runs import services as training_runs_services
from tests.factories import UserFactory, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer(db):
    return UserFactory(roles=["ml_engineer"])


@pytest.fixture
def roots(settings, tmp_path):
    allowed = tmp_path / "checkpoints"
    allowed.mkdir()
    settings.POLICY_CHECKPOINT_ROOTS = [allowed]
    return allowed


def start(user, model_path):
    row = make_spectrum(object_id="LOCAL-1")
    return inspections_services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[row.pk],
        policy_spec={"kind": "transformers", "model_path": model_path},
        created_by=user,
    )


@pytest.mark.parametrize(
    "model_path", ["/etc", "/root/.cache/huggingface", "relative/folder", "{roots}/../../outside"]
)
def test_it_refuses_a_folder_outside_the_checkpoint_roots(engineer, roots, model_path):
    with pytest.raises(WorkflowError, match="neither a registered checkpoint nor inside"):
        start(engineer, model_path.format(roots=roots))


def test_it_accepts_a_folder_inside_a_checkpoint_root(engineer, roots):
    run = start(engineer, str(roots / "sft-7b"))
    assert run.policy_spec["model_path"] == str(roots / "sft-7b")


def test_it_refuses_a_training_base_model_outside_the_roots(engineer, roots):
    with pytest.raises(WorkflowError, match="neither a registered checkpoint nor inside"):
        training_runs_services.training_run_create(
            stage="grpo",
            preset="cpu-tiny",
            created_by=engineer,
            base_model="/etc",
            label_source={"dataset": "specvi-mini", "split": "train", "tasks": ["CV"]},
        )
