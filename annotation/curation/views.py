"""Curation pages: my work, lists, detail, screening, audit, standardization, vote, datasets."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agent.editing import check_same_tool_actions
from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core import services as core_services
from annotation.core.errors import http_status
from annotation.core.http import HtmxHttpRequest, _expert, _page, _query_without
from annotation.core.models import ImageBlob
from annotation.core.permissions import require_role
from annotation.curation import datasets, selectors, services
from annotation.curation.forms import (
    AuditForm,
    CurationFilterForm,
    DraftJobForm,
    ImportFileError,
    ImportForm,
    ReassignForm,
    ScreenForm,
    VoteForm,
    draft_params,
    read_import_upload,
)
from annotation.curation.models import (
    Curation,
    CurationState,
    ExportKind,
    TrajectoryVersion,
)
from annotation.curation.permissions import actions_for, roles_of, standardize_run_check
from annotation.curation.selectors import (
    LIST_FIELDS,
    QUEUE_FIELDS,
    VersionDiff,
    accepted_counts,
    draft_candidates,
    history_visible_to,
    image_is_readable,
    inspected_ranges,
    label_step_comments,
    latest_standardized,
    standardizer_of,
    trajectory_view,
    version_diff,
)
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Spectrum, Task

QUEUE_PAGE_SIZE = 10
QUEUES = (
    ("screening", "Drafts to screen"),
    ("revise", "To revise"),
    ("claim_revision", "Revisions to claim"),
    ("audit", "To audit"),
    ("claim_audit", "Audits to claim"),
    ("vote", "To vote"),
)


# --- access -------------------------------------------------------------------------------------


def _get_curation_for_user(request: HttpRequest, curation_id: int) -> Curation:
    """The curation, if this user may read it (selectors.Blinding), else 404; writes are the
    services' call."""
    return get_object_or_404(
        blinding.curations_visible_to(user=request.user).select_related(
            "task", "spectrum", "reviser", "auditor_1", "auditor_2", "draft_job"
        ),
        pk=curation_id,
    )


# --- my work and lists ------------------------------------------------------------------------


@require_role(permissions.CURATE)
@require_GET
def my_work(request: HttpRequest) -> HttpResponse:
    queues = selectors.curation_queues(user=_expert(request))
    sections = [
        {
            "key": key,
            "title": title,
            "page": _page(
                request, queues[key].only(*QUEUE_FIELDS), size=QUEUE_PAGE_SIZE, param=f"{key}-page"
            ),
            "query": _query_without(request, f"{key}-page"),
        }
        for key, title in QUEUES
    ]
    return render(request, "curation/my_work.html", {"sections": sections})


@require_role(permissions.CURATION_READ)
@require_GET
def curation_list(request: HtmxHttpRequest) -> HttpResponse:
    form = CurationFilterForm(request.GET)
    filters = form.cleaned_data if form.is_valid() else {}
    rows = selectors.curation_list(state=filters.get("state", ""), task=filters.get("task", ""))
    rows = blinding.curations_visible_to(user=request.user, rows=rows.only(*LIST_FIELDS))
    template = "curation/list.html" + ("#results" if request.htmx else "")
    return render(
        request,
        template,
        {
            "form": form,
            "page": _page(request, rows),
            "query": _query_without(request, "page"),
            "tasks": Task.objects.all(),
            "states": CurationState.choices,
        },
    )


# --- detail, versions, images --------------------------------------------------------------------


def _detail_context(request: HttpRequest, curation: Curation) -> dict[str, Any]:
    user = _expert(request)
    head = selectors.head_version(curation)
    tab = request.GET.get("tab", "trajectory")
    context: dict[str, Any] = {
        "curation": curation,
        "head": head,
        "tab": tab if tab in ("trajectory", "history") else "trajectory",
        "trajectory": trajectory_view(head.data),
        "actions": actions_for(curation, user),
        "roles": roles_of(curation, user),
        "audits": selectors.audits_visible_to(curation=curation, user=user),
        "votes": selectors.votes_visible_to(curation=curation, user=user),
        "discard": selectors.discard_entry(curation),
        "reassign_form": ReassignForm(),
    }
    if context["tab"] == "history":
        context["log_page"] = _page(request, history_visible_to(curation=curation, user=user))
        versions = curation.versions.select_related("author").order_by("number")
        context["versions_page"] = _page(request, versions, param="vpage")
        context["query"] = _query_without(request, "page", "vpage")
    return context


def _render_detail(
    request: HtmxHttpRequest, curation: Curation, *, error: str = "", status: int = 200
) -> HttpResponse:
    context = _detail_context(request, curation)
    context["error"] = error
    template = "curation/detail.html" + ("#tab" if request.htmx and not error else "")
    return render(request, template, context, status=status)


@require_role(permissions.CURATION_READ)
@require_GET
def curation_detail(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    return _render_detail(request, _get_curation_for_user(request, curation_id))


@require_role(permissions.CURATION_READ)
@require_GET
def version_detail(request: HttpRequest, curation_id: int, number: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    version = get_object_or_404(
        TrajectoryVersion.objects.select_related("author"), curation=curation, number=number
    )
    return render(
        request,
        "curation/version.html",
        {"curation": curation, "version": version, "trajectory": trajectory_view(version.data)},
    )


@require_role(permissions.CURATION_READ)
@require_GET
@cache_control(private=True, max_age=86400, immutable=True)
def curation_image(request: HttpRequest, sha256: str) -> HttpResponse:
    """A tool PNG of a stored trajectory, for those who may read a trajectory that holds it."""
    raw_curation = request.GET.get("curation", "")
    curation_id = int(raw_curation) if raw_curation.isdigit() else None
    if not image_is_readable(sha256=sha256, user=_expert(request), curation_id=curation_id):
        raise Http404("no readable trajectory holds this image")
    blob = get_object_or_404(ImageBlob, sha256=sha256)
    return HttpResponse(bytes(blob.png), content_type="image/png")


# --- actions that answer with the detail page --------------------------------------------------


@require_role(permissions.CURATE)
@require_POST
def claim_revision(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    try:
        services.curation_claim_revision(curation=curation, user=_expert(request))
    except core_errors.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=http_status(error))
    messages.success(request, "You are now the reviser of this trajectory.")
    return redirect("curation_revise", curation.pk)


@require_role(permissions.CURATE)
@require_POST
def claim_audit(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    try:
        services.curation_claim_audit(curation=curation, user=_expert(request))
    except core_errors.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=http_status(error))
    messages.success(request, "You are now an auditor of this trajectory.")
    return redirect("curation_audit", curation.pk)


@require_role(permissions.CURATE)
@require_POST
def submit_for_audit(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    raw_base = request.POST.get("base_number", "")
    base_number = int(raw_base) if raw_base.isdigit() else curation.head_number
    try:
        services.curation_submit_for_audit(
            curation=curation, user=_expert(request), base_number=base_number
        )
    except core_errors.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=http_status(error))
    messages.success(request, f"Version {base_number} was sent to the two auditors.")
    return redirect("curation_detail", curation.pk)


@require_role(permissions.CURATION_MANAGE)
@require_POST
def reassign(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    form = ReassignForm(request.POST)
    if not form.is_valid():
        return _render_detail(request, curation, error=form.errors.as_text(), status=400)
    try:
        services.curation_reassign(
            curation=curation,
            role=form.cleaned_data["role"],
            user=form.cleaned_data["user"],
            actor=_expert(request),
        )
    except core_errors.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=http_status(error))
    messages.success(request, f"The {form.cleaned_data['role'].replace('_', ' ')} was reassigned.")
    return redirect("curation_detail", curation.pk)


@require_role(permissions.CURATION_MANAGE)
@require_POST
def standardize_run(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    try:
        standardize_run_check(curation, _expert(request))
    except core_errors.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=http_status(error))
    job = core_services.job_create(
        kind="standardize",
        params={"curation_ids": [curation.pk]},
        created_by=_expert(request),
        total=1,
    )
    return redirect("job_detail", job.pk)


# --- screening ---------------------------------------------------------------------------------


def _screen_context(curation: Curation, form: ScreenForm, error: str) -> dict[str, Any]:
    head = selectors.head_version(curation)
    plot_data = spectra_selectors.spectrum_plot_data(row=curation.spectrum, task=curation.task)
    plot_data["inspected"] = inspected_ranges(head.data)
    return {
        "curation": curation,
        "head": head,
        "trajectory": trajectory_view(head.data),
        "plot_data": plot_data,
        "form": form,
        "error": error,
    }


@require_role(permissions.CURATE)
@require_http_methods(["GET", "POST"])
def screen(request: HttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    form = ScreenForm(request.POST or None)
    error, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            keep = form.cleaned_data["decision"] == "keep"
            try:
                services.curation_screen(
                    curation=curation,
                    user=_expert(request),
                    keep=keep,
                    reason=form.cleaned_data["reason"],
                )
            except core_errors.WorkflowError as problem:
                error, status = str(problem), http_status(problem)
            else:
                messages.success(
                    request, f"Trajectory {curation.pk} {'kept' if keep else 'discarded'}."
                )
                following = selectors.next_to_screen(curation)
                return (
                    redirect("curation_screen", following.pk)
                    if following
                    else redirect("curation_my_work")
                )
        else:
            error, status = form.errors.as_text(), 400
    context = _screen_context(curation, form, error)
    return render(request, "curation/screen.html", context, status=status)


# --- audit -------------------------------------------------------------------------------------


@require_role(permissions.CURATE)
@require_http_methods(["GET", "POST"])
def audit(request: HttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    user = _expert(request)
    form = AuditForm(request.POST or None)
    error, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            try:
                services.audit_submit(
                    curation=curation,
                    user=user,
                    version_number=form.cleaned_data["version_number"],
                    verdict=form.cleaned_data["verdict"],
                    comment=form.cleaned_data["comment"],
                    step_comments=form.step_comments(request.POST),
                )
            except core_errors.WorkflowError as problem:
                error, status = str(problem), http_status(problem)
            else:
                messages.success(request, "Your verdict is recorded.")
                return redirect("curation_detail", curation.pk)
        else:
            error, status = form.errors.as_text(), 400
    return render(
        request,
        "curation/audit.html",
        _audit_context(request, curation, form, error),
        status=status,
    )


def _diff_rows(diff: VersionDiff, posted: QueryDict) -> list[dict[str, Any]]:
    """Each step's diff with the comment the auditor typed (kept when a submit is refused)."""
    return [
        {"diff": step, "comment": posted.get(f"step-{step.comment_key}-comment", "")}
        for step in diff.steps
    ]


def _audit_context(
    request: HttpRequest, curation: Curation, form: AuditForm, error: str
) -> dict[str, Any]:
    user = _expert(request)
    head = selectors.head_version(curation)
    raw_base = request.GET.get("base", "")
    number = int(raw_base) if raw_base.isdigit() else selectors.audit_default_base_number(curation)
    base = curation.versions.filter(number=number).first()
    visible = selectors.audits_visible_to(curation=curation, user=user)
    diff = version_diff(base or head, head)
    return {
        "curation": curation,
        "head": head,
        "diff": diff,
        "step_rows": _diff_rows(diff, request.POST),
        "answer_comment": request.POST.get(f"step-{diff.answer.comment_key}-comment", ""),
        "versions": curation.versions.order_by("number").values_list("number", "kind"),
        "form": form,
        "posted": request.POST,
        "error": error,
        "actions": actions_for(curation, user),
        "my_audit": next(
            (a for a in visible if a.auditor_id == user.pk and a.round == curation.audit_round),
            None,
        ),
        "other_audits": label_step_comments(
            curation,
            [a for a in visible if a.auditor_id != user.pk or a.round != curation.audit_round],
        ),
    }


# --- standardization and vote ----------------------------------------------------------------


@require_role(permissions.CURATION_READ)
@require_GET
def standardized(request: HttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    version = latest_standardized(curation)
    context: dict[str, Any] = {
        "curation": curation,
        "version": version,
        "actions": actions_for(curation, _expert(request)),
    }
    if version is not None:
        approved = get_object_or_404(curation.versions, number=version.number - 1)
        context["diff"] = diff = version_diff(approved, version)
        context["step_rows"] = _diff_rows(diff, QueryDict())
        context["standardizer"] = standardizer_of(version)
        context["problems"] = check_same_tool_actions(
            selectors.version_trajectory(approved), selectors.version_trajectory(version)
        )
        context["range_mismatches"] = (version.data.get("meta") or {}).get("range_mismatches")
    return render(request, "curation/standardized.html", context)


def _vote_context(
    curation: Curation, user: AbstractBaseUser, form: VoteForm, error: str
) -> dict[str, Any]:
    curation.refresh_from_db()
    version = latest_standardized(curation) or selectors.head_version(curation)
    votes = selectors.votes_visible_to(curation=curation, user=user)
    return {
        "curation": curation,
        "version": version,
        "trajectory": trajectory_view(version.data),
        "form": form,
        "error": error,
        "actions": actions_for(curation, user),
        "closed": curation.state in (CurationState.ACCEPTED, CurationState.REJECTED),
        "my_vote": next((v for v in votes if v.voter_id == user.pk), None),
        "votes": votes,
        "range_mismatches": (version.data.get("meta") or {}).get("range_mismatches"),
    }


@require_role(permissions.CURATE)
@require_http_methods(["GET", "POST"])
def vote(request: HttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    user = _expert(request)
    form = VoteForm(request.POST or None)
    error, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            try:
                services.vote_cast(
                    curation=curation,
                    user=user,
                    value=form.cleaned_data["value"],
                    comment=form.cleaned_data["comment"],
                )
            except core_errors.WorkflowError as problem:
                error, status = str(problem), http_status(problem)
            else:
                messages.success(request, "Your vote is recorded.")
                return redirect("curation_vote", curation.pk)
        else:
            error, status = form.errors.as_text(), 400
    context = _vote_context(curation, user, form, error)
    return render(request, "curation/vote.html", context, status=status)


DRAFT_DEFAULTS = {
    "limit": "20",
    "teacher": "rule-based",
    "max_tool_calls": "8",
    "skip_curated": "on",
}


@require_role(permissions.DRAFT)
@require_http_methods(["GET", "POST"])
def draft_new(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = DraftJobForm(request.POST)
    elif request.GET:
        form = DraftJobForm({**DRAFT_DEFAULTS, **request.GET.dict()})
    else:
        form = DraftJobForm(initial=DRAFT_DEFAULTS)
    error, status = "", 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                params, total = draft_params(form.cleaned_data)
            except core_errors.WorkflowError as problem:
                error = str(problem)
            else:
                job = core_services.job_create(
                    kind="draft", params=params, created_by=_expert(request), total=total
                )
                return redirect("job_detail", job.pk)
    matching = None
    if form.is_bound and (form.is_valid() or "task" in form.cleaned_data):
        data = form.cleaned_data
        matching = draft_candidates(
            task=data["task"],
            dataset=data.get("dataset", ""),
            split=data.get("split", ""),
            label=data.get("label", ""),
            skip_curated=bool(data.get("skip_curated")),
        ).count()
    template = "curation/draft_new.html"
    if request.htmx and request.method == "GET":
        template += "#match-count"
    context = {
        "form": form,
        "error": error,
        "matching": matching,
        "datasets": Spectrum.objects.order_by().values_list("dataset", flat=True).distinct(),
    }
    return render(request, template, context, status=status)


@require_role(permissions.DRAFT)
@require_http_methods(["GET", "POST"])
def curation_import(request: HttpRequest) -> HttpResponse:
    form = ImportForm(request.POST or None, request.FILES or None)
    context: dict[str, Any] = {"form": form}
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            task = form.cleaned_data["task"]
            try:
                parsed = read_import_upload(
                    form.cleaned_data["file"], task=task.code if task else None
                )
            except ImportFileError as problem:
                form.add_error("file", f"Nothing was stored. {problem}")
            else:
                result = datasets.curation_import(
                    trajectories=parsed.trajectories,
                    created_by=_expert(request),
                    source=parsed.source,
                )
                context["result"] = result
                context["import_warnings"] = parsed.warnings
                status = 200
    return render(request, "curation/import.html", context, status=status)


# --- datasets ----------------------------------------------------------------------------------


def _datasets_context(request: HttpRequest) -> dict[str, Any]:
    exports = selectors.dataset_exports(user=request.user, kind=ExportKind.ACCEPTED)
    return {
        "accepted": accepted_counts(user=request.user),
        "page": _page(request, exports),
        "tasks": Task.objects.all(),
    }


@require_role(permissions.DATASETS_READ)
@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    return render(request, "curation/datasets.html", _datasets_context(request))


@require_role(permissions.DATASET_EXPORT)
@require_POST
def dataset_export(request: HttpRequest) -> HttpResponse:
    latest = selectors.dataset_exports(user=request.user, kind=ExportKind.ACCEPTED).first()
    try:
        export = datasets.dataset_export_create(
            actor=_expert(request),
            task=request.POST.get("task", "").strip(),
            withheld_from_actor=blinding.blinding_for(request.user).curation_ids,
        )
    except core_errors.WorkflowError as error:
        context = {**_datasets_context(request), "error": str(error)}
        return render(request, "curation/datasets.html", context, status=http_status(error))
    if latest is not None and export.pk == latest.pk:
        messages.info(
            request,
            f"Nothing changed since version {export.version}; no new version was made.",
        )
    else:
        messages.success(request, f"Exported version {export.version}.")
    return redirect("dataset_list")


@require_role(permissions.DATASETS_READ)
@require_GET
def dataset_download(request: HttpRequest, export_id: int) -> HttpResponse | FileResponse:
    export = get_object_or_404(selectors.dataset_exports(user=request.user), pk=export_id)
    try:
        archive = selectors.dataset_export_archive(export)
    except selectors.ArchiveMissing as missing:
        return render(request, "404.html", {"reason": str(missing)}, status=404)
    return FileResponse(
        archive,
        as_attachment=True,
        filename=(
            f"specvet-sft-v{export.version}.zip"
            if export.kind == ExportKind.ACCEPTED
            else f"specvet-{export.kind}-v{export.version}.zip"
        ),
        content_type="application/zip",
    )
