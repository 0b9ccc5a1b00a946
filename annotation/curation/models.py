"""Curation of cold-start trajectories (paper section 3.2): versions, audits, votes, exports."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from annotation.core.models import Job
from annotation.spectra.models import Label, Spectrum, Task

# --- curation (paper section 3.2) -------------------------------------------------------------


class CurationState(models.TextChoices):
    DRAFTED = "drafted", "drafted"
    SCREENING = "screening", "screening"
    DISCARDED = "discarded", "discarded"
    IN_REVISION = "in_revision", "in revision"
    IN_AUDIT = "in_audit", "in audit"
    CHANGES_REQUESTED = "changes_requested", "changes requested"
    APPROVED = "approved", "approved"
    STANDARDIZED = "standardized", "standardized"
    IN_VOTE = "in_vote", "in vote"
    ACCEPTED = "accepted", "accepted"
    REJECTED = "rejected", "rejected"


class Curation(models.Model):
    """A cold-start trajectory under curation: draft -> screen -> revise -> audit -> vote."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT)
    spectrum = models.ForeignKey(Spectrum, on_delete=models.PROTECT)
    ground_truth = models.CharField(max_length=3, choices=Label.choices)
    state = models.CharField(
        max_length=20, choices=CurationState.choices, default=CurationState.DRAFTED, db_index=True
    )
    audit_round = models.PositiveIntegerField(default=0)
    head_number = models.PositiveIntegerField(default=0)  # number of the latest version
    reviser = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="curations_revised",
    )
    auditor_1 = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    auditor_2 = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    source = models.CharField(max_length=40, default="draft")  # draft | import:sharegpt | ...
    teacher = models.JSONField(default=dict, blank=True)  # the policy info that drafted it
    draft_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL)
    # A copy of an approved trajectory with a known error (PlantedError), sent to auditors to
    # measure their catch rate; never serialized to them, never voted on or exported.
    planted = models.BooleanField(default=False, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "task"])]
        constraints = [
            models.UniqueConstraint(
                fields=["draft_job", "spectrum"],
                condition=models.Q(draft_job__isnull=False, planted=False),
                name="curation_one_draft_per_job_and_spectrum",
            )
        ]

    def __str__(self) -> str:
        return f"curation {self.pk} ({self.task.code}, {self.state})"

    @property
    def auditors(self) -> list[Any]:
        return [user for user in (self.auditor_1, self.auditor_2) if user is not None]

    @property
    def voters(self) -> list[Any]:
        return [user for user in (self.reviser, self.auditor_1, self.auditor_2) if user is not None]


class VersionKind(models.TextChoices):
    DRAFT = "draft", "draft"
    IMPORT = "import", "import"
    REVISION = "revision", "revision"
    STANDARDIZED = "standardized", "standardized"


class TrajectoryVersion(models.Model):
    """One immutable state of a curated trajectory. Images are kept as ImageBlob hashes."""

    curation = models.ForeignKey(Curation, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=VersionKind.choices)
    data = models.JSONField()  # agent Trajectory.to_dict() with PNGs replaced by {"sha256": ...}
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["curation", "number"]
        constraints = [
            models.UniqueConstraint(fields=["curation", "number"], name="version_number_unique")
        ]

    def __str__(self) -> str:
        return f"v{self.number} ({self.kind}) of curation {self.curation_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("trajectory versions are immutable; save a new version instead")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("trajectory versions are never deleted")


class RevisionDraft(models.Model):
    """The reviser's autosaved, not yet submitted edit (the editor's buffer, not a version)."""

    curation = models.OneToOneField(Curation, on_delete=models.CASCADE, related_name="autosave")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    base_number = models.PositiveIntegerField()
    data = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)


class AuditVerdict(models.TextChoices):
    APPROVE = "approve", "approve"
    REQUEST_CHANGES = "request_changes", "request changes"


class Audit(models.Model):
    curation = models.ForeignKey(Curation, on_delete=models.PROTECT, related_name="audits")
    round = models.PositiveIntegerField()
    version_number = models.PositiveIntegerField()
    auditor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    verdict = models.CharField(max_length=16, choices=AuditVerdict.choices)
    comment = models.TextField(blank=True)
    step_comments = models.JSONField(default=dict, blank=True)  # {"step index": "comment"}
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["curation", "round", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["curation", "round", "auditor"], name="one_audit_per_round_and_auditor"
            )
        ]


class VoteValue(models.TextChoices):
    ACCEPT = "accept", "accept"
    REJECT = "reject", "reject"


class Vote(models.Model):
    curation = models.ForeignKey(Curation, on_delete=models.PROTECT, related_name="votes")
    voter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    value = models.CharField(max_length=8, choices=VoteValue.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["curation", "id"]
        constraints = [
            models.UniqueConstraint(fields=["curation", "voter"], name="one_vote_per_voter")
        ]


class ExportKind(models.TextChoices):
    ACCEPTED = "accepted", "SFT: accepted trajectories"
    REVISED = "revised", "SFT: expert-revised trajectories"
    PREFERENCE = "preference", "DPO: preference pairs"


class DatasetExport(models.Model):
    """A versioned training data set (reproducible from its content), one version line per kind:
    SFT rows of accepted trajectories, SFT rows of expert-revised trajectories, or DPO preference
    pairs (annotation.curation.revised, annotation.rating.preferences)."""

    kind = models.CharField(max_length=12, choices=ExportKind.choices, default=ExportKind.ACCEPTED)
    version = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64, db_index=True)
    manifest = models.JSONField()
    archive = models.FileField(upload_to="exports/")  # zip: TRL jsonl, ShareGPT json, images/
    # The curations it holds, for the blinding rule (a rater must not download the sources of
    # what they rate); None for an export made before they were recorded and not readable since.
    curation_ids = models.JSONField(null=True, blank=True)
    # Also for the blinding rule, recorded by the kinds that hold them (None: not recorded): the
    # inspection runs whose rollouts a preference pair shows, and the content hashes of the
    # spectra its rows show.
    run_ids = models.JSONField(null=True, blank=True)
    content_hashes = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "version"], name="export_version_per_kind")
        ]

    def __str__(self) -> str:
        return f"{self.kind} export v{self.version}"


class PlantedErrorKind(models.TextChoices):
    """The error kinds of agent.planting (its module docstring says what each changes)."""

    WRONG_WINDOW = "wrong_window", "wrong wavelength window"
    MISREAD_LINE = "misread_line", "misread line"
    FLIPPED_ANSWER = "flipped_answer", "flipped final answer"
    CONTRADICTING_STEP = "contradicting_step", "step contradicts its tool image"


class PlantRound(models.Model):
    """One planting by staff: copies of approved trajectories, each with a known error."""

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    seed = models.IntegerField()
    kinds = models.JSONField()  # the kinds asked for, in order
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"planted round {self.pk}"


class PlantedError(models.Model):
    """What was planted in a copy (``curation``) of an approved trajectory (``source``)."""

    plant_round = models.ForeignKey(PlantRound, on_delete=models.PROTECT, related_name="errors")
    curation = models.OneToOneField(
        Curation, on_delete=models.PROTECT, related_name="planted_error"
    )
    source = models.ForeignKey(Curation, on_delete=models.PROTECT, related_name="+")
    source_version = models.PositiveIntegerField()
    kind = models.CharField(max_length=24, choices=PlantedErrorKind.choices)
    # The audit step-comment key of the changed turn (a tool step's index, or the answer's).
    target = models.PositiveIntegerField()
    description = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} planted in curation {self.curation_id}"
