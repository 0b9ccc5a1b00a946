"""The staff's vetting-queue page: filter finished candidates by metadata, select several and
reassign, close or requeue them (``inspections.queue_actions``)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from annotation import blinding
from annotation.catalog import queue
from annotation.catalog import selectors as catalog
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import _expert, _page, _query_without
from annotation.core.permissions import require_role
from annotation.core.roles import Role, users_holding
from annotation.inspections import queue_actions
from annotation.spectra.models import Task

ACTIONS = ("reassign", "close", "requeue")


def _experts() -> list[str]:
    return list(users_holding(Role.EXPERT).order_by("username").values_list("username", flat=True))


@require_role(permissions.VETTING_MANAGE)
@require_GET
def vetting_manage(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"error": "", "actions": ACTIONS}
    status = 200
    try:
        filters = queue.queue_filters_from_query(request.GET)
    except catalog.CatalogQueryError as error:
        filters, context["error"], status = queue.QueueFilters(), str(error), 400
    rows = blinding.candidates_visible_to(user=request.user, rows=queue.staff_queue_rows(filters))
    context.update(
        filters=filters,
        page=_page(request, rows, size=queue.QUEUE_PAGE_SIZE),
        query=_query_without(request, "page"),
        statuses=queue.QUEUE_STATUSES,
        tasks=list(Task.objects.values_list("code", flat=True)),
        datasets=queue.queue_datasets(),
        verdicts=catalog.VERDICT_CHOICES,
        models=catalog.model_choices(blinding.runs_visible_to(user=request.user)),
        experts=_experts(),
        close_reason_max=queue_actions.CLOSE_REASON_MAX,
    )
    return render(request, "catalog/vetting_manage.html", context, status=status)


def _selected_ids(request: HttpRequest) -> list[int]:
    raw = request.POST.getlist("candidate")
    ids = [int(value) for value in raw if value.isdigit()]
    if len(ids) != len(raw):
        raise core_errors.WorkflowError("candidate must be candidate ids")
    return queue.readable_selection(user=request.user, candidate_ids=ids)


def _act(request: HttpRequest, action: str, ids: list[int]) -> int:
    actor = _expert(request)
    if action == "reassign":
        expert = queue.expert_for_assignment(
            username=request.POST.get("expert", ""), candidate_ids=ids
        )
        done = queue_actions.candidates_reassign(candidate_ids=ids, expert=expert, actor=actor)
    elif action == "close":
        reason = request.POST.get("reason", "")
        done = queue_actions.candidates_close(candidate_ids=ids, reason=reason, actor=actor)
    elif action == "requeue":
        done = queue_actions.candidates_requeue(candidate_ids=ids, actor=actor)
    else:
        raise core_errors.WorkflowError(f"action must be one of {', '.join(ACTIONS)}")
    return len(done)


@require_role(permissions.VETTING_MANAGE)
@require_POST
def vetting_manage_act(request: HttpRequest) -> HttpResponse:
    back = reverse("vetting_manage")
    query = QueryDict(request.POST.get("query", "")[:2000]).urlencode()
    if query:
        back += "?" + query
    action = request.POST.get("action", "")
    try:
        ids = _selected_ids(request)
        count = _act(request, action, ids)
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return redirect(back)
    messages.success(request, f"{action}: {count} candidate{'s' if count != 1 else ''}.")
    return redirect(back)
