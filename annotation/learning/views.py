"""Pages of the vetting loop: calibration and triage per task (reliability diagram, target
purity, audit samples with their estimates) and gold items with each vetter's accuracy."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core.charts import plotly_text
from annotation.core.http import _expert
from annotation.core.permissions import require_role
from annotation.inspections import ablation_selectors
from annotation.learning import permissions, selectors, services
from annotation.learning.models import AuditSample, GoldItem
from annotation.spectra.models import Task

GOLD_CHOICES_SHOWN = 50


def _task(request: HttpRequest, source: Any, with_data: list[str] | None = None) -> Task | None:
    """The task asked for; else the first with data (``with_data``), else the first task."""
    code = source.get("task", "").strip()
    if code:
        return get_object_or_404(Task, code=code)
    if with_data:
        return Task.objects.filter(code=with_data[0]).first()
    return Task.objects.order_by("code").first()


def _back(task: Task) -> HttpResponse:
    return redirect(f"{reverse('calibration')}?task={task.code}")


def _chart(overview: list[selectors.ModelCalibration]) -> list[dict[str, Any]]:
    """Reliability bins per model, names made inert for Plotly."""
    return [
        {
            "name": plotly_text(model.model_label or model.model_key),
            "version": model.fit.version,
            "raw": model.fit.reliability.get("raw", {}),
            "recalibrated": model.fit.reliability.get("recalibrated", {}),
        }
        for model in overview
        if model.fit is not None
    ]


@require_role(permissions.CALIBRATION_READ)
@require_GET
def calibration(request: HttpRequest) -> HttpResponse:
    runs = blinding.runs_visible_to(user=request.user)
    with_data = selectors.tasks_with_models(runs)
    task = _task(request, request.GET, with_data)
    context: dict[str, Any] = {
        "tasks": list(Task.objects.values_list("code", flat=True)),
        "tasks_with_data": with_data,
        "task": task,
        "can_refit": permissions.CALIBRATE.allows(request.user),
        "can_manage": permissions.TRIAGE_MANAGE.allows(request.user),
        "can_gold": permissions.GOLD_MANAGE.allows(request.user),
    }
    if task is not None:
        overview = selectors.calibration_overview(task, runs=runs)
        keys = {model.model_key for model in overview}
        target = selectors.current_target(task)
        context.update(
            overview=overview,
            chart=_chart(overview),
            target=target,
            target_percent=f"{target.target_purity * 100:g}" if target else "99",
            audits=[
                selectors.audit_estimate(sample)
                for sample in selectors.audit_samples(task).filter(model_key__in=keys)[:10]
            ],
            ablation=ablation_selectors.ablation_by_model(task_id=task.pk, runs=runs),
            insensitive=ablation_selectors.insensitive_candidates(task_id=task.pk, runs=runs),
        )
    return render(request, "learning/calibration.html", context)


@require_role(permissions.CALIBRATE)
@require_POST
def calibration_refit(request: HttpRequest) -> HttpResponse:
    task = get_object_or_404(Task, code=request.POST.get("task", ""))
    try:
        job = services.recalibration_start(
            task=task, model_key=request.POST.get("model_key", "").strip(), actor=_expert(request)
        )
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return _back(task)
    messages.success(request, f"Recalibration job {job.pk} started for {task.code}.")
    return _back(task)


@require_role(permissions.TRIAGE_MANAGE)
@require_POST
def triage_target(request: HttpRequest) -> HttpResponse:
    task = get_object_or_404(Task, code=request.POST.get("task", ""))
    try:
        percent = float(request.POST.get("target_percent", ""))
        target, job = services.triage_target_set(
            task=task, target_purity=percent / 100.0, actor=_expert(request)
        )
    except ValueError:
        messages.error(request, "target purity must be a number of per cent, e.g. 99")
        return _back(task)
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return _back(task)
    messages.success(
        request,
        f"Target purity {target.target_purity:.1%} for {task.code}; thresholds follow in job "
        f"{job.pk}.",
    )
    return _back(task)


@require_role(permissions.TRIAGE_MANAGE)
@require_POST
def audit_draw(request: HttpRequest) -> HttpResponse:
    task = get_object_or_404(Task, code=request.POST.get("task", ""))
    model_key = request.POST.get("model_key", "").strip()
    visible = {
        key
        for key, _ in selectors.models_on_task(
            task, runs=blinding.runs_visible_to(user=request.user)
        )
    }
    try:
        if model_key not in visible:
            raise core_errors.WorkflowError(
                f"no model you may read with key {model_key[:200]!r} answered {task.code}"
            )
        per_stratum = int(request.POST.get("per_stratum", "0") or 0)
        sample = services.audit_sample_draw(
            task=task, model_key=model_key, per_stratum=per_stratum, actor=_expert(request)
        )
    except ValueError:
        messages.error(request, "per stratum must be a whole number")
        return _back(task)
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return _back(task)
    messages.success(
        request, f"Audit sample {sample.pk} drawn; its candidates wait in the vetting queue."
    )
    return _back(task)


@require_role(permissions.TRIAGE_MANAGE)
@require_POST
def audit_close(request: HttpRequest, sample_id: int) -> HttpResponse:
    sample = get_object_or_404(AuditSample.objects.select_related("task"), pk=sample_id)
    try:
        services.audit_sample_close(sample=sample, actor=_expert(request))
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    return _back(sample.task)


# --- gold items ----------------------------------------------------------------------------------


@require_role(permissions.GOLD_MANAGE)
@require_GET
def gold(request: HttpRequest) -> HttpResponse:
    """Each vetter's accuracy on gold items, the gold items, and vetted candidates to mark."""
    entries = blinding.catalog_entries_visible_to(user=request.user)
    eligible = selectors.gold_eligible_entries(entries)[:GOLD_CHOICES_SHOWN]
    return render(
        request,
        "learning/gold.html",
        {
            "records": selectors.gold_records(),
            "items": GoldItem.objects.select_related(
                "candidate__spectrum", "candidate__run__task"
            ).order_by("-id")[:200],
            "eligible": list(eligible),
        },
    )


@require_role(permissions.GOLD_MANAGE)
@require_POST
def gold_mark(request: HttpRequest) -> HttpResponse:
    entry_id = request.POST.get("entry", "")
    entry = get_object_or_404(
        blinding.catalog_entries_visible_to(user=request.user).select_related("candidate"),
        pk=int(entry_id) if entry_id.isdigit() else 0,
    )
    try:
        if entry.candidate is None:
            raise core_errors.WrongState("this catalog entry has no candidate to show vetters")
        services.gold_item_mark(candidate=entry.candidate, actor=_expert(request))
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"{entry.object_id} ({entry.task_code}) is a gold item.")
    return redirect("gold")


@require_role(permissions.GOLD_MANAGE)
@require_POST
def gold_retire(request: HttpRequest, gold_id: int) -> HttpResponse:
    item = get_object_or_404(GoldItem, pk=gold_id)
    try:
        services.gold_item_retire(gold=item, actor=_expert(request))
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    return redirect("gold")
