"""Inspection runs, candidates, rollouts and live steps, and the catalog rows a run writes
(the catalog domain reads them; it owns no tables)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F

from annotation.core.models import Job, ModelEndpoint
from annotation.spectra.models import Label, Spectrum, Task

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
    # The model behind every verdict of the run (annotation.inspections.lineage): a stable key
    # ("rule-based@<version>", "checkpoint:<sha256>", "endpoint:<name>/<model>") and its label.
    model_key = models.CharField(max_length=200, blank=True, db_index=True)
    model_label = models.CharField(max_length=200, blank=True)
    # The background re-check: its sample (rate, first candidate) and what it found (counts,
    # the first mismatches with their differences). See annotation.inspections.reproduction.
    reproducibility = models.JSONField(default=dict, blank=True)
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


class TriageReason(models.TextChoices):
    """Why a candidate went to experts (blank: it did not)."""

    NO_VERDICT = "no verdict", "no verdict"
    LOW_CONFIDENCE = "low confidence", "low confidence"
    OUTSIDE_KNOWLEDGE = "outside what I know", "outside what I know"
    MISSING_DATA = "missing data", "missing data"
    # The run (or its subset) differs from the calibration set, or is not compared with it
    # yet (annotation.inspections.shifts): a confident answer waits for experts.
    DISTRIBUTION_SHIFT = "distribution shift", "distribution shift"
    SHIFT_PENDING = "shift check pending", "shift check pending"


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
    triage_reason = models.CharField(max_length=24, choices=TriageReason.choices, blank=True)
    # Staff queue actions (annotation.inspections.queue_actions): the one expert whose queue
    # shows the candidate (none: every expert's), and why it was taken out of the queue.
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    queue_closed_reason = models.CharField(max_length=200, blank=True, default="", db_default="")
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When a pending candidate is sent again after a model endpoint outage (``error`` says
    # why it waits); null when it waits for nothing (queued, resent, or not pending).
    retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "spectrum"], name="one_candidate_per_spectrum")
        ]
        indexes = [
            models.Index(fields=["run", "state"]),
            # The vetting queue's order (finished_at, id) over the candidates routed to experts
            # alone: its oldest are an index walk (learning.queue.oldest), not a sort of them all.
            # It holds the columns the queue tests (PostgreSQL), so the walk and the count of
            # the routed candidates read the index alone.
            models.Index(
                fields=["finished_at", "id"],
                name="candidate_queue_order",
                condition=models.Q(needs_expert=True),
                include=[
                    "spectrum_id",
                    "run_id",
                    "state",
                    "queue_closed_reason",
                    "assigned_to_id",
                    "verdict",
                    "confidence",
                ],
            ),  # fmt: skip
        ]


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
    # How securely the spectrum supports the decision, 0-4 (annotation.inspections.quality),
    # and what is wrong with the data (issue flag codes); both optional.
    quality = models.PositiveSmallIntegerField(null=True, blank=True)
    issues = models.JSONField(default=list, blank=True)
    # What the expert was shown when deciding: the agent's verdict and the model behind it.
    verdict_seen = models.CharField(max_length=3, blank=True)
    confidence_seen = models.FloatField(null=True, blank=True)
    model_key_seen = models.CharField(max_length=200, blank=True)
    model_label_seen = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

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
    model_key = models.CharField(max_length=200, blank=True)
    model_label = models.CharField(max_length=200, blank=True)
    # The spectrum's vetted label for the task (spectra.SpectrumLabel) and its state.
    vetted_label = models.CharField(max_length=3, blank=True)
    label_state = models.CharField(max_length=10, blank=True)
    # The experts' quality (mean over those who gave one) and every issue flag any of them
    # raised, comma-separated codes (annotation.inspections.quality).
    expert_quality = models.FloatField(null=True, blank=True)
    expert_issues = models.CharField(max_length=200, blank=True, default="", db_default="")
    synthetic = models.BooleanField(default=False)
    # The entry's run, or its subset, has shifted from the calibration set (ShiftCheck).
    shifted = models.BooleanField(default=False, db_default=False)
    # The candidate's evidence ablation (EvidenceAblation.outcome); blank: not run.
    evidence_outcome = models.CharField(max_length=12, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)
    # Which stored spectrum the entry is about: the same file in three data sets is three
    # spectra, told apart by data set and spectrum id and grouped by content hash (issue 26).
    spectrum = models.ForeignKey(
        Spectrum, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    dataset = models.CharField(max_length=80, blank=True, default="", db_default="")
    designation = models.CharField(max_length=24, blank=True, default="", db_default="")
    content_hash = models.CharField(max_length=64, blank=True, default="", db_default="")

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["content_hash"], name="catalog_content_hash"),
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
            # Finding rows (catalog.search): designation prefix, the cone search's (dec, ra)
            # bounding box, the data-set filter.
            models.Index(
                fields=["designation"],
                name="catalog_designation_prefix",
                opclasses=["varchar_pattern_ops"],
            ),
            models.Index(fields=["dec", "ra"], name="catalog_position"),
            models.Index(fields=["dataset"], name="catalog_dataset"),
            models.Index(fields=["expert_decision", "task_code"], name="catalog_expert"),
            models.Index(fields=["task_code", "label_state"], name="catalog_label_state"),
            # The vetting queue's conflicts and its labelled candidates (left out) by state, the
            # few entries with one: an anti-join instead of a read of every entry.
            models.Index(
                fields=["label_state", "candidate"],
                name="catalog_state_candidate",
                condition=~models.Q(label_state=""),
            ),
            models.Index(fields=["task_code", "model_key"], name="catalog_task_model"),
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


class ShiftState(models.TextChoices):
    PENDING = "pending", "pending"  # not compared yet: confident answers wait for experts
    CLEAR = "clear", "clear"
    SHIFTED = "shifted", "shifted"
    # Was shifted; a recalibration's calibration set (with the vetted labels) now covers it.
    RECALIBRATED = "recalibrated", "recalibrated"
    FAILED = "failed", "failed"  # the comparison could not run; answers wait for experts


class ShiftCheck(models.Model):
    """The shift sentinel's comparison of a run's spectra with its model's calibration set
    (annotation.inspections.shifts); the latest check of a run holds. ``groups`` keeps, per
    group (the run, then each survey in it), each feature's KS statistic, p-value and PSI."""

    run = models.ForeignKey(InspectionRun, on_delete=models.CASCADE, related_name="shift_checks")
    state = models.CharField(max_length=12, choices=ShiftState.choices)
    # learning.CalibrationFit's id (no foreign key: learning sits above this domain)
    calibration_fit_id = models.PositiveIntegerField(null=True, blank=True)
    reference = models.CharField(max_length=200)  # what the run was compared with, in words
    n_run = models.PositiveIntegerField(default=0)
    n_reference = models.PositiveIntegerField(default=0)
    shifted_groups = models.JSONField(default=list)  # group keys: "" the run, "survey=X"
    groups = models.JSONField(default=list)
    library = models.CharField(max_length=200, blank=True)  # the distance used, or why none
    routed = models.JSONField(default=dict)  # candidates sent to experts / released
    error = models.TextField(blank=True)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["run", "-id"], name="shift_check_run_latest")]


class ModelPromotion(models.Model):
    """Staff made ``model_key`` the current model for ``task``: the latest promotion of a task is
    its current model, whose verdicts the catalog shows by default when asked for "current"."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="model_promotions")
    model_key = models.CharField(max_length=200)
    model_label = models.CharField(max_length=200, blank=True)
    run = models.ForeignKey(
        InspectionRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="promotions"
    )  # the run whose comparison the promotion was made from, when there was one
    comment = models.TextField(blank=True)
    promoted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["task", "-created_at"], name="promotion_task_latest")]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.model_key}"


class EvidenceOutcome(models.TextChoices):
    """What masking a verdict's own evidence did (agent.ablation.AblationResult.outcome)."""

    FLIPS = "flips", "flips"  # the answer changed
    WEAKENS = "weakens", "weakens"  # same answer, confidence fell by the tolerance or more
    INSENSITIVE = "insensitive", "insensitive"  # confident, and nothing moved: flagged
    HOLDS = "holds", "holds"  # same answer (not confident before, or a small change)
    NO_EVIDENCE = "no evidence", "no evidence"  # nothing zoomed into or cited: nothing masked


class EvidenceAblation(models.Model):
    """A finished candidate re-run with the windows its first rollout zoomed into or cited
    replaced by the continuum (agent.ablation), beside a control of random windows of the same
    widths. The latest ablation of a candidate holds."""

    candidate = models.OneToOneField(
        Candidate, on_delete=models.CASCADE, related_name="evidence_ablation"
    )
    seed = models.BigIntegerField()
    windows = models.JSONField(default=list)  # evidence windows: lo, hi, source, name
    masked = models.JSONField(default=list)  # merged windows replaced: [[lo, hi], ...]
    control = models.JSONField(default=list)  # the control's windows
    decisive = models.JSONField(default=list)  # names of the windows that flip it alone
    answer_before = models.CharField(max_length=3, blank=True)
    confidence_before = models.FloatField(null=True, blank=True)
    answer_after = models.CharField(max_length=3, blank=True)
    confidence_after = models.FloatField(null=True, blank=True)
    answer_control = models.CharField(max_length=3, blank=True)
    confidence_control = models.FloatField(null=True, blank=True)
    flipped = models.BooleanField(default=False)
    control_flipped = models.BooleanField(default=False)
    confident = models.BooleanField(default=False)
    insensitive = models.BooleanField(default=False)
    outcome = models.CharField(max_length=12, choices=EvidenceOutcome.choices)
    detail = models.JSONField(default=dict)  # AblationResult.as_dict(), notes included
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
