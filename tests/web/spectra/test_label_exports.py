"""Vetted-label exports (GRPO rows): versioned, hashed, each row naming the decisions its label
rests on; a GRPO run reads an export's own rows and its lineage names those decisions."""

from __future__ import annotations

import pytest

from agent.formats.verl import read_verl_parquet
from annotation.core.errors import WorkflowError
from annotation.core.models import AuditLog
from annotation.inspections import services
from annotation.inspections.models import ExpertDecision
from annotation.spectra.models import LabelExport, SpectrumLabel
from annotation.spectra.services import label_export_create
from annotation.training_runs import jobs as training_jobs
from annotation.training_runs import services as training_runs_services
from tests.factories import make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

ANSWERS = ["YES", "NO", "NO", "YES"]


@pytest.fixture
def labelled(owner, expert, outsider):
    spectra = [make_spectrum(object_id=f"EXP-{i}", seed=i) for i in range(len(ANSWERS))]
    run = make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.6) for row in spectra}, created_by=owner
    )
    for row, answer in zip(spectra, ANSWERS, strict=True):
        candidate = run.candidates.get(spectrum=row)
        for user in (expert, outsider):
            services.expert_decision_record(candidate=candidate, expert=user, decision=answer)
    return spectra


def test_it_exports_each_label_with_its_own_spectrum_and_decisions(labelled, owner):
    export = label_export_create(actor=owner)
    assert export.version == 1 and len(export.rows) == 4
    for item in export.rows:
        label = SpectrumLabel.objects.get(pk=item["label_id"])
        assert (item["spectrum_id"], item["label"], item["task"]) == (
            label.spectrum_id,
            label.value,
            "CV",
        )
        assert item["object_id"] == label.spectrum.object_id
        decided = ExpertDecision.objects.filter(pk__in=item["decisions"])
        assert {d.candidate.spectrum_id for d in decided} == {label.spectrum_id}
        assert {d.decision for d in decided} == {label.value}
    expected = {f"EXP-{i}": answer for i, answer in enumerate(ANSWERS)}
    assert {item["object_id"]: item["label"] for item in export.rows} == expected
    assert export.manifest["counts"] == {"CV": {"YES": 2, "NO": 2}}
    assert export.manifest["decisions"] == sorted(
        ExpertDecision.objects.values_list("pk", flat=True)
    )
    assert AuditLog.objects.filter(action="label_export_created", object_pk=str(export.pk)).exists()


def test_it_versions_exports_by_content(labelled, owner, expert, third_expert):
    first = label_export_create(actor=owner)
    assert label_export_create(actor=owner) == first  # same content: the same version
    extra = make_spectrum(object_id="EXP-new", seed=99)
    run = make_inspected(spectra=[extra], verdicts={extra.pk: ("NO", 0.5)})
    for user in (expert, third_expert):
        services.expert_decision_record(candidate=run.candidates.get(), expert=user, decision="NO")
    second = label_export_create(actor=owner)
    assert second.version == 2 and second.content_hash != first.content_hash
    assert len(second.rows) == 5
    with pytest.raises(WorkflowError, match="unknown task codes: NOPE"):
        label_export_create(actor=owner, task_codes=["NOPE"])
    with pytest.raises(WorkflowError, match="no vetted label"):
        label_export_create(actor=owner, task_codes=["MG"])


@pytest.fixture
def third_expert(db):
    from tests.factories import UserFactory

    return UserFactory(username="third", roles=["expert"])


def test_it_writes_a_grpo_run_s_rows_from_the_export_not_from_later_labels(
    labelled, owner, ml_engineer, expert, outsider, tiny_model_path, training_dirs, tmp_path
):
    export = label_export_create(actor=owner)
    run = training_runs_services.training_run_create(
        stage="grpo",
        preset="cpu-tiny",
        base_model=str(tiny_model_path),
        label_source={"label_export": export.version},
        created_by=ml_engineer,
    )
    assert run.label_source == {"label_export": 1, "content_hash": export.content_hash}
    # An expert changes their mind afterwards: the run still learns the exported label.
    flipped = labelled[0]
    candidate = flipped.candidate_set.get()
    services.expert_decision_record(candidate=candidate, expert=expert, decision="NO")
    assert SpectrumLabel.objects.get(spectrum=flipped).value == ""
    sources = training_jobs.prepare_data(run, tmp_path)
    rows = read_verl_parquet(tmp_path / training_runs_services.GRPO_DATA_FILE)
    truth = {row["extra_info"]["name"]: row["reward_model"]["ground_truth"] for row in rows}
    assert truth == {f"EXP-{i}": answer for i, answer in enumerate(ANSWERS)}
    assert sources["label_export"]["decisions"] == export.manifest["decisions"]
    assert sources["label_export"]["content_hash"] == export.content_hash


def test_it_refuses_a_grpo_source_naming_no_export(ml_engineer, tiny_model_path, training_dirs):
    with pytest.raises(WorkflowError, match="no vetted-label export version 7"):
        training_runs_services.training_run_create(
            stage="grpo",
            preset="cpu-tiny",
            base_model=str(tiny_model_path),
            label_source={"label_export": 7},
            created_by=ml_engineer,
        )
    assert not LabelExport.objects.exists()


def test_it_exports_from_the_page_and_downloads_the_rows_as_json_lines(labelled, ml_client):
    from django.urls import reverse

    response = ml_client.post(reverse("label_export_create"), {"tasks": ["CV"]})
    assert response.status_code == 302
    export = LabelExport.objects.get()
    listed = ml_client.get(reverse("label_export_list")).content.decode()
    assert "v1" in listed and 'id="label-export-form"' in listed
    download = ml_client.get(reverse("label_export_download", args=[export.version]))
    import json

    lines = [json.loads(line) for line in download.content.decode().splitlines()]
    assert lines[0]["manifest"]["content_hash"] == export.content_hash
    assert lines[1:] == export.rows


def test_it_starts_grpo_from_an_export_through_the_training_form(
    labelled,
    owner,
    ml_client,
    tiny_model_path,
    training_dirs,
    django_capture_on_commit_callbacks,
    monkeypatch,
):
    from django.urls import reverse

    from annotation.training_runs import tasks as training_tasks
    from annotation.training_runs.models import TrainingRun

    monkeypatch.setattr(training_tasks.run_training, "delay", lambda run_id: None)
    export = label_export_create(actor=owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = ml_client.post(
            reverse("training_create"),
            {
                "stage": "grpo",
                "preset": "cpu-tiny",
                "base_model": str(tiny_model_path),
                "label_export": str(export.version),
            },
        )
    assert response.status_code == 302, response.content.decode()[:2000]
    run = TrainingRun.objects.get()
    assert run.label_source == {"label_export": export.version, "content_hash": export.content_hash}


# --- blinding: a rater of an open campaign neither lists, downloads, makes nor trains on an
# export holding its items' spectra or the runs behind them --------------------------------------


@pytest.fixture
def rating_engineer(db):
    from tests.factories import UserFactory

    return UserFactory(username="hubble", roles=["ml_engineer", "rater"])


def open_item(rater, creator, spectrum, *, source: str = "test:item"):
    from annotation.rating.models import CampaignItem, RatingCampaign
    from annotation.spectra.models import Task

    campaign = RatingCampaign.objects.create(name="open", created_by=creator)
    campaign.raters.add(rater)
    CampaignItem.objects.create(
        campaign=campaign,
        blind_id="b1",
        data={},
        policy_name="hidden",
        source=source,
        task=Task.objects.get(code="CV"),
        spectrum=spectrum,
    )
    return campaign


def assert_hidden_from(rater_user, export, *, hidden: bool) -> None:
    from django.test import Client
    from django.urls import reverse

    from annotation.training_runs.forms import TrainingRunForm

    client = Client()
    client.force_login(rater_user)
    link = reverse("label_export_download", args=[export.version])
    assert (link in client.get(reverse("label_export_list")).content.decode()) is not hidden
    assert client.get(link).status_code == (404 if hidden else 200)
    form = TrainingRunForm(user=rater_user)
    assert (export in form.fields["label_export"].queryset) is not hidden


def test_it_hides_a_label_export_from_a_rater_of_an_open_campaign_on_its_spectra(
    labelled, owner, rating_engineer, ml_engineer, staff
):
    from django.test import Client
    from django.urls import reverse

    export = label_export_create(actor=owner)
    campaign = open_item(rating_engineer, staff, labelled[0])
    assert_hidden_from(rating_engineer, export, hidden=True)
    assert_hidden_from(ml_engineer, export, hidden=False)
    client = Client()
    client.force_login(rating_engineer)
    refused = client.post(reverse("label_export_create"), {"tasks": ["CV"]})
    assert refused.status_code == 403 and "open campaign" in refused.content.decode()
    assert LabelExport.objects.count() == 1
    with pytest.raises(WorkflowError, match="open campaign"):
        label_export_create(actor=owner, hidden_hashes=frozenset({labelled[0].content_hash}))
    campaign.closed = True
    campaign.save(update_fields=["closed"])
    assert_hidden_from(rating_engineer, export, hidden=False)


def test_it_hides_a_label_export_resting_on_decisions_about_a_raters_run(
    owner, expert, outsider, rating_engineer, staff
):
    from annotation.inspections.models import Rollout

    spectra = [make_spectrum(object_id=f"RUN-{i}", seed=40 + i) for i in range(3)]
    unlabelled = spectra[2]
    run = make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.6) for row in spectra}, created_by=owner
    )
    for row in spectra[:2]:
        for user in (expert, outsider):
            services.expert_decision_record(
                candidate=run.candidates.get(spectrum=row), expert=user, decision="YES"
            )
    export = label_export_create(actor=owner)
    assert export.manifest["run_ids"] == [run.pk]
    assert unlabelled.content_hash not in {row["content_hash"] for row in export.rows}
    # The rater's item is the run's trajectory on a spectrum the export does not hold: the
    # export's decisions still name the verdicts of that run.
    rollout = Rollout.objects.create(
        candidate=run.candidates.get(spectrum=unlabelled), index=0, data={}, prediction="YES"
    )
    open_item(rating_engineer, staff, unlabelled, source=f"rollout:{rollout.pk}")
    assert_hidden_from(rating_engineer, export, hidden=True)
    with pytest.raises(WorkflowError, match="open campaign"):
        label_export_create(actor=owner, hidden_runs=frozenset({run.pk}))
    # An export made before manifests named their runs is judged by its decisions.
    export.manifest.pop("run_ids")
    export.save(update_fields=["manifest"])
    assert_hidden_from(rating_engineer, export, hidden=True)


def test_it_hides_a_label_export_holding_a_gold_item_s_answer_from_its_waiting_vetter(
    labelled, owner, expert, ml_engineer, staff
):
    """An export's rows (and its manifest's counts) hold the label of every spectrum in it: a
    vetter with a gold item waiting there would read its answer (gold masking)."""
    from annotation.learning import services as learning_services
    from tests.factories import UserFactory

    export = label_export_create(actor=owner)
    candidate = ExpertDecision.objects.filter(expert=expert).first().candidate
    gold = learning_services.gold_item_mark(candidate=candidate, actor=staff)
    vetter = UserFactory(username="gold-engineer", roles=["expert", "ml_engineer"])
    assert_hidden_from(vetter, export, hidden=True)
    assert_hidden_from(ml_engineer, export, hidden=False)  # no gold item waits for them
    learning_services.gold_answer_record(gold=gold, vetter=vetter, answer="YES")
    assert_hidden_from(vetter, export, hidden=False)
