"""Starting a run on the loop's exports through the API (issue 32, item 11), as the training form
does: a vetted-label export for GRPO, an expert-revised export for SFT, a preference export for
DPO, each by version and only among the exports the blinding rule lets the user read. The runs
are recorded, not trained (the job runs on commit, which these tests do not reach)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.curation.revised import revised_export_create
from annotation.inspections import services as inspection_services
from annotation.rating.preferences import preference_export_create
from annotation.spectra.services import label_export_create
from annotation.training_runs.models import TrainingRun
from tests.factories import UserFactory, make_inspected, make_revised_curation, make_spectrum
from tests.web.rating.test_export_apis import open_campaign_on

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def base_model(settings, tmp_path, training_dirs) -> str:
    settings.POLICY_CHECKPOINT_ROOTS = [str(tmp_path)]
    return str(tmp_path / "base")


@pytest.fixture
def loop_exports(owner, expert, outsider, ml_engineer, training_dirs):
    """A vetted-label export (two labels), an expert-revised SFT export and a DPO export."""
    spectra = [make_spectrum(object_id=f"TAPI-{i}", seed=80 + i) for i in range(2)]
    run = make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.6) for row in spectra}, created_by=owner
    )
    for candidate in run.candidates.all():
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=candidate, expert=user, decision="YES"
            )
    make_revised_curation(
        reviser=UserFactory(username="rev", roles=["expert"]),
        auditors=[UserFactory(username="a1"), UserFactory(username="a2")],
        object_id="TAPI-REV",
        seed=90,
    )
    return {
        "spectra": spectra,
        "labels": label_export_create(actor=ml_engineer),
        "revised": revised_export_create(actor=ml_engineer),
        "preference": preference_export_create(actor=ml_engineer),
    }


def start(user, **body):
    return api(user).post(
        reverse("api_training_create"), {"preset": "cpu-tiny", **body}, format="json"
    )


def test_it_starts_each_stage_on_its_loop_export(loop_exports, ml_engineer, base_model):
    labels = loop_exports["labels"]
    grpo = start(ml_engineer, stage="grpo", base_model=base_model, label_export=labels.version)
    assert grpo.status_code == 201, grpo.content
    assert grpo.json()["label_source"] == {
        "label_export": labels.version,
        "content_hash": labels.content_hash,
    }
    for stage, field, kind in (
        ("sft", "revised_export", "revised"),
        ("dpo", "preference_export", "preference"),
    ):
        export = loop_exports[kind]
        made = start(ml_engineer, stage=stage, base_model=base_model, **{field: export.version})
        assert made.status_code == 201, made.content
        body = made.json()
        assert (body["stage"], body["dataset_export"], body["dataset_export_kind"]) == (
            stage,
            export.version,
            kind,
        )
        assert TrainingRun.objects.get(pk=body["id"]).dataset_export == export


def test_it_refuses_a_run_on_two_sources_or_the_wrong_kind(loop_exports, ml_engineer, base_model):
    two = start(
        ml_engineer, stage="sft", base_model=base_model, revised_export=1, preference_export=1
    )
    assert two.status_code == 400 and "not several" in two.json()["dataset_export"][0]
    both = start(
        ml_engineer,
        stage="grpo",
        base_model=base_model,
        label_export=1,
        label_source={"dataset": "x", "tasks": ["CV"]},
    )
    assert both.status_code == 400 and "not both" in both.json()["label_export"][0]
    wrong = start(ml_engineer, stage="sft", base_model=base_model, preference_export=1)
    assert wrong.status_code == 400 and "SFT needs" in wrong.json()["detail"]
    unknown = start(ml_engineer, stage="grpo", base_model=base_model, label_export=9)
    assert unknown.status_code == 404 and "label_export" in unknown.json()["detail"]  # names none
    assert not TrainingRun.objects.exists()


def test_it_does_not_train_a_rater_on_an_export_of_their_open_campaign(
    loop_exports, staff, base_model
):
    rating_engineer = UserFactory(username="hubble", roles=["ml_engineer", "rater"])
    open_campaign_on(loop_exports["spectra"][:1], rating_engineer, staff)
    refused = start(rating_engineer, stage="grpo", base_model=base_model, label_export=1)
    assert refused.status_code == 404 and "label_export" in refused.json()["detail"]  # hidden: none
    assert not TrainingRun.objects.exists()
