"""The closed loop on the CPU with the tiny model (issue 25, "Done when"): a rule-based run; two
experts vet 30 candidates and a third settles their disagreements; labels appear with provenance;
recalibration changes the triage; the labels are exported; a tiny GRPO run trains on the export
and its checkpoint names the decisions; an expert's revision of a draft passes audit and makes the
SFT and DPO exports; a tiny SFT run trains on the revisions and a tiny DPO run, from the GRPO
checkpoint, on the preference pairs, each checkpoint naming its decisions; the DPO checkpoint runs
on the same spectra; the comparison shows what changed; staff promote it; the catalog names the
model behind each verdict."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.catalog import comparisons
from annotation.core.models import AuditLog, JobState
from annotation.curation.revised import revised_export_create
from annotation.inspections import services
from annotation.inspections.models import CatalogEntry, ModelPromotion
from annotation.learning.models import CalibrationFit
from annotation.rating.preferences import preference_export_create
from annotation.spectra.models import SpectrumLabel, Task
from annotation.spectra.services import label_export_create
from annotation.training_runs import services as training_runs_services
from annotation.training_runs.models import PolicyCheckpoint
from tests.factories import UserFactory, make_revised_curation, make_spectrum

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

N = 30


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_closes_the_loop_from_vetting_to_a_promoted_model(
    owner,
    expert,
    outsider,
    staff,
    tiny_model_path,
    training_dirs,
    settings,
    django_capture_on_commit_callbacks,
):
    third = UserFactory(username="third", roles=["expert"])
    settings.POLICY_CHECKPOINT_ROOTS = [str(settings.TRAINING_OUTPUT_ROOT), str(tiny_model_path)]
    cv = Task.objects.get(code="CV")
    # Half with a strong H-alpha line, half without.
    spectra = [
        make_spectrum(object_id=f"LOOP-{i:02d}", seed=i, line_amplitude=2.0 if i % 2 else 0.02)
        for i in range(N)
    ]
    # 1. A rule-based run; candidates under confidence 0.95 go to the experts.
    with django_capture_on_commit_callbacks(execute=True):
        first = services.inspection_run_create(
            task=cv,
            spectrum_ids=[row.pk for row in spectra],
            policy_spec={"kind": "rule-based"},
            created_by=owner,
            confidence_threshold=0.95,
        )
    first.refresh_from_db()
    assert first.candidates.filter(state="done").count() == N
    assert first.model_key.startswith("rule-based@")
    # 2. Two experts vet all 30; they disagree on every fifth; a third expert settles those.
    truth = {row.pk: "YES" if i % 2 else "NO" for i, row in enumerate(spectra)}
    contested = {row.pk for i, row in enumerate(spectra) if i % 5 == 0}
    for candidate in first.candidates.all():
        answer = truth[candidate.spectrum_id]
        other = (
            ("NO" if answer == "YES" else "YES") if candidate.spectrum_id in contested else answer
        )
        services.expert_decision_record(candidate=candidate, expert=expert, decision=answer)
        services.expert_decision_record(candidate=candidate, expert=outsider, decision=other)
    assert CatalogEntry.objects.filter(run=first, label_state="conflict").count() == len(contested)
    for candidate in first.candidates.filter(spectrum_id__in=contested):
        services.expert_decision_record(
            candidate=candidate, expert=third, decision=truth[candidate.spectrum_id]
        )
    # 3. Labels with provenance, each spectrum its own.
    labels = {label.spectrum_id: label for label in SpectrumLabel.objects.all()}
    assert {pk: label.value for pk, label in labels.items()} == truth
    for pk, label in labels.items():
        counted = [d["expert"] for d in label.decisions if d["counted"]]
        if pk in contested:
            assert label.state == "resolved" and counted == ["payne", "outsider", "third"]
        else:
            assert label.state == "agreed" and counted == ["payne", "outsider"]
        assert {d["model_key"] for d in label.decisions} == {first.model_key}
    # 3b. Recalibration changes which candidates the triage sends to experts. The rule-based
    # inspector answers NO to all 30 (0.97 where the line is absent, 0.62 where it is strong),
    # so the labels say its NO is worth less than it claims: refitted on them (the page's Refit,
    # a job), its 0.97 NO answers fall under the run's 0.95 and join the experts' queue.
    routed_before = set(first.candidates.filter(needs_expert=True).values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        client_for(owner).post(
            reverse("calibration_refit"), {"task": "CV", "model_key": first.model_key}
        )
    fit = CalibrationFit.objects.get(model_key=first.model_key)
    assert fit.n_labels == N and fit.version == 1
    routed_after = set(first.candidates.filter(needs_expert=True).values_list("pk", flat=True))
    assert routed_before < routed_after
    assert first.candidates.filter(
        pk__in=routed_after - routed_before, verdict="NO"
    ).count() == len(routed_after - routed_before)
    # 4. The labels are exported as GRPO rows; a tiny GRPO run trains on them.
    export = label_export_create(actor=owner)
    assert export.manifest["rows"] == N
    with django_capture_on_commit_callbacks(execute=True):
        training = training_runs_services.training_run_create(
            stage="grpo",
            preset="cpu-tiny",
            base_model=str(tiny_model_path),
            label_source={"label_export": export.version},
            overrides={"max_steps": 1},
            created_by=owner,
        )
    training.refresh_from_db()
    training.job.refresh_from_db()
    assert training.job.state == JobState.SUCCEEDED, training.job.error
    checkpoint = PolicyCheckpoint.objects.get(run=training)
    learned = checkpoint.lineage["dataset"]["sources"]["label_export"]
    assert learned["decisions"] == export.manifest["decisions"]
    assert learned["version"] == export.version and learned["rows"] == N
    # 4b. An expert revises a drafted trajectory and two auditors approve it: SFT rows from the
    # revision, a DPO pair of revision over draft; tiny runs train on both.
    revision = make_revised_curation(reviser=third, auditors=[expert, outsider], object_id="LOOP-R")
    sft_export = revised_export_create(actor=owner)
    dpo_export = preference_export_create(actor=owner)
    assert sft_export.manifest["rows"] == dpo_export.manifest["rows"] == 1
    assert dpo_export.manifest["by_source"] == {"draft_revision": 1}
    trained = {}
    for stage, data, base in (("sft", sft_export, None), ("dpo", dpo_export, checkpoint)):
        with django_capture_on_commit_callbacks(execute=True):
            run = training_runs_services.training_run_create(
                stage=stage,
                preset="cpu-tiny",
                base_model="" if base else str(tiny_model_path),
                base_checkpoint=base,
                dataset_export=data,
                overrides={"max_steps": 1},
                created_by=owner,
            )
        run.job.refresh_from_db()
        assert run.job.state == JobState.SUCCEEDED, run.job.error
        trained[stage] = PolicyCheckpoint.objects.get(run=run)
        source = trained[stage].lineage["dataset"]["sources"]["dataset_export"]
        assert source["content_hash"] == data.content_hash
        assert source["decisions"] == data.manifest["decisions"]
        assert source["curations"] == [revision.pk]
    # The DPO checkpoint's lineage holds the GRPO one's, with the label decisions it learned.
    base_lineage = trained["dpo"].lineage["base_lineage"]
    assert base_lineage["dataset"]["sources"]["label_export"]["decisions"] == learned["decisions"]
    checkpoint = trained["dpo"]
    # 5. The new checkpoint runs on the same spectra; its model is the weights' hash.
    with django_capture_on_commit_callbacks(execute=True):
        second = services.inspection_run_create(
            task=cv,
            spectrum_ids=[row.pk for row in spectra],
            policy_spec={"kind": "transformers", "model_path": checkpoint.path},
            created_by=owner,
            sampling={"max_new_tokens": 24},
            max_tool_calls=0,
            confidence_threshold=0.75,
        )
    second.refresh_from_db()
    assert second.candidates.filter(state="done").count() == N
    assert second.model_key.startswith("checkpoint:") and len(second.model_key) == 11 + 64
    # 6. The comparison against the rule-based verdicts, vetted labels as truth.
    comparison = comparisons.compare_models(
        entries=CatalogEntry.objects.all(),
        task="CV",
        old_key=first.model_key,
        new_key=second.model_key,
    )
    assert comparison.shared == N and comparison.labelled == N
    old_right = sum(
        e.verdict == truth[e.candidate.spectrum_id]
        for e in CatalogEntry.objects.filter(run=first).select_related("candidate")
    )
    new_right = sum(
        e.verdict == truth[e.candidate.spectrum_id]
        for e in CatalogEntry.objects.filter(run=second).select_related("candidate")
    )
    assert (comparison.old_correct, comparison.new_correct) == (old_right, new_right)
    assert comparison.fixed - comparison.broken == new_right - old_right
    page = client_for(staff).get(
        reverse("catalog_compare"), {"task": "CV", "new": second.model_key, "old": first.model_key}
    )
    assert page.status_code == 200 and f'id="count-shared">{N}<' in page.content.decode()
    # 7. Staff promote the checkpoint; the catalog names the model behind each verdict.
    client_for(staff).post(reverse("model_promote"), {"task": "CV", "model_key": second.model_key})
    assert ModelPromotion.objects.get().model_key == second.model_key
    assert AuditLog.objects.filter(action="model_promoted").count() == 1
    current = client_for(expert).get(reverse("catalog_list"), {"model": "current"})
    assert {row.model_key for row in current.context["rows"]} == {second.model_key}
    assert all(row.model_label.startswith("checkpoint ") for row in current.context["rows"])
    earlier = client_for(expert).get(reverse("catalog_list"), {"model": first.model_key})
    assert {row.run_id for row in earlier.context["rows"]} == {first.pk}
