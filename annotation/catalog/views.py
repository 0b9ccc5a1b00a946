"""Catalog and vetting pages. Function views; htmx requests get the list's partial."""

from __future__ import annotations

import json
import re
from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    QueryDict,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_POST

from annotation import blinding
from annotation.catalog import comparisons, reports, search, trajectories
from annotation.catalog import exports as catalog_export
from annotation.catalog import selectors as catalog
from annotation.catalog.queue import (
    EXPERT_FILTER_PARAMS,
    QueueFilters,
    expert_filters_from_query,
    hidden_summary,
    metadata_rows,
    quality_context,
    vetter_queue_hidden,
    vetter_queue_rows,
)
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import HtmxHttpRequest, _expert
from annotation.core.models import ImageBlob
from annotation.core.permissions import require_role
from annotation.inspections import decisions as inspection_decisions
from annotation.inspections import promotions
from annotation.inspections import selectors as inspections_selectors
from annotation.inspections import services as inspections_services
from annotation.inspections.decision_history import (
    HistoryRow,
    expert_answer,
    one_per_spectrum_task,
    same_content_answers,
)
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    ExpertDecision,
    ExpertDecisionValue,
)
from annotation.learning import queue as active_queue
from annotation.learning import selectors as learning_selectors
from annotation.learning import services as learning_services
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Task
from annotation.spectra.workbench import spectrum_viewer_context

# The list's columns, with the sort key of those that sort.
HEADERS = (
    ("Object", "object_id"),
    ("Designation", ""),
    ("Data set", ""),
    ("Spectrum", ""),
    ("Survey", ""),
    ("RA (°)", "ra"),
    ("Dec (°)", "dec"),
    ("Task", ""),
    ("Verdict", ""),
    ("Confidence", "confidence"),
    ("S/N", "snr"),
    ("Model", ""),
    ("Expert", ""),
    ("Label", ""),
    ("Run", ""),
    ("Created", "created_at"),
)


def _query_without(request: HttpRequest, *names: str) -> str:
    query: QueryDict = request.GET.copy()
    for name in names:
        query.pop(name, None)
    return query.urlencode()


def _headers(request: HttpRequest, sort: str) -> list[dict[str, str]]:
    """Each column header: its label, the query of its sort link, and the current direction.

    A first click sorts in the column's natural direction, a second click flips it.
    """
    base = _query_without(request, "sort", "page")
    headers = []
    for label, key in HEADERS:
        state = query = ""
        if key:
            if sort.lstrip("-") == key:
                state = "desc" if sort.startswith("-") else "asc"
                target = key if state == "desc" else f"-{key}"
            else:
                target = f"{catalog.SORT_KEYS[key]}{key}"
            query = f"{base}&sort={target}" if base else f"sort={target}"
        headers.append({"label": label, "query": query, "state": state})
    return headers


@require_role(permissions.BROWSE)
@require_GET
def catalog_list(request: HtmxHttpRequest) -> HttpResponse:
    sort = catalog.normalize_sort(request.GET.get("sort"))
    context: dict[str, Any] = {"sort": sort, "error": ""}
    status = 200
    try:
        filters = catalog.filters_from_query(request.GET)
    except catalog.CatalogQueryError as error:
        filters, context["error"] = catalog.CatalogFilters(), str(error)
        # htmx leaves the page as it is on a 4xx answer; the message must replace the results.
        status = 200 if request.htmx else 400
    else:
        rows = blinding.catalog_entries_visible_to(
            user=request.user, rows=catalog.catalog_rows(filters, sort)
        )
        page = catalog.catalog_page(rows, catalog.page_number(request.GET.get("page")))
        list_url = reverse("catalog_list")
        context["page"] = page
        context["sparkline_prefix"] = reverse("catalog_sparkline", args=[0])[: -len("0.svg")]
        context["duplicates_prefix"] = reverse("duplicate_groups")
        context["rows"] = catalog.list_rows(
            page.entries,
            detail_prefix=reverse("catalog_detail", args=[0])[:-2],
            list_url=list_url,
            spectrum_prefix=reverse("spectrum_detail", args=[0])[:-2],
        )
    context.update(
        filters=filters,
        query=_query_without(request, "page"),
        export_query=_query_without(request, "page", "limit"),
        headers=_headers(request, sort),
        tasks=list(Task.objects.values_list("code", flat=True)),
        surveys=catalog.survey_choices(),
        datasets=search.dataset_choices(),
        default_radius=search.DEFAULT_RADIUS_ARCSEC,
        max_radius=search.MAX_RADIUS_ARCSEC,
        verdicts=catalog.VERDICT_CHOICES,
        decisions=catalog.EXPERT_DECISION_CHOICES,
        label_states=catalog.LABEL_STATE_CHOICES,
        evidence_outcomes=catalog.EVIDENCE_CHOICES,
        models=catalog.model_choices(blinding.runs_visible_to(user=request.user)),
        columns=catalog.CATALOG_COLUMNS,
        count_cap=catalog.COUNT_CAP,
        export_limit=catalog.EXPORT_ROW_LIMIT,
    )
    template = "catalog/catalog_list.html"
    if request.htmx:
        template += "#results"
    return render(request, template, context, status=status)


def _entry_rollouts(candidate: Candidate | None) -> list[dict[str, Any]]:
    if candidate is None:
        return []
    rollouts = list(candidate.rollouts.order_by("index"))
    ratings = trajectories.rollout_ratings(rollout.pk for rollout in rollouts)
    return [
        {
            "rollout": rollout,
            "view": trajectories.trajectory_view(rollout.data),
            "ratings": ratings[rollout.pk],
        }
        for rollout in rollouts
    ]


def _provenance(entry: CatalogEntry) -> dict[str, Any]:
    run = entry.run
    return {
        "run": run,
        "policy_spec": json.dumps(catalog.public_policy_spec(run.policy_spec), indent=2),
        "policy_info": json.dumps(catalog.public_policy_spec(run.policy_info), indent=2),
        "sampling": json.dumps(catalog.public_policy_spec(run.sampling), indent=2),
    }


def _label_context(
    request: HttpRequest, entry: CatalogEntry, candidate: Candidate | None
) -> dict[str, Any]:
    """The spectrum's vetted label with the decisions behind it, less decisions made on runs
    this user may not read."""
    label = (
        blinding.vetted_label_visible_to(
            user=request.user, spectrum_id=candidate.spectrum_id, task_id=entry.run.task_id
        )
        if candidate is not None
        else None
    )
    readable = set(
        blinding.runs_visible_to(user=request.user)
        .filter(pk__in=[d.get("run_id") for d in (label.decisions if label else [])])
        .values_list("pk", flat=True)
    )
    return {
        "label": label,
        "label_decisions": [
            d for d in (label.decisions if label else []) if d["run_id"] in readable
        ],
        "is_current_model": bool(entry.model_key)
        and catalog.current_models().get(entry.task_code) == entry.model_key,
    }


def _entry_decisions(request: HttpRequest, entry: CatalogEntry) -> list[HistoryRow]:
    """Every expert's answers on the entry's spectrum for its task (any run, earlier ones marked
    replaced) that this user may read, oldest first."""
    if entry.candidate is None:
        return []
    return blinding.decision_history_visible_to(
        user=request.user, spectrum_id=entry.candidate.spectrum_id, task_id=entry.run.task_id
    )


@require_role(permissions.BROWSE)
@require_GET
def catalog_detail(request: HttpRequest, entry_id: int) -> HttpResponse:
    entries = blinding.catalog_entries_visible_to(user=request.user)
    entry = get_object_or_404(
        entries.select_related("run__task", "run__created_by", "candidate"), pk=entry_id
    )
    candidate = entry.candidate
    return render(
        request,
        "catalog/catalog_detail.html",
        {
            "entry": entry,
            "candidate": candidate,
            "rollouts": _entry_rollouts(candidate),
            "decisions": _entry_decisions(request, entry),
            "provenance": _provenance(entry),
            **_list_navigation(request, entries, entry.pk),
            **_label_context(request, entry, candidate),
            "recalibrated": _recalibrated(candidate) if candidate else None,
            "vetted_redshift": spectra_selectors.vetted_redshift(entry.spectrum_id),
        },
    )


def _list_navigation(request: HttpRequest, entries: Any, entry_id: int) -> dict[str, Any]:
    """The list the entry was opened from (its filters, sort and page travel in the query):
    the way back to it, and the previous and next entries within it."""
    query = _query_without(request)
    try:
        filters = catalog.filters_from_query(request.GET)
    except catalog.CatalogQueryError:
        return {"list_query": "", "neighbours": None}
    rows = blinding.catalog_entries_visible_to(
        user=request.user,
        rows=catalog.catalog_rows(filters, catalog.normalize_sort(request.GET.get("sort"))),
    )
    return {"list_query": query, "neighbours": catalog.list_neighbours(rows, entry_id)}


@require_role(permissions.BROWSE)
@require_GET
@cache_control(private=True, max_age=31536000, immutable=True)
def catalog_image(request: HttpRequest, sha256: str) -> HttpResponse:
    if not trajectories.is_sha256(sha256):
        raise Http404("not an image hash")
    # Only tool images of rollouts and live steps the user may read are served here, not
    # every stored blob; a candidate id narrows the search to that candidate's rows.
    raw = request.GET.get("candidate")
    if raw is not None and not raw.isdigit():
        raise Http404("no trajectory shows this image")
    candidate_id = int(raw) if raw is not None else None
    if not blinding.image_in_candidates(
        user=request.user, sha256=sha256, candidate_id=candidate_id
    ):
        raise Http404("no trajectory shows this image")
    blob = get_object_or_404(ImageBlob, sha256=sha256)
    return HttpResponse(bytes(blob.png), content_type="image/png")


@require_role(permissions.BROWSE)
@require_GET
def catalog_report(request: HttpRequest, entry_id: int) -> HttpResponse:
    """The entry as one standalone HTML file (Bokeh inlined) to mail; same read rules as the
    detail page, so a hidden entry is a 404."""
    entries = blinding.catalog_entries_visible_to(user=request.user)
    entry = get_object_or_404(
        entries.select_related("run__task", "candidate__spectrum"), pk=entry_id
    )
    response = HttpResponse(
        reports.entry_report_html(entry=entry, decisions=_entry_decisions(request, entry)),
        content_type="text/html; charset=utf-8",
    )
    # The object id is untrusted text; only safe characters reach the header.
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", entry.object_id)[:80].strip("._") or "entry"
    response["Content-Disposition"] = f'attachment; filename="specvet-{entry.pk}-{name}.html"'
    return response


# --- exports ----------------------------------------------------------------------------------


def _export_rows(request: HttpRequest) -> tuple[QuerySet[CatalogEntry], int | None]:
    """The filtered rows and the requested row limit; raises CatalogQueryError."""
    filters = catalog.filters_from_query(request.GET)
    limit = catalog.limit_from_query(request.GET)
    sort = catalog.normalize_sort(request.GET.get("sort"), default="id")
    rows = catalog.catalog_rows(filters, sort)
    return blinding.catalog_entries_visible_to(user=request.user, rows=rows), limit


def _file_name(extension: str) -> str:
    return f"specvet-catalog-{timezone.now():%Y%m%dT%H%M%SZ}.{extension}"


@require_role(permissions.BROWSE)
@require_GET
def catalog_export_csv(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    try:
        rows, limit = _export_rows(request)
    except catalog.CatalogQueryError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain")
    response = StreamingHttpResponse(
        catalog_export.catalog_csv_chunks(rows, limit=limit), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{_file_name("csv")}"'
    return response


def _table_export(
    request: HttpRequest, extension: str, content_type: str
) -> HttpResponse | FileResponse:
    try:
        rows, limit = _export_rows(request)
    except catalog.CatalogQueryError as error:
        return HttpResponseBadRequest(str(error), content_type="text/plain")
    cap = min(limit or catalog.EXPORT_ROW_LIMIT, catalog.EXPORT_ROW_LIMIT)
    query = _query_without(request, "limit")
    writer = catalog_export.write_votable if extension == "vot" else catalog_export.write_fits
    export = writer(rows, limit=cap, query=query)
    # FileResponse streams the temporary file in blocks and closes (so deletes) it when done.
    response = FileResponse(
        export.file, content_type=content_type, as_attachment=True, filename=_file_name(extension)
    )
    response["X-Catalog-Row-Limit"] = str(catalog.EXPORT_ROW_LIMIT)
    response["X-Catalog-Rows"] = str(export.rows)
    response["X-Catalog-Truncated"] = "true" if export.truncated else "false"
    return response


@require_role(permissions.BROWSE)
@require_GET
def catalog_export_votable(request: HttpRequest) -> HttpResponse | FileResponse:
    return _table_export(request, "vot", "application/x-votable+xml")


@require_role(permissions.BROWSE)
@require_GET
def catalog_export_fits(request: HttpRequest) -> HttpResponse | FileResponse:
    return _table_export(request, "fits", "application/fits")


# --- vetting ----------------------------------------------------------------------------------


def _vetting_candidate(request: HttpRequest, filters: QueueFilters) -> Candidate | None:
    """The candidate asked for by ?candidate= (any finished one it may read), else the user's
    next."""
    wanted = request.GET.get("candidate", "")
    if wanted:
        if not wanted.isdigit():
            raise Http404("no such candidate")
        return get_object_or_404(
            blinding.candidates_visible_to(user=request.user).select_related(
                "run__task", "spectrum"
            ),
            pk=int(wanted),
            state=CandidateState.DONE,
        )
    queue = metadata_rows(_vetting_queue(request), filters)
    skipped = request.session.get(SKIPPED_KEY, [])
    if skipped and not one_per_spectrum_task(queue).exclude(pk__in=skipped).exists():
        request.session[SKIPPED_KEY] = skipped = []  # every one left was skipped: go round again
    # gold items obey the filters too: one from outside them would give itself away
    gold = metadata_rows(
        blinding.candidates_visible_to(
            user=request.user, rows=active_queue.gold_candidates(request.user)
        ),
        filters,
    )
    return active_queue.next_candidate(user=request.user, queue=queue, gold=gold, skipped=skipped)


SKIPPED_KEY = "vetting_skipped"
FILTERS_KEY = "vetting_filters"
LAST_DECIDED_KEY = "vetting_last_decided"
MAX_SKIPPED = 500


def _vetting_queue(request: HttpRequest) -> QuerySet[Candidate]:
    """The rows of the user's queue (``vetter_queue_rows``: one per spectrum and task is chosen
    by ``next_candidate`` and ``waiting_count``)."""
    return vetter_queue_rows(request.user)


def _vetting_filters(request: HttpRequest) -> QueueFilters:
    """The expert's queue filters: from the query when it names any (kept in the session, so
    they hold across decisions, skips and undos), else the session's."""
    if any(name in request.GET for name in EXPERT_FILTER_PARAMS):
        request.session[FILTERS_KEY] = {
            name: request.GET.get(name, "")[:80] for name in EXPERT_FILTER_PARAMS
        }
    try:
        return expert_filters_from_query(request.session.get(FILTERS_KEY, {}))
    except catalog.CatalogQueryError as error:
        request.session.pop(FILTERS_KEY, None)
        messages.error(request, f"Filters not applied: {error}")
        return QueueFilters()


def _viewer_context(
    request: HttpRequest, candidate: Candidate, rollouts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The whole spectrum viewer (spectra/_viewer.html), with the windows the agent inspected."""
    return spectrum_viewer_context(
        row=candidate.spectrum,
        task=candidate.run.task,
        user=request.user,
        inspected=[span for item in rollouts for span in item["view"].inspected],
        fit_later=True,
    )


@require_role(permissions.VET)
@require_GET
def vetting_queue(request: HttpRequest) -> HttpResponse:
    filters = _vetting_filters(request)
    candidate = _vetting_candidate(request, filters)
    queue = _vetting_queue(request)
    context: dict[str, Any] = {
        "candidate": candidate,
        "remaining": active_queue.waiting_count(metadata_rows(queue, filters)),
        "filters": filters,
        "filtered": filters != QueueFilters(),
        "tasks": list(Task.objects.order_by("code").values_list("code", flat=True)),
        "datasets": sorted(queue.order_by().values_list("spectrum__dataset", flat=True).distinct()),
        "choices": ExpertDecisionValue.choices,
        "hidden": hidden_summary(vetter_queue_hidden(request.user)),
        **quality_context(),
    }
    if candidate is not None:
        rollouts = _entry_rollouts(candidate)
        context.update(
            refusal=_decision_refusal(request, candidate),
            rollouts=rollouts,
            # the expert's answer on the spectrum for the task, on this run or another's
            mine=expert_answer(
                spectrum_id=candidate.spectrum_id,
                task_id=candidate.run.task_id,
                expert_id=_expert(request).pk,
            ),
            same_content=same_content_answers(
                spectrum=candidate.spectrum,
                task_id=candidate.run.task_id,
                expert_id=_expert(request).pk,
            ),
            entry=CatalogEntry.objects.filter(candidate=candidate).first(),
            recalibrated=_recalibrated(candidate),
            **_viewer_context(request, candidate, rollouts),
        )
    context["last_decided"] = request.session.get(LAST_DECIDED_KEY)
    return render(request, "catalog/vetting.html", context)


def _decision_refusal(request: HttpRequest, candidate: Candidate) -> str:
    """Why the expert may not decide the candidate opened by ?candidate= ("" when they may);
    the service refuses the same (``inspections.selectors.decision_refusal``)."""
    expert = _expert(request)
    if learning_services.gold_for_vetter(candidate=candidate, vetter=expert) is not None:
        return ""
    if learning_selectors.in_open_audit_sample(candidate.pk):
        return ""
    return inspections_selectors.decision_refusal(candidate=candidate, expert=expert)


def _recalibrated(candidate: Candidate) -> float | None:
    """The recalibrated confidence in the candidate's verdict (None before any fit)."""
    fit = learning_selectors.fit_for(
        task_id=candidate.run.task_id, model_key=candidate.run.model_key
    )
    return learning_selectors.recalibrated_confidence(
        verdict=candidate.verdict, confidence=candidate.confidence, fit=fit
    )


def _visible_candidate(request: HttpRequest) -> Candidate:
    candidate_id = request.POST.get("candidate", "")
    if not candidate_id.isdigit():
        raise Http404("candidate must be a candidate id")
    rows = blinding.candidates_visible_to(user=request.user).select_related("spectrum")
    return get_object_or_404(rows.defer("spectrum__arrays", "spectrum__meta"), pk=candidate_id)


@require_role(permissions.VET)
@require_POST
def vetting_skip(request: HttpRequest) -> HttpResponse:
    """Leave this candidate for later (this session): the queue shows the next one."""
    candidate = _visible_candidate(request)
    skipped = [pk for pk in request.session.get(SKIPPED_KEY, []) if pk != candidate.pk]
    request.session[SKIPPED_KEY] = [*skipped, candidate.pk][-MAX_SKIPPED:]
    messages.info(request, f"Skipped {candidate.spectrum.object_id}; it comes back at the end.")
    return redirect("vetting_queue")


@require_role(permissions.VET)
@require_POST
def vetting_undo(request: HttpRequest) -> HttpResponse:
    """Withdraw one's own last decision; the candidate is shown again to decide anew."""
    candidate = _visible_candidate(request)
    expert = _expert(request)
    gold = learning_services.gold_for_vetter(candidate=candidate, vetter=expert)
    try:
        if gold is not None:
            withdrawn = learning_services.gold_answer_withdraw(gold=gold, vetter=expert)
        else:
            withdrawn = inspection_decisions.expert_decision_withdraw(
                candidate=candidate, expert=expert
            )
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return redirect("vetting_queue")
    request.session.pop(LAST_DECIDED_KEY, None)
    messages.info(request, f"Undid {withdrawn} for {candidate.spectrum.object_id}.")
    return redirect(f"{reverse('vetting_queue')}?candidate={candidate.pk}")


@require_role(permissions.VET)
@require_POST
def vetting_decide(request: HttpRequest) -> HttpResponse:
    candidate_id = request.POST.get("candidate", "")
    if not candidate_id.isdigit():
        return HttpResponseBadRequest("candidate must be a candidate id", content_type="text/plain")
    rows = blinding.candidates_visible_to(user=request.user).select_related("spectrum")
    candidate = get_object_or_404(rows.defer("spectrum__arrays", "spectrum__meta"), pk=candidate_id)
    try:
        earlier = _decision_record(request, candidate)
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return redirect(f"{reverse('vetting_queue')}?candidate={candidate.pk}")
    replaced = (
        f"; it replaces your earlier answer, {earlier.decision} (run {earlier.candidate.run_id})"
        if earlier is not None
        else ""
    )
    messages.success(
        request,
        f"Recorded {request.POST['decision']} for {candidate.spectrum.object_id}{replaced}.",
    )
    request.session[LAST_DECIDED_KEY] = {
        "candidate": candidate.pk,
        "object_id": candidate.spectrum.object_id,
        "decision": request.POST["decision"],
    }
    return redirect("vetting_queue")


def _decision_record(request: HttpRequest, candidate: Candidate) -> ExpertDecision | None:
    """An expert decision, or, on a gold item, a gold answer that makes no label (recorded the
    same way from the expert's side: the page must not tell the two apart). Returns the
    expert's earlier answer on the spectrum for the task that this one replaces, if any."""
    expert = _expert(request)
    decision = request.POST.get("decision", "")
    gold = learning_services.gold_for_vetter(candidate=candidate, vetter=expert)
    if gold is not None:
        learning_services.gold_answer_record(gold=gold, vetter=expert, answer=decision)
        return None
    earlier = expert_answer(
        spectrum_id=candidate.spectrum_id, task_id=candidate.run.task_id, expert_id=expert.pk
    )
    inspections_services.expert_decision_record(
        candidate=candidate,
        expert=expert,
        decision=decision,
        comment=request.POST.get("comment", "").strip(),
        quality=request.POST.get("quality", ""),
        issues=request.POST.getlist("issues"),
        audit_sampled=learning_selectors.in_open_audit_sample(candidate.pk),
    )
    return earlier


# --- model lineage: comparison and promotion ---------------------------------------------------


def _compare_context(request: HttpRequest) -> tuple[dict[str, Any], int]:
    choice = comparisons.model_choice(
        user=request.user,
        task=request.GET.get("task", ""),
        new=request.GET.get("new", ""),
        old=request.GET.get("old", ""),
    )
    context: dict[str, Any] = {
        "tasks": choice.tasks,
        "task": choice.task,
        "error": choice.error,
        "models": choice.models,
        "current": choice.current,
        "new": choice.new,
        "old": choice.old,
        "new_label": choice.label(choice.new),
        "old_label": choice.label(choice.old),
        "current_label": choice.label(choice.current),
        "can_promote": permissions.MODEL_PROMOTE.allows(request.user),
    }
    if len(choice.models) < 2:
        context["tasks_with_models"] = comparisons.tasks_with_models(user=request.user)
    if choice.comparison is not None:
        context["comparison"] = choice.comparison
    return context, 400 if choice.error else 200


@require_role(permissions.BROWSE)
@require_GET
def catalog_compare(request: HttpRequest) -> HttpResponse:
    """Two models' verdicts on the same spectra of a task, vetted labels as truth."""
    context, status = _compare_context(request)
    return render(request, "catalog/compare.html", context, status=status)


@require_role(permissions.MODEL_PROMOTE)
@require_POST
def model_promote(request: HttpRequest) -> HttpResponse:
    task = get_object_or_404(Task, code=request.POST.get("task", ""))
    model_key = request.POST.get("model_key", "").strip()
    back = f"{reverse('catalog_compare')}?task={task.code}"
    if model_key not in dict(comparisons.models_readable(user=request.user, task=task.code)):
        messages.error(request, f"model_key: no model you may read has answered task {task.code}")
        return redirect(back)
    try:
        promotion = promotions.model_promote(
            task=task,
            model_key=model_key,
            actor=request.user,  # type: ignore[arg-type]
            comment=request.POST.get("comment", "").strip(),
        )
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
        return redirect(back)
    messages.success(request, f"{promotion.model_label} is now the current model for {task.code}.")
    return redirect(back)
