from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from rest_framework.test import APIClient


@pytest.fixture
def cv(db):
    """Task CV (cataclysmic variables), seeded by the migrations."""
    from annotation.spectra.models import Task

    return Task.objects.get(code="CV")


@pytest.fixture
def ml_client(ml_engineer) -> Client:
    client = Client()
    client.force_login(ml_engineer)
    return client


@pytest.fixture
def ml_api_client(ml_engineer) -> APIClient:
    client = APIClient()
    client.force_authenticate(ml_engineer)
    return client


@pytest.fixture
def expert_client(expert) -> Client:
    client = Client()
    client.force_login(expert)
    return client


@pytest.fixture
def api_client(expert) -> APIClient:
    client = APIClient()
    client.force_authenticate(expert)
    return client


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """The tiny random Qwen2.5-VL of the training tests (built once per session)."""
    from agent.policies.tiny_qwen import build_tiny_qwen25vl

    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny_qwen25vl_web"))


@pytest.fixture
def training_dirs(settings, tmp_path):
    """Training runs and dataset exports write under the test's own folder."""
    settings.TRAINING_OUTPUT_ROOT = tmp_path / "training"
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def export(db, training_dirs):
    """A curation export (v1) of one accepted two-step CV trajectory."""
    from annotation.curation import datasets as services
    from annotation.curation.models import Curation, CurationState
    from tests.factories import make_curation

    curation = make_curation(object_id="ACCEPTED-1")
    Curation.objects.filter(pk=curation.pk).update(state=CurationState.ACCEPTED)
    return services.dataset_export_create(actor=None)


@pytest.fixture
def lineage_folder(tmp_path, tiny_model_path):
    """A checkpoint folder trained outside the app (the CLI); registering reads its lineage."""
    import json

    from training.checkpoint import LINEAGE_FILE, new_lineage

    folder = tmp_path / "cli-sft"
    folder.mkdir()
    lineage = new_lineage(
        stage="sft",
        base_model=tiny_model_path,
        dataset_version="ab12cd34ef56ab78",
        dataset={"rows": 3, "sources": {"sharegpt": ["train_sharegpt.json"]}},
        config={"SpecvetSFTConfig": {"learning_rate": 2e-5}, "ModelArguments": {}},
    )
    (folder / LINEAGE_FILE).write_text(json.dumps(lineage.to_dict()), encoding="utf-8")
    return folder.resolve()


@pytest.fixture(scope="package", autouse=True)
def _rules_without_the_library() -> Iterator[None]:
    """The web tests' spectra are built in the tests, all outside the real library: the
    rule-based inspector answers with its rules alone here (SPECVET_LIBRARY=off), as without the
    real-data cache; the library's own tests are in tests/agent. Package scope: the module-scoped
    worlds (security_world, the blinding world) run inspections too, before any function-scoped
    fixture."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECVET_LIBRARY", "off")
        yield


@pytest.fixture(autouse=True)
def _checkpoint_roots(settings, tmp_path_factory):
    """Tests load tiny checkpoints from pytest's own temporary folders, and only from there."""
    settings.POLICY_CHECKPOINT_ROOTS = [tmp_path_factory.getbasetemp()]
