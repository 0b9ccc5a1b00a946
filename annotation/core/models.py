"""What every domain shares: the audit log, background jobs, stored PNGs, model endpoints."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


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
        super().save(*args, **kwargs)

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


class ImageBlob(models.Model):
    """A PNG stored once by content (trajectory versions share their tool images)."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    png = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)


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


class ApiTokenOrigin(models.Model):
    """When the password proof behind an API token was given: the sign-in of the session that
    issued it, or the password sent with the request. A token never renews itself, and no token
    outlives API_TOKEN_FAMILY_MAX_HOURS after its proof, however often it is reissued."""

    token = models.OneToOneField(
        "authtoken.Token", on_delete=models.CASCADE, primary_key=True, related_name="origin"
    )
    proved_at = models.DateTimeField()
    via = models.CharField(max_length=16)  # "session" or "password"
