"""Training data from the loop (issue 25 item 4): export kinds, each with its own version line,
and what the blinding rule needs to know of them; and model keys for runs made before 0021.

Runs made before 0021_issue25_loop have no model key, so the catalog, the comparison page and
the labels' provenance cannot say which model made their verdicts. The backfill derives each
key as a new run's is derived (annotation.inspections.lineage.model_identity) and copies it to
the run's catalog entries, to the expert decisions made on its candidates (the verdict they saw
was this run's) and to those decisions in the spectra's label provenance.
"""

from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import migrations, models

from annotation.inspections.lineage import _weight_files, model_identity, weights_sha256


def _weights_digest(model_path: str, before: datetime) -> str:
    """The checkpoint's weight hash, when its weight files are still those the run loaded: all
    written before the run was made. A folder retrained since (or gone) gives "", and the key
    falls back to the path, which names the folder and not its weights."""
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return ""
    files = _weight_files(folder)
    if not files or any(path.stat().st_mtime > before.timestamp() for path in files):
        return ""
    return weights_sha256(folder)


def backfill_model_keys(apps: Any, schema_editor: Any) -> None:
    InspectionRun = apps.get_model("annotation", "InspectionRun")
    CatalogEntry = apps.get_model("annotation", "CatalogEntry")
    ExpertDecision = apps.get_model("annotation", "ExpertDecision")
    SpectrumLabel = apps.get_model("annotation", "SpectrumLabel")
    seen: dict[int, tuple[str, str]] = {}  # decision id -> (key, label)
    runs = InspectionRun.objects.filter(model_key="").order_by("pk")
    for run in runs.only("pk", "policy_spec", "policy_info", "code_version", "created_at"):
        spec, info = dict(run.policy_spec or {}), dict(run.policy_info or {})
        if spec.get("kind") == "transformers" and not info.get("weights_sha256"):
            digest = _weights_digest(str(spec.get("model_path") or ""), run.created_at)
            if digest:
                info["weights_sha256"] = digest
        key, label = model_identity(spec, info, code_version=run.code_version)
        InspectionRun.objects.filter(pk=run.pk).update(model_key=key, model_label=label)
        CatalogEntry.objects.filter(run_id=run.pk, model_key="").update(
            model_key=key, model_label=label
        )
        decisions = ExpertDecision.objects.filter(candidate__run_id=run.pk, model_key_seen="")
        seen.update((pk, (key, label)) for pk in decisions.values_list("pk", flat=True))
        decisions.update(model_key_seen=key, model_label_seen=label)
    if not seen:
        return
    for row in SpectrumLabel.objects.all().only("pk", "decisions").iterator():
        changed = False
        for decision in row.decisions:
            found = seen.get(decision.get("decision_id"))
            if found is not None and not decision.get("model_key"):
                decision["model_key"], decision["model_label"] = found
                changed = True
        if changed:
            SpectrumLabel.objects.filter(pk=row.pk).update(decisions=row.decisions)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0024_issue25calib_learning"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="datasetexport",
            name="content_hashes",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="datasetexport",
            name="kind",
            field=models.CharField(
                choices=[
                    ("accepted", "SFT: accepted trajectories"),
                    ("revised", "SFT: expert-revised trajectories"),
                    ("preference", "DPO: preference pairs"),
                ],
                default="accepted",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="datasetexport",
            name="run_ids",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="datasetexport",
            name="version",
            field=models.PositiveIntegerField(),
        ),
        migrations.AddConstraint(
            model_name="datasetexport",
            constraint=models.UniqueConstraint(
                fields=("kind", "version"), name="export_version_per_kind"
            ),
        ),
        migrations.AlterField(
            model_name="policycheckpoint",
            name="stage",
            field=models.CharField(
                choices=[("sft", "SFT"), ("grpo", "GRPO"), ("dpo", "DPO")], max_length=8
            ),
        ),
        migrations.AlterField(
            model_name="trainingrun",
            name="stage",
            field=models.CharField(
                choices=[("sft", "SFT"), ("grpo", "GRPO"), ("dpo", "DPO")], max_length=8
            ),
        ),
        migrations.RunPython(backfill_model_keys, migrations.RunPython.noop, elidable=True),
    ]
