"""Training runs: start SFT or GRPO, follow the Figure 6 curves live, list registered policies."""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.permissions import job_cancel_allowed, require_role
from annotation.training_runs import selectors, services
from annotation.training_runs.forms import TrainingRunForm
from annotation.training_runs.models import PolicyCheckpoint, TrainingRun, TrainingStage

PAGE_SIZE = 50


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _get_run(run_id: int) -> TrainingRun:
    return get_object_or_404(selectors.training_runs(), pk=run_id)


def _get_rw_run_for_user(request: HttpRequest, run_id: int) -> TrainingRun:
    run = _get_run(run_id)
    if not job_cancel_allowed(run.job, request.user):  # type: ignore[arg-type]
        raise PermissionDenied("only the run's creator or staff can cancel it")
    return run


def _after(request: HttpRequest) -> int:
    try:
        return max(0, int(request.GET.get("after", "0")))
    except ValueError:
        return 0


@require_role(permissions.TRAINING_READ)
@require_GET
def training_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.training_runs(), PAGE_SIZE).get_page(request.GET.get("page"))
    checkpoints = Paginator(selectors.policy_checkpoints(), PAGE_SIZE).get_page(
        request.GET.get("cpage")
    )
    rows = [(c, selectors.lineage_summary(c.lineage)) for c in checkpoints]
    return render(
        request,
        "training/list.html",
        {"page": page, "checkpoints": checkpoints, "checkpoint_rows": rows},
    )


@require_role(permissions.TRAIN)
@require_http_methods(["GET", "POST"])
def training_create(request: HttpRequest) -> HttpResponse:
    stage = request.GET.get("stage", TrainingStage.SFT)
    form = TrainingRunForm(
        request.POST or None, initial={"stage": stage, "preset": "cpu-tiny"}, user=request.user
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = services.training_run_create(
                stage=data["stage"],
                preset=data["preset"],
                base_model=data["base_model"],
                base_checkpoint=data["base_checkpoint"],
                dataset_export=form.export(),
                label_source=form.label_source(),
                overrides=form.overrides(),
                name=data["name"],
                created_by=request.user,  # type: ignore[arg-type]
            )
        except core_errors.FieldRefused as error:
            if error.field in form.fields:  # under the field, named by its label
                form.add_error(error.field, f"{form[error.field].label} {error.reason}")
            else:
                form.add_error(None, str(error))
        except core_errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            return redirect("training_detail", run_id=run.pk)
    return render(request, "training/create.html", {"form": form})


def _progress_context(run: TrainingRun, after: int) -> dict[str, Any]:
    return {
        "run": run,
        "progress": selectors.training_progress(run=run),
        "checkpoint": PolicyCheckpoint.objects.filter(run=run).first(),
        "points": selectors.training_chart_points(run=run, after=after),
    }


@require_role(permissions.TRAINING_READ)
@require_GET
def training_detail(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = _get_run(run_id)
    if request.htmx and request.GET.get("part") == "progress":
        context = _progress_context(run, _after(request))
        html = render_to_string("training/detail.html#progress", context, request=request)
        if context["progress"]["finished"]:
            return HttpResponseStopPolling(html)
        return HttpResponse(html)
    context = _progress_context(run, 0)
    checkpoint = context["checkpoint"]
    context.update(
        {
            "chart": context.pop("points"),
            "config_yaml": yaml.safe_dump(run.config, sort_keys=True),
            "lineage": selectors.lineage_summary(checkpoint.lineage) if checkpoint else None,
            "can_cancel": not run.job.finished and job_cancel_allowed(run.job, request.user),  # type: ignore[arg-type]
            "shows_f1": selectors.training_run_has_f1(run=run),
        }
    )
    return render(request, "training/detail.html", context)


@require_role(permissions.TRAINING_CONTROL)
@require_POST
def training_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _get_rw_run_for_user(request, run_id)
    if services.training_run_cancel(run=run, actor=request.user):  # type: ignore[arg-type]
        messages.success(request, f"{run} was cancelled; it stops after its current step.")
    else:
        messages.info(request, f"{run} had already finished.")
    return redirect("training_detail", run_id=run.pk)
