"""HTML pages. Function views; htmx requests get the page's partial."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agent.spectra import Declared, SpectrumFormatError
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import HtmxHttpRequest, _expert
from annotation.core.permissions import require_role
from annotation.spectra import selectors, services, workbench
from annotation.spectra.forms import RedshiftDecisionForm, RenderForm, SpectrumUploadForm
from annotation.spectra.models import RedshiftSource, Spectrum, Task

PAGE_SIZE = 50


def _filters_from(request: HttpRequest) -> selectors.SpectrumFilters:
    return _filters_of(request.GET)


def _filters_of(get: QueryDict) -> selectors.SpectrumFilters:
    return selectors.SpectrumFilters(
        task=get.get("task", "").strip(),
        label=get.get("label", "").strip(),
        survey=get.get("survey", "").strip(),
        dataset=get.get("dataset", "").strip(),
        q=get.get("q", "").strip(),
        sort=get.get("sort", "").strip(),
    )


SORT_COLUMNS = (
    ("object", "Object"),
    ("survey", "Survey"),
    ("dataset", "Data set"),
    ("task", "Task"),
    ("label", "Label"),
    ("snr", "S/N"),
    ("z", "z"),
    ("coverage", "Coverage (Å)"),
)


def _sort_headers(request: HttpRequest, current: str) -> list[dict[str, str]]:
    """Each column's header: its link (ascending first, then flipping) and aria-sort state."""
    query = request.GET.copy()
    query.pop("page", None)
    headers = []
    for key, label in SORT_COLUMNS:
        state = "ascending" if current == key else "descending" if current == f"-{key}" else ""
        query["sort"] = f"-{key}" if current == key else key
        headers.append({"label": label, "url": f"?{query.urlencode()}", "aria_sort": state})
    return headers


@require_role(permissions.BROWSE)
@require_GET
def spectrum_list(request: HtmxHttpRequest) -> HttpResponse:
    filters = _filters_from(request)
    page = Paginator(selectors.spectrum_list(filters=filters), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    template = "annotation/spectrum_list.html"
    if request.htmx:
        template += "#results"
    return render(
        request,
        template,
        {
            "page": page,
            "filters": filters,
            "choices": selectors.spectrum_filter_choices(),
            "query": query.urlencode(),
            "headers": _sort_headers(request, filters.sort),
        },
    )


def _list_navigation(request: HttpRequest, spectrum_id: int) -> dict[str, Any]:
    """The spectra list the page was opened from (``list``: that list's query), the way back
    and the previous and next spectra within it."""
    if "list" not in request.GET:
        return {"list_query": "", "neighbours": None}
    list_query = request.GET["list"]
    filters = _filters_of(QueryDict(list_query))
    neighbours = selectors.spectrum_list_neighbours(filters=filters, spectrum_id=spectrum_id)
    return {"list_query": urlencode({"list": list_query}), "neighbours": neighbours,
            "back_query": list_query}  # fmt: skip


@require_role(permissions.BROWSE)
@require_GET
def spectrum_detail(request: HttpRequest, spectrum_id: int) -> HttpResponse:
    row = get_object_or_404(Spectrum.objects.select_related("task"), pk=spectrum_id)
    code = request.GET.get("task") or (row.task.code if row.task else "")
    task = Task.objects.filter(code__iexact=code).first() if code else None
    return render(
        request,
        "annotation/spectrum_detail.html",
        {
            "spectrum": row,
            "task": task,
            "tasks": Task.objects.all(),
            "form": RenderForm(initial={"lo": 6500, "hi": 6630, "label": "H-alpha"}),
            "coverage": selectors.spectrum_tool(row).coverage(),
            "resolution": selectors.spectrum_value(row).resolution,
            **workbench.spectrum_viewer_context(row=row, task=task, user=request.user),
            **_list_navigation(request, row.pk),
        },
    )


@require_role(permissions.BROWSE)
@require_GET
def spectrum_viewer_fit(request: HttpRequest, spectrum_id: int) -> JsonResponse:
    """The redshift fit as the viewer draws it (alternatives, templates), asked for by pages that
    show the viewer where a decision is made once their plot is drawn (workbench ``fit_later``),
    with the compare overlay's template choices (left out of such a page: see the workbench)."""
    row = get_object_or_404(Spectrum, pk=spectrum_id)
    fit = selectors.spectrum_redshift_fit(row)
    return JsonResponse({**fit, "template_choices": selectors.redshift_template_choices()})


@require_role(permissions.REDSHIFT_DECIDE)
@require_POST
def spectrum_redshift_decide(request: HtmxHttpRequest, spectrum_id: int) -> HttpResponse:
    """Accept the fit's alternative ``rank`` (recomputed here: the stored z, error and template
    are the server's), or the typed ``z`` (with an optional ``z_err``). One that contradicts
    the fit's class is answered with the reason and a button that sends it again with
    ``confirm``."""
    row = get_object_or_404(Spectrum, pk=spectrum_id)
    form = RedshiftDecisionForm(request.POST)
    error, status, confirm = "", 200, None
    if form.is_valid():
        try:
            _decide_redshift(row, form.cleaned_data, _expert(request))
        except services.RedshiftNeedsConfirmation as refused:
            error, status = str(refused), core_errors.http_status(refused)
            confirm = {k: request.POST.get(k, "") for k in ("rank", "z", "z_err")}
        except core_errors.WorkflowError as refused:
            error, status = str(refused), core_errors.http_status(refused)
    else:
        error, status = "; ".join(str(m) for ms in form.errors.values() for m in ms), 400
    return _redshift_answer(request, row, error, status, confirm)


@require_role(permissions.REDSHIFT_DECIDE)
@require_POST
def spectrum_redshift_undo(request: HtmxHttpRequest, spectrum_id: int) -> HttpResponse:
    """Withdraw the expert's own newest redshift: the one before it is vetted again."""
    row = get_object_or_404(Spectrum, pk=spectrum_id)
    error, status = "", 200
    try:
        services.spectrum_redshift_undo(spectrum=row, actor=_expert(request))
    except core_errors.WorkflowError as refused:
        error, status = str(refused), core_errors.http_status(refused)
    return _redshift_answer(request, row, error, status, None)


def _redshift_answer(
    request: HtmxHttpRequest, row: Spectrum, error: str, status: int, confirm: Any
) -> HttpResponse:
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("spectrum_detail", spectrum_id=row.pk)
    context = {
        "spectrum": row,
        "redshift_current": selectors.spectrum_redshift_current(row),
        "redshift_error": error,
        "redshift_confirm": confirm,
        "may_decide_redshift": True,
        "user": request.user,
    }
    return render(
        request, "spectra/_workbench_panels.html#redshift-current", context, status=status
    )


def _decide_redshift(row: Spectrum, data: dict[str, Any], actor: Any) -> None:
    fit = selectors.spectrum_redshift_fit(row)
    verdict = {"fit_class": fit["spectype"], "class_delta_chi2": fit["class_delta_chi2"],
               "confirmed": bool(data.get("confirm"))}  # fmt: skip
    rank = data.get("rank")
    if rank:
        candidates = fit["candidates"]
        if rank > len(candidates):
            raise core_errors.WorkflowError(
                f"the fit has {len(candidates)} alternatives, not {rank}"
            )
        chosen = candidates[rank - 1]
        services.spectrum_redshift_decide(
            spectrum=row, actor=actor, z=chosen["z"], z_err=chosen["z_err"], source=RedshiftSource.FIT,
            template=chosen["template_text"], rank=rank, kind=chosen["kind"],
            quality=chosen["quality"], **verdict,
        )  # fmt: skip
        return
    z_err = data.get("z_err")
    if z_err is not None and not math.isfinite(z_err):
        raise core_errors.WorkflowError(f"the redshift error must be a finite number, got {z_err}")
    services.spectrum_redshift_decide(
        spectrum=row, actor=actor, z=data["z"], z_err=z_err, source=RedshiftSource.OVERRIDE,
        **verdict,
    )  # fmt: skip


@require_role(permissions.BROWSE)
@require_GET
def spectrum_render(request: HttpRequest, spectrum_id: int) -> HttpResponse:
    """The tool's answer for a window: its text and the PNG the agent would see."""
    row = get_object_or_404(Spectrum, pk=spectrum_id)
    form = RenderForm(request.GET)
    context: dict[str, object] = {"spectrum": row, "form": form}
    if form.is_valid():
        data = form.cleaned_data
        result = selectors.spectrum_render(
            row=row, wavelength_range=[data["lo"], data["hi"]], label=data["label"] or None
        )
        context["result"] = result
        if result.ok and result.wavelength_range is not None:
            lo, hi = result.wavelength_range
            query = {"lo": f"{lo:.2f}", "hi": f"{hi:.2f}", "label": data["label"] or ""}
            context["png_query"] = "&".join(f"{k}={v}" for k, v in query.items())
    return render(request, "annotation/spectrum_detail.html#render-result", context)


@require_role(permissions.BROWSE)
@require_GET
@cache_control(private=True, max_age=3600)
def spectrum_render_png(request: HttpRequest, spectrum_id: int) -> HttpResponse:
    row = get_object_or_404(Spectrum, pk=spectrum_id)
    if "lo" in request.GET or "hi" in request.GET:
        form = RenderForm(request.GET)
        if not form.is_valid():
            return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
        data = form.cleaned_data
        result = selectors.spectrum_render(
            row=row, wavelength_range=[data["lo"], data["hi"]], label=data["label"] or None
        )
    else:
        result = selectors.spectrum_render(row=row)
    if not result.ok or result.png is None:
        return HttpResponse(result.text, status=400, content_type="text/plain")
    return HttpResponse(result.png, content_type="image/png")


@require_role(permissions.UPLOAD)
@require_http_methods(["GET", "POST"])
def spectrum_upload(request: HttpRequest) -> HttpResponse:
    form = SpectrumUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            result = services.spectra_import_uploads(
                files=data["files"],
                uploaded_by=request.user,  # type: ignore[arg-type]
                dataset=data["dataset"],
                task=data["task"],
                label=data["label"],
                resolution=data["resolution"],
                declared=Declared(columns=data["columns"], frame=data["wavelength_frame"] or None),
            )
        except (SpectrumFormatError, core_errors.UploadRejected) as error:
            form.add_error("files", f"Nothing was stored. {error}")
        else:
            messages.success(
                request,
                f"Stored {len(result.created)} spectra"
                + (
                    f"; {result.duplicates} already present were skipped"
                    if result.duplicates
                    else ""
                )
                + ".",
            )
            return redirect(f"{reverse('spectrum_list')}?dataset={data['dataset']}")
    return render(request, "annotation/spectrum_upload.html", {"form": form})
