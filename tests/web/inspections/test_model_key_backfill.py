"""Migration 0023 backfills the model key of runs made before 0021 (which had none), on the
run, its catalog entries, the decisions made on its candidates and the labels' provenance."""

from __future__ import annotations

import datetime as dt
import importlib
import os

import pytest
from django.apps import apps
from django.utils import timezone

from annotation.inspections import services
from annotation.inspections.lineage import weights_sha256
from annotation.inspections.models import CatalogEntry, ExpertDecision, InspectionRun
from annotation.spectra.models import SpectrumLabel
from tests.factories import make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

migration = importlib.import_module("annotation.migrations.0025_issue25exports_loop_exports")


def as_before_0021(run: InspectionRun) -> None:
    """Blank what 0021 added, as a run made before it holds."""
    InspectionRun.objects.filter(pk=run.pk).update(model_key="", model_label="")
    CatalogEntry.objects.filter(run=run).update(model_key="", model_label="")
    ExpertDecision.objects.filter(candidate__run=run).update(model_key_seen="", model_label_seen="")
    for label in SpectrumLabel.objects.all():
        for decision in label.decisions:
            decision["model_key"] = decision["model_label"] = ""
        SpectrumLabel.objects.filter(pk=label.pk).update(decisions=label.decisions)


@pytest.fixture
def vetted_run(owner, expert, outsider):
    spectra = [make_spectrum(object_id=f"OLD-{i}", seed=i) for i in range(3)]
    run = make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.6) for row in spectra}, created_by=owner
    )
    for candidate in run.candidates.all():
        for user in (expert, outsider):
            services.expert_decision_record(candidate=candidate, expert=user, decision="YES")
    return run


def test_it_backfills_a_rule_based_run_everywhere_its_key_is_shown(vetted_run):
    key, label = vetted_run.model_key, vetted_run.model_label
    assert key.startswith("rule-based@")
    as_before_0021(vetted_run)
    migration.backfill_model_keys(apps, None)
    vetted_run.refresh_from_db()
    assert (vetted_run.model_key, vetted_run.model_label) == (key, label)
    entries = CatalogEntry.objects.filter(run=vetted_run)
    assert entries.count() == 3 and set(entries.values_list("model_key", flat=True)) == {key}
    decisions = ExpertDecision.objects.filter(candidate__run=vetted_run)
    assert decisions.count() == 6
    assert set(decisions.values_list("model_key_seen", "model_label_seen")) == {(key, label)}
    for row in SpectrumLabel.objects.all():
        assert {(d["model_key"], d["model_label"]) for d in row.decisions} == {(key, label)}


def test_it_leaves_runs_that_have_a_key_alone(vetted_run):
    InspectionRun.objects.filter(pk=vetted_run.pk).update(model_key="endpoint:kept/m")
    migration.backfill_model_keys(apps, None)
    vetted_run.refresh_from_db()
    assert vetted_run.model_key == "endpoint:kept/m"


def test_it_names_a_checkpoint_by_its_weights_only_when_they_predate_the_run(vetted_run, tmp_path):
    folder = tmp_path / "old-checkpoint"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights of the old run")
    spec = {"kind": "transformers", "model_path": str(folder)}
    InspectionRun.objects.filter(pk=vetted_run.pk).update(
        policy_spec=spec, policy_info={}, created_at=timezone.now() + dt.timedelta(minutes=1)
    )
    as_before_0021(vetted_run)
    migration.backfill_model_keys(apps, None)
    vetted_run.refresh_from_db()
    assert vetted_run.model_key == f"checkpoint:{weights_sha256(folder)}"
    # Weights written after the run: not the ones it loaded; the key names the folder.
    later = dt.datetime.now().timestamp() + 3600
    os.utime(folder / "model.safetensors", (later, later))
    as_before_0021(vetted_run)
    migration.backfill_model_keys(apps, None)
    vetted_run.refresh_from_db()
    assert vetted_run.model_key == f"checkpoint-path:{folder}"
    assert set(CatalogEntry.objects.filter(run=vetted_run).values_list("model_key", flat=True)) == {
        f"checkpoint-path:{folder}"
    }
