"""specvet's persistent state. Writes go through annotation/services.py only."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F


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


class AuditLogQuerySet(models.QuerySet["AuditLog"]):
    def update(self, **kwargs: Any) -> int:
        raise ValueError("audit log entries are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise ValueError("audit log entries are append-only")


class AuditLog(models.Model):
    """Append-only record of every decision: who, when, what, from which state to which.

    The object is referenced by model name and primary key, never by a foreign key, so no
    cascade ever reaches this table. The actor is PROTECT (not SET_NULL, which would update
    rows): a user with history cannot be deleted, only deactivated. On PostgreSQL a trigger
    refuses UPDATE and DELETE as well (migration 0011).
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    action = models.CharField(max_length=60)
    object_type = models.CharField(max_length=60)
    object_pk = models.CharField(max_length=64)
    from_state = models.CharField(max_length=40, blank=True)
    to_state = models.CharField(max_length=40, blank=True)
    comment = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AuditLogQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["object_type", "object_pk"]),
            models.Index(fields=["action", "id"], name="auditlog_action"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.action} on {self.object_type} {self.object_pk}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None:
            raise ValueError("audit log entries are append-only")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        raise ValueError("audit log entries are append-only")


class JobState(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


class Job(models.Model):
    """Long work done by Celery (drafts, inspections, judges, evaluations, training).

    Pages read progress from here; the web never blocks on a model.
    """

    FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    kind = models.CharField(max_length=40, db_index=True)
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.QUEUED, db_index=True
    )
    params = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.kind} job {self.pk} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in self.FINISHED_STATES

    @property
    def percent(self) -> int:
        if not self.total:
            return 100 if self.finished else 0
        return min(100, round(100 * (self.done + self.failed) / self.total))


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


class ImageBlob(models.Model):
    """A PNG stored once by content (trajectory versions share their tool images)."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    png = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)


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
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "task"])]
        constraints = [
            models.UniqueConstraint(
                fields=["draft_job", "spectrum"],
                condition=models.Q(draft_job__isnull=False),
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


class DatasetExport(models.Model):
    """A versioned SFT dataset made of accepted trajectories (reproducible from its content)."""

    version = models.PositiveIntegerField(unique=True)
    content_hash = models.CharField(max_length=64, db_index=True)
    manifest = models.JSONField()
    archive = models.FileField(upload_to="exports/")  # zip: TRL jsonl, ShareGPT json, images/
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]


# --- model endpoints ---------------------------------------------------------------------------


class ModelEndpoint(models.Model):
    """An OpenAI-compatible model server that staff registered: the only place a model call goes.

    The credential is a reference (an environment variable's name or a secret file's path),
    resolved when a call is made, so a key is only ever sent to the endpoint that names it and
    never stored in the database. Endpoints are disabled, never deleted: runs and judges keep
    pointing at the one they used.
    """

    name = models.CharField(max_length=60, unique=True)
    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=200)
    credential_env = models.CharField(
        max_length=100, blank=True, help_text="environment variable holding the API key"
    )
    credential_file = models.CharField(
        max_length=500, blank=True, help_text="secret file holding the API key"
    )
    timeout = models.FloatField(default=60.0, help_text="seconds per request")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def credential_kind(self) -> str:
        if self.credential_env:
            return "env"
        return "file" if self.credential_file else "none"


# --- inspection runs, catalog and triage --------------------------------------------------------


class InspectionRun(models.Model):
    """A policy run over candidate spectra for one task; each candidate is a Celery task."""

    name = models.CharField(max_length=120, blank=True)
    task = models.ForeignKey(Task, on_delete=models.PROTECT)
    policy_spec = models.JSONField()  # {"kind": "rule-based" | "transformers" | "openai", ...}
    policy_info = models.JSONField(default=dict, blank=True)  # what the policy reported
    # kind "openai" only; policy_spec keeps the endpoint's name and model as they were.
    endpoint = models.ForeignKey(
        ModelEndpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    sampling = models.JSONField(default=dict, blank=True)
    rollouts = models.PositiveSmallIntegerField(default=1)  # per candidate (self-consistency)
    max_tool_calls = models.PositiveSmallIntegerField(default=8)
    confidence_threshold = models.FloatField(default=0.0)  # below: sent to the expert queue
    cancelled = models.BooleanField(default=False)
    code_version = models.CharField(max_length=80, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name or f"run {self.pk}"


class CandidateState(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


class Candidate(models.Model):
    run = models.ForeignKey(InspectionRun, on_delete=models.CASCADE, related_name="candidates")
    spectrum = models.ForeignKey(Spectrum, on_delete=models.PROTECT)
    state = models.CharField(
        max_length=12, choices=CandidateState.choices, default=CandidateState.PENDING
    )
    verdict = models.CharField(max_length=3, choices=Label.choices, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    vote_share = models.FloatField(null=True, blank=True)
    needs_expert = models.BooleanField(default=False, db_index=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "spectrum"], name="one_candidate_per_spectrum")
        ]
        indexes = [models.Index(fields=["run", "state"])]


class Rollout(models.Model):
    """One finished episode of a candidate (written once, when the episode is complete)."""

    candidate = models.ForeignKey(Candidate, on_delete=models.CASCADE, related_name="rollouts")
    index = models.PositiveSmallIntegerField()
    data = models.JSONField()  # trajectory dict with PNGs as blob hashes
    prediction = models.CharField(max_length=3, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    n_tool_calls = models.PositiveSmallIntegerField(default=0)
    format_ok = models.BooleanField(default=False)
    stop_reason = models.CharField(max_length=20, blank=True)
    seconds = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["candidate", "index"]
        constraints = [
            models.UniqueConstraint(fields=["candidate", "index"], name="one_rollout_per_index")
        ]


class LiveStep(models.Model):
    """A step as it happens (the live view reads these; the job never waits for a reader)."""

    candidate = models.ForeignKey(Candidate, on_delete=models.CASCADE, related_name="live_steps")
    rollout_index = models.PositiveSmallIntegerField()
    step_index = models.PositiveSmallIntegerField()
    data = models.JSONField()  # step dict with the PNG as a blob hash
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["candidate", "rollout_index", "step_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["candidate", "rollout_index", "step_index"], name="one_live_step"
            )
        ]


class ExpertDecisionValue(models.TextChoices):
    YES = "YES", "YES"
    NO = "NO", "NO"
    UNSURE = "unsure", "unsure"


class ExpertDecision(models.Model):
    candidate = models.ForeignKey(
        Candidate, on_delete=models.PROTECT, related_name="expert_decisions"
    )
    expert = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decision = models.CharField(max_length=8, choices=ExpertDecisionValue.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["candidate", "id"]
        constraints = [
            models.UniqueConstraint(fields=["candidate", "expert"], name="one_decision_per_expert")
        ]


class CatalogEntry(models.Model):
    """One vetting result, denormalized so filtering and sorting a million rows stays fast."""

    candidate = models.OneToOneField(
        Candidate, null=True, blank=True, on_delete=models.CASCADE, related_name="catalog_entry"
    )
    run = models.ForeignKey(InspectionRun, on_delete=models.CASCADE, related_name="catalog")
    object_id = models.CharField(max_length=120)
    survey = models.CharField(max_length=40)
    ra = models.FloatField(null=True, blank=True)
    dec = models.FloatField(null=True, blank=True)
    task_code = models.CharField(max_length=16)
    verdict = models.CharField(max_length=3, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    snr = models.FloatField(null=True, blank=True)
    policy_name = models.CharField(max_length=120)
    expert_decision = models.CharField(max_length=8, blank=True)
    synthetic = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(
                fields=["task_code", "verdict", "-confidence"], name="catalog_task_verdict"
            ),
            models.Index(fields=["task_code", "-confidence"], name="catalog_task_conf"),
            models.Index(fields=["survey", "task_code"], name="catalog_survey_task"),
            models.Index(fields=["object_id"], name="catalog_object"),
            # Prefix search is LIKE 'J1234%', which a plain btree cannot serve under a
            # non-C collation; the pattern opclass can (PostgreSQL only; ignored elsewhere).
            models.Index(
                fields=["object_id"],
                name="catalog_object_prefix",
                opclasses=["varchar_pattern_ops"],
            ),
            models.Index(fields=["expert_decision", "task_code"], name="catalog_expert"),
            # The list's sorts, id breaking ties: each index matches one ORDER BY exactly, so a
            # page is an index walk instead of a sort of every matching row. The S/N sort
            # (DESC NULLS LAST) has a PostgreSQL-only index in migration 0008: SQLite cannot
            # declare NULLS LAST in an index.
            models.Index(F("created_at").desc(), F("id").desc(), name="catalog_created"),
            models.Index(
                F("task_code"), F("created_at").desc(), F("id").desc(), name="catalog_task_created"
            ),
            models.Index(F("confidence").desc(), F("id").desc(), name="catalog_confidence"),
        ]


# --- expert rating (paper section 4.5, appendix G) ------------------------------------------------


class RatingCampaign(models.Model):
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    raters_per_item = models.PositiveSmallIntegerField(default=2)
    raters = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="rating_campaigns")
    closed = models.BooleanField(default=False)
    seed = models.BigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name


class CampaignItem(models.Model):
    """A frozen copy of one trajectory to rate; raters see only its blind id."""

    campaign = models.ForeignKey(RatingCampaign, on_delete=models.CASCADE, related_name="items")
    blind_id = models.CharField(max_length=16)
    data = models.JSONField()  # trajectory dict, PNGs as blob hashes
    policy_name = models.CharField(max_length=120)  # hidden from raters until the analysis
    source = models.CharField(max_length=80)  # "rollout:12", "curation:3@v4", "import:file#2"
    dataset = models.CharField(max_length=80, blank=True)  # survey or data set, for breakdowns
    task = models.ForeignKey(Task, on_delete=models.PROTECT)
    spectrum = models.ForeignKey(Spectrum, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["campaign", "id"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "blind_id"], name="blind_id_unique"),
            models.UniqueConstraint(fields=["campaign", "source"], name="item_source_unique"),
        ]


class RatingAssignment(models.Model):
    item = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="assignments")
    rater = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()  # the rater's own random order
    score = models.PositiveSmallIntegerField(null=True, blank=True)
    comment = models.TextField(blank=True)
    rated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rater", "position"]
        constraints = [
            models.UniqueConstraint(fields=["item", "rater"], name="one_assignment_per_rater"),
            models.CheckConstraint(
                condition=models.Q(score__isnull=True) | models.Q(score__lte=5),
                name="score_0_to_5",
            ),
        ]


class PairOutcome(models.TextChoices):
    LEFT = "left", "left better"
    TIE = "tie", "tie"
    RIGHT = "right", "right better"


class PairItem(models.Model):
    """Two trajectories for the same spectrum from two policies; sides drawn at random."""

    campaign = models.ForeignKey(RatingCampaign, on_delete=models.CASCADE, related_name="pairs")
    left = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="+")
    right = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="+")
    dataset = models.CharField(max_length=80, blank=True)

    class Meta:
        ordering = ["campaign", "id"]


class PairJudgement(models.Model):
    pair = models.ForeignKey(PairItem, on_delete=models.CASCADE, related_name="judgements")
    rater = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    position = models.PositiveIntegerField()
    outcome = models.CharField(max_length=5, choices=PairOutcome.choices, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rater", "position"]
        constraints = [
            models.UniqueConstraint(fields=["pair", "rater"], name="one_judgement_per_rater")
        ]


class Judge(models.Model):
    """An LLM judge: a registered model endpoint and a rubric prompt."""

    name = models.CharField(max_length=80, unique=True)
    # Null only for a judge whose endpoint went missing; calls always go to this endpoint.
    endpoint = models.ForeignKey(
        ModelEndpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="judges"
    )
    # Provenance snapshots taken at creation; never used to make a call.
    base_url = models.CharField(max_length=500, blank=True)
    model = models.CharField(max_length=200)
    prompt = models.TextField(help_text="The rubric prompt (paper Table 7)")
    include_images = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class JudgeScore(models.Model):
    judge = models.ForeignKey(Judge, on_delete=models.PROTECT, related_name="scores")
    item = models.ForeignKey(CampaignItem, on_delete=models.CASCADE, related_name="judge_scores")
    score = models.PositiveSmallIntegerField(null=True, blank=True)  # None: no valid score given
    reason = models.TextField(blank=True)
    raw = models.TextField(blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["judge", "item"], name="one_score_per_judge_and_item")
        ]


# --- training (paper sections 3.2-3.3, Figure 6) --------------------------------------------------


class TrainingStage(models.TextChoices):
    SFT = "sft", "SFT"
    GRPO = "grpo", "GRPO"


class TrainingRun(models.Model):
    """An SFT or GRPO run started from the app; its state, progress and error live on ``job``.

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
    # SFT trains on a curation export; GRPO on label-only spectra selected by label_source.
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
