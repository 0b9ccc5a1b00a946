"""Spectra and the inspection tasks they are labelled for."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Task(models.Model):
    """An inspection task, as data: the prompt, the inspector and the plot markers derive from it.

    Built-in tasks are seeded from agent/data/tasks.json; experts can add more in the admin.
    ``windows`` holds a list of {name, rest_range, lines, kind, look_for} (vacuum Angstrom).
    """

    code = models.CharField(max_length=16, unique=True)
    name = models.CharField(max_length=120)
    question = models.TextField()
    guideline = models.TextField()
    windows = models.JSONField(default=list)
    contaminants = models.JSONField(default=list, blank=True)
    builtin = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.code}: {self.name}"

    def clean(self) -> None:
        """Validate the definition the way the agent will read it, so the admin refuses a
        task that would break prompts, the inspector or the plot markers."""
        from django.core.exceptions import ValidationError

        from agent.inspection_tasks import task_from_dict

        try:
            task_from_dict(
                {
                    "code": self.code,
                    "name": self.name,
                    "question": self.question,
                    "guideline": self.guideline,
                    "windows": self.windows,
                    "contaminants": self.contaminants,
                }
            )
        except ValueError as error:
            raise ValidationError(str(error)) from error


class Label(models.TextChoices):
    YES = "YES", "YES"
    NO = "NO", "NO"


class Spectrum(models.Model):
    """One spectrum with its arrays (compressed NPZ) and the metadata lists filter on."""

    object_id = models.CharField(max_length=120, db_index=True)
    survey = models.CharField(max_length=40, db_index=True)
    ra = models.FloatField(null=True, blank=True)
    dec = models.FloatField(null=True, blank=True)
    snr = models.FloatField(null=True, blank=True)
    redshift = models.FloatField(default=0.0)
    n_pixels = models.PositiveIntegerField()
    wavelength_min = models.FloatField()
    wavelength_max = models.FloatField()
    arrays = models.BinaryField()
    content_hash = models.CharField(max_length=64, db_index=True)
    meta = models.JSONField(default=dict, blank=True)
    source_name = models.CharField(max_length=255, blank=True)
    # Instrumental resolution for lists and pages; the full FWHM(lambda) travels with the arrays.
    resolution_r = models.FloatField(
        null=True, blank=True, help_text="resolving power lambda/FWHM at 6000 Å"
    )
    resolution_source = models.CharField(
        max_length=20,
        blank=True,
        help_text="file, survey default, sampling estimate or user (agent.resolution)",
    )

    # Where it came from and, for labelled sets, what it is.
    dataset = models.CharField(max_length=80, db_index=True, default="uploads")
    split = models.CharField(max_length=16, blank=True)
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.PROTECT)
    label = models.CharField(max_length=3, choices=Label.choices, blank=True)
    synthetic = models.BooleanField(default=False)

    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "content_hash"], name="spectrum_unique_per_dataset"
            )
        ]
        indexes = [models.Index(fields=["task", "label"])]

    def __str__(self) -> str:
        return f"{self.survey} {self.object_id}"


class SpectrumLabel(models.Model):
    """A spectrum's label for a task made by experts' vetting decisions (annotation.spectra.labels
    states the rule), with the decisions behind it: who, when, and which model's verdict they saw.

    A row exists once any expert has decided; ``value`` is empty until the rule gives a label.
    """

    spectrum = models.ForeignKey(Spectrum, on_delete=models.PROTECT, related_name="vetted_labels")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="vetted_labels")
    state = models.CharField(max_length=10)  # labels.LabelState
    value = models.CharField(max_length=3, choices=Label.choices, blank=True)
    decisions = models.JSONField(default=list)  # [labels.DecisionRecord.as_dict()], oldest first
    labelled_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["spectrum", "task"], name="one_label_per_task")
        ]
        indexes = [models.Index(fields=["task", "state"], name="spectrum_label_task_state")]

    def __str__(self) -> str:
        return f"{self.task_id}:{self.spectrum_id} {self.state} {self.value}"


class LabelExport(models.Model):
    """A versioned export of vetted labels, the rows GRPO learns from: each row is a spectrum,
    a task, its label and the ids of the expert decisions the label rests on. ``rows`` is the
    export itself (its content hash covers them), so a training run reads exactly this version
    however the labels change later."""

    version = models.PositiveIntegerField(unique=True)
    content_hash = models.CharField(max_length=64, db_index=True)
    manifest = models.JSONField()  # counts per task and label, decision ids, hash, task filter
    rows = (
        models.JSONField()
    )  # [{label_id, spectrum_id, object_id, survey, task, label, decisions}]
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"vetted labels v{self.version}"


class RedshiftSource(models.TextChoices):
    FIT = "fit", "cross-correlation fit"
    OVERRIDE = "override", "typed by the expert"


class RedshiftDecision(models.Model):
    """An expert's redshift for a spectrum: a cross-correlation alternative accepted, or a value
    typed over it. Rows are never changed; the newest is the spectrum's vetted redshift (the
    file's own, ``Spectrum.redshift``, stays as read)."""

    spectrum = models.ForeignKey(
        Spectrum, on_delete=models.CASCADE, related_name="redshift_decisions"
    )
    z = models.FloatField()
    z_err = models.FloatField(null=True, blank=True)
    source = models.CharField(max_length=10, choices=RedshiftSource.choices)
    template = models.CharField(max_length=200, blank=True)  # the accepted alternative's
    rank = models.PositiveSmallIntegerField(null=True, blank=True)  # 1 = the fit's best
    r_value = models.FloatField(null=True, blank=True)  # Tonry & Davis r of that alternative
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-decided_at", "-id"]
        indexes = [
            models.Index(fields=["spectrum", "-decided_at"], name="redshift_decision_latest")
        ]

    def __str__(self) -> str:
        return f"{self.spectrum_id}: z={self.z} ({self.source})"


class SpectrumEmbedding(models.Model):
    """A spectrum's vector for "find more like this" (agent.similarity: rest frame, common
    log-wavelength grid and resolution, continuum divided out, projected on ``basis``), or why
    it has none (``error``). Written whenever a spectrum is stored or its redshift changes
    (annotation.spectra.embeddings); deleted with the spectrum."""

    spectrum = models.OneToOneField(Spectrum, on_delete=models.CASCADE, related_name="embedding")
    basis = models.CharField(max_length=40)  # agent.similarity.Basis.id
    redshift = models.FloatField()  # the rest frame it was computed in
    vector = models.BinaryField(blank=True)  # float32, basis size; empty when ``error``
    error = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["spectrum_id"]

    def __str__(self) -> str:
        return f"embedding of {self.spectrum_id} ({self.basis})"
