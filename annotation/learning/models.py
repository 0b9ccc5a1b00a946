"""What the vetting loop learns from experts: confidence recalibrated on vetted labels, the
triage threshold a target purity gives, stratified audit samples, and known-answer (gold) items
with each vetter's answers on them."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from annotation.core.models import Job
from annotation.inspections.models import Candidate
from annotation.spectra.models import Label, Task


class CalibrationFit(models.Model):
    """One version of a model's recalibration for a task, with the vetted labels it was fit on
    (``labels``: [{label_id, spectrum_id, candidate_id, value, raw}]) and its reliability bins
    before and after (``reliability``)."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="calibration_fits")
    model_key = models.CharField(max_length=200)
    model_label = models.CharField(max_length=200, blank=True)
    version = models.PositiveIntegerField()  # per task and model, from 1
    method = models.CharField(max_length=40)
    params = models.JSONField()
    n_labels = models.PositiveIntegerField()
    positives = models.PositiveIntegerField()
    labels = models.JSONField(default=list)
    reliability = models.JSONField(default=dict)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "model_key", "version"], name="one_calibration_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.task_id}:{self.model_key} v{self.version}"


class TriageTarget(models.Model):
    """Staff's target purity for a task's auto-accepted YES verdicts; the latest one holds."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="triage_targets")
    target_purity = models.FloatField()
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class TriageThreshold(models.Model):
    """The threshold one recalibration gave a model on a task and what applying it changed:
    ``details`` keeps the bootstrap and the labelled check, ``changed`` the candidates routed."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="+")
    model_key = models.CharField(max_length=200)
    fit = models.ForeignKey(CalibrationFit, on_delete=models.PROTECT, related_name="thresholds")
    target = models.ForeignKey(
        TriageTarget, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    threshold = models.FloatField(null=True, blank=True)
    threshold_low = models.FloatField(null=True, blank=True)
    threshold_high = models.FloatField(null=True, blank=True)
    details = models.JSONField(default=dict)
    changed = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]


class AuditSample(models.Model):
    """A sample of a model's candidates on a task, stratified by verdict, triage and confidence
    bin; ``strata`` keeps each stratum's population when drawn: [{key, verdict, accepted, low,
    high, population, sampled}]."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="+")
    model_key = models.CharField(max_length=200)
    fit = models.ForeignKey(
        CalibrationFit, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    per_stratum = models.PositiveSmallIntegerField()
    strata = models.JSONField(default=list)
    open = models.BooleanField(default=True)  # its items wait in the vetting queue
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]


class AuditSampleItem(models.Model):
    sample = models.ForeignKey(AuditSample, on_delete=models.CASCADE, related_name="items")
    candidate = models.ForeignKey(Candidate, on_delete=models.PROTECT, related_name="+")
    stratum = models.CharField(max_length=40)

    class Meta:
        ordering = ["sample", "id"]
        constraints = [
            models.UniqueConstraint(fields=["sample", "candidate"], name="one_audit_item")
        ]


class GoldItem(models.Model):
    """A candidate whose answer is known (its spectrum's vetted label when staff marked it),
    shown to vetters as any other: their answers measure them and never make labels."""

    candidate = models.OneToOneField(Candidate, on_delete=models.PROTECT, related_name="gold_item")
    answer = models.CharField(max_length=3, choices=Label.choices)
    active = models.BooleanField(default=True)
    marked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]


class GoldAnswer(models.Model):
    """A vetter's answer on a gold item: measures the vetter, never counts toward a label."""

    gold = models.ForeignKey(GoldItem, on_delete=models.PROTECT, related_name="answers")
    vetter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    answer = models.CharField(max_length=8)  # YES | NO | unsure
    correct = models.BooleanField()  # unsure is not correct
    answered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["gold", "vetter"], name="one_gold_answer_per_vetter")
        ]
        indexes = [models.Index(fields=["vetter"], name="gold_answer_vetter")]
