"""Training runs from the app (paper sections 3.2-3.3, Figure 6), metrics, checkpoints."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from annotation.core.models import Job
from annotation.curation.models import DatasetExport

# --- training (paper sections 3.2-3.3, Figure 6) --------------------------------------------------


class TrainingStage(models.TextChoices):
    SFT = "sft", "SFT"
    GRPO = "grpo", "GRPO"
    DPO = "dpo", "DPO"


class TrainingRun(models.Model):
    """An SFT, GRPO or DPO run started from the app; its state, progress and error live on ``job``.

    ``config`` holds every value of the run's YAML config (the preset file, then the overrides,
    then the model, data and output paths of this run). The worker writes it to
    OUTPUT_DIR/run_config.yaml, so ``python -m training.<stage> --config`` repeats the run.
    """

    name = models.CharField(max_length=120, blank=True)
    stage = models.CharField(max_length=8, choices=TrainingStage.choices)
    preset = models.CharField(max_length=40)
    config = models.JSONField(default=dict)
    overrides = models.JSONField(default=dict, blank=True)
    base_model = models.CharField(max_length=500)
    base_checkpoint = models.ForeignKey(
        "PolicyCheckpoint",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="derived_runs",
    )
    # SFT trains on an SFT export (accepted or expert-revised trajectories), DPO on a preference
    # export; GRPO on label-only spectra selected by label_source.
    dataset_export = models.ForeignKey(
        DatasetExport,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="training_runs",
    )
    label_source = models.JSONField(default=dict, blank=True)  # {dataset, split, tasks, limit}
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="training_run")
    output_dir = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name or f"{self.stage} run {self.pk}"

    @property
    def error(self) -> str:
        return self.job.error


class TrainingMetric(models.Model):
    """One value of one metric at one optimizer step (names from training.callbacks)."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="metrics")
    step = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    value = models.FloatField()
    epoch = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "name", "step"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "name", "step"], name="one_training_metric_per_step"
            )
        ]
        indexes = [models.Index(fields=["run", "id"], name="training_metric_run_id")]


class PolicyCheckpoint(models.Model):
    """A trained checkpoint registered as a policy that inspection runs and evaluations can use.

    ``lineage`` is the checkpoint's specvet_lineage.json (training.checkpoint.Lineage): the base
    model, the dataset version, the full config and the final metrics.
    """

    name = models.CharField(max_length=120, unique=True)
    stage = models.CharField(max_length=8, choices=TrainingStage.choices)
    path = models.CharField(max_length=500, unique=True)
    lineage = models.JSONField()
    dataset_version = models.CharField(max_length=64, blank=True)
    base_model = models.CharField(max_length=500, blank=True)
    run = models.OneToOneField(
        TrainingRun,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="checkpoint",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name

    def policy_spec(self) -> dict[str, Any]:
        return {"kind": "transformers", "model_path": self.path}
