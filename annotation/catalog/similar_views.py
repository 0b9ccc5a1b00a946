"""The "find more like this" page: a spectrum's nearest stored spectra, filtered, and the
staff's one-click "queue these for vetting" (``similar.queue_plan`` then
``inspections.queue_actions.candidates_requeue``)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from annotation.catalog import similar
from annotation.catalog.selectors import CatalogQueryError
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import _expert
from annotation.core.permissions import require_role
from annotation.inspections import queue_actions
from annotation.spectra.models import Spectrum, Task


def _spectrum(request: HttpRequest, spectrum_id: int) -> Spectrum:
    row = similar.spectrum_for(user=request.user, spectrum_id=spectrum_id)
    if row is None:
        raise Http404("no such spectrum")
    return row


@require_role(permissions.BROWSE)
@require_GET
def spectrum_similar(request: HttpRequest, spectrum_id: int) -> HttpResponse:
    spectrum = _spectrum(request, spectrum_id)
    context: dict[str, Any] = {"spectrum": spectrum, "error": "", "result": None}
    status = 200
    try:
        filters = similar.similar_filters_from_query(request.GET)
    except CatalogQueryError as error:
        filters, context["error"], status = similar.SimilarFilters(), str(error), 400
    if status == 200:
        context["result"] = similar.similar_spectra(
            user=request.user, spectrum=spectrum, filters=filters
        )
    context.update(
        filters=filters,
        tasks=list(Task.objects.values_list("code", flat=True)),
        datasets=list(
            Spectrum.objects.order_by("dataset").values_list("dataset", flat=True).distinct()
        ),
        vetted_choices=similar.VETTED_CHOICES,
        max_k=similar.MAX_K,
        may_queue=permissions.VETTING_MANAGE.allows(request.user),
        query=request.GET.urlencode(),
    )
    return render(request, "catalog/similar.html", context, status=status)


def _plan_message(plan: similar.QueuePlan, queued: int) -> str:
    parts = [f"{queued} candidate{'s' if queued != 1 else ''} queued for {plan.task}"]
    if plan.waiting:
        parts.append(f"{len(plan.waiting)} already waiting")
    if plan.labelled:
        parts.append(f"{len(plan.labelled)} labelled already")
    if plan.no_candidate:
        shown = ", ".join(str(pk) for pk in plan.no_candidate[:10])
        parts.append(f"no finished {plan.task} inspection of spectra {shown}: run one first")
    return "; ".join(parts) + "."


@require_role(permissions.VETTING_MANAGE)
@require_POST
def spectrum_similar_queue(request: HttpRequest, spectrum_id: int) -> HttpResponse:
    spectrum = _spectrum(request, spectrum_id)
    back = reverse("spectrum_similar", args=[spectrum.pk])
    query = request.POST.get("query", "")[:2000]
    if query:
        back += "?" + query
    raw = request.POST.getlist("spectrum")
    try:
        if not raw or not all(value.isdigit() for value in raw):
            raise core_errors.WorkflowError("spectrum: select spectra by their ids")
        if len(raw) > queue_actions.MAX_BULK:
            raise core_errors.WorkflowError(f"spectrum: at most {queue_actions.MAX_BULK} at once")
        plan = similar.queue_plan(
            user=request.user,
            spectrum_ids=[int(value) for value in raw],
            task=request.POST.get("task", "").strip(),
        )
        queued = 0
        if plan.candidate_ids:
            done = queue_actions.candidates_requeue(
                candidate_ids=plan.candidate_ids, actor=_expert(request)
            )
            queued = len(done)
    except (core_errors.WorkflowError, CatalogQueryError) as error:
        messages.error(request, str(error))
        return redirect(back)
    messages.success(request, _plan_message(plan, queued))
    return redirect(back)
