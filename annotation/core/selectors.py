"""Reads every domain shares: the audit log."""

from __future__ import annotations

from django.db.models import QuerySet

from annotation.core.models import AuditLog


def audit_log_list(
    *, object_type: str = "", object_pk: str = "", actor: str = "", action: str = ""
) -> QuerySet[AuditLog]:
    """The audit log, newest first, filtered by object, actor (username) and action."""
    rows = AuditLog.objects.select_related("actor")
    if object_type:
        rows = rows.filter(object_type=object_type)
    if object_pk:
        rows = rows.filter(object_pk=object_pk)
    if actor:
        rows = rows.filter(actor__username=actor)
    if action:
        rows = rows.filter(action=action)
    return rows.order_by("-id")
