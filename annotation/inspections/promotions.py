"""Promoting a model to "current" for a task: the catalog's default choice of verdicts and the
baseline a new model is compared with. Staff only; every promotion is in the audit log."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.roles import Role, has_role
from annotation.core.services import audit_log_record
from annotation.inspections.models import InspectionRun, ModelPromotion
from annotation.spectra.models import Task


@transaction.atomic
def model_promote(*, task: Task, model_key: str, actor: User, comment: str = "") -> ModelPromotion:
    """Make ``model_key`` the current model for ``task``; it must have run on the task."""
    if not has_role(actor, Role.STAFF):
        raise NotAllowed("promoting a model to current needs the staff role")
    run = (
        InspectionRun.objects.filter(task=task, model_key=model_key)
        .exclude(model_key="")
        .order_by("-id")
        .first()
    )
    if run is None:
        raise WorkflowError(
            f"model {model_key[:200]!r} has no inspection run on task {task.code}; "
            "only a model that has answered the task can be its current model"
        )
    before = (
        ModelPromotion.objects.filter(task=task)
        .order_by("-created_at", "-id")
        .values_list("model_key", flat=True)
        .first()
    )
    promotion = ModelPromotion.objects.create(
        task=task,
        model_key=model_key,
        model_label=run.model_label,
        run=run,
        comment=comment[:2000],
        promoted_by=actor,
    )
    audit_log_record(
        actor=actor,
        action="model_promoted",
        obj=promotion,
        to_state="current",
        comment=f"task {task.code}: {run.model_label}" + (f" — {comment[:300]}" if comment else ""),
        data={"task": task.code, "run": run.pk, "model_key": model_key, "previous": before or ""},
    )
    return promotion
