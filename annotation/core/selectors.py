"""Reads every domain shares: the audit log, job progress and its ETA."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from annotation.core.models import AuditLog, Job, JobState

# Fewer items than this finished: no ETA yet (the first one pays for loading the policy).
ETA_MIN_ITEMS = 2


# Rules registered by the layers above core (annotation.apps: blinding), each giving the entries
# one user may not read as a Q, or None: an entry is read under its object's read rule.
AuditReadRule = Callable[[Any], Q | None]
_audit_read_rules: list[AuditReadRule] = []


def register_audit_read_rule(rule: AuditReadRule) -> None:
    if rule not in _audit_read_rules:
        _audit_read_rules.append(rule)


def audit_log_list(
    *,
    user: Any,
    object_type: str = "",
    object_pk: str = "",
    actor: str = "",
    action: str = "",
) -> QuerySet[AuditLog]:
    """The audit log ``user`` may read, newest first, filtered by object, actor (username) and
    action. An entry about an object the user may not read (a registered rule says which) is
    left out, counts included, exactly as the object is from its own lists."""
    rows = AuditLog.objects.select_related("actor")
    for rule in _audit_read_rules:
        hidden = rule(user)
        if hidden is not None:
            rows = rows.exclude(hidden)
    if object_type:
        rows = rows.filter(object_type=object_type)
    if object_pk:
        rows = rows.filter(object_pk=object_pk)
    if actor:
        rows = rows.filter(actor__username=actor)
    if action:
        rows = rows.filter(action=action)
    return rows.order_by("-id")


# --- progress and ETA ----------------------------------------------------------------------------


def eta_seconds(
    *, started_at: datetime | None, processed: int, remaining: int, now: datetime | None = None
) -> float | None:
    """Seconds until the rest is done at the pace so far; None until ETA_MIN_ITEMS are done.

    ``processed`` counts the items finished since ``started_at`` (done or failed alike); the
    pace is the elapsed time over them, so a slow first item weighs less as the run goes on.
    """
    if started_at is None or processed < ETA_MIN_ITEMS or remaining <= 0:
        return None
    elapsed = ((now or timezone.now()) - started_at).total_seconds()
    if elapsed <= 0:
        return None
    return elapsed / processed * remaining


def eta_text(seconds: float | None) -> str:
    """``ETA 1 min 05 s`` style text; ``ETA —`` while there is no estimate."""
    if seconds is None:
        return "ETA —"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"ETA {hours} h {minutes:02d} min"
    if minutes:
        return f"ETA {minutes} min {secs:02d} s"
    return f"ETA {secs} s"


def job_progress(*, job: Job, now: datetime | None = None) -> dict[str, Any]:
    """A job's counters with its ETA (none once it has finished or before 2 items are done)."""
    processed = job.done + job.failed
    remaining = max(0, job.total - processed)
    seconds = (
        None
        if job.state != JobState.RUNNING
        else eta_seconds(
            started_at=job.started_at, processed=processed, remaining=remaining, now=now
        )
    )
    return {
        "total": job.total,
        "done": job.done,
        "failed": job.failed,
        "remaining": remaining,
        "percent": job.percent,
        "finished": job.finished,
        "eta_seconds": seconds,
        "eta": eta_text(seconds),
    }


# --- which jobs a user may read -----------------------------------------------------------------

# Rules registered by the layers above core (annotation.apps: blinding), each giving the jobs one
# user may not read as a Q, or None; core itself imports no domain.
JobReadRule = Callable[[Any], Q | None]
_job_read_rules: list[JobReadRule] = []


def register_job_read_rule(rule: JobReadRule) -> None:
    if rule not in _job_read_rules:
        _job_read_rules.append(rule)


def jobs_visible_to(*, user: Any, rows: QuerySet[Job] | None = None) -> QuerySet[Job]:
    """``rows`` (default: every job) less those a registered rule hides from ``user``."""
    rows = Job.objects.all() if rows is None else rows
    for rule in _job_read_rules:
        hidden = rule(user)
        if hidden is not None:
            rows = rows.exclude(hidden)
    return rows
