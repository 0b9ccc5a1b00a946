"""Curation pages (paper section 3.2): my work, screening, revision, audit, vote, datasets, jobs.

Function views; htmx requests get the page's partial. Every write goes through
annotation/services.py; the helpers in the "reads" section are shared with the API.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from agent.editing import EditError, apply_edit, check_same_tool_actions, range_mismatch
from annotation import permissions, selectors, services
from annotation.forms_curation import (
    AuditForm,
    CurationFilterForm,
    DraftJobForm,
    EditorState,
    ImportFileError,
    ImportForm,
    ReassignForm,
    ScreenForm,
    StepDraft,
    VoteForm,
    read_import_upload,
    teacher_spec,
)
from annotation.models import (
    Audit,
    AuditLog,
    Curation,
    CurationState,
    DatasetExport,
    ImageBlob,
    Job,
    Label,
    RevisionDraft,
    Spectrum,
    Task,
    TrajectoryVersion,
    VersionKind,
)
from annotation.permissions import require_role

PAGE_SIZE = 50
QUEUE_PAGE_SIZE = 10
LIST_DEFER = ("spectrum__arrays", "spectrum__meta")  # lists never need the arrays
# What the list pages show; loading only that (not each row's task definition and spectrum
# metadata) halves the cost of a list on the pages experts open most.
QUEUE_FIELDS = ("id", "state", "updated_at", "task__code", "spectrum__object_id", "reviser")
LIST_FIELDS = (
    *QUEUE_FIELDS,
    "ground_truth",
    "head_number",
    "reviser__username",
    "auditor_1__username",
    "auditor_2__username",
)
EDITABLE_STATES = (CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED)
AUDIT_ACTIONS = ("audit_approve", "audit_request_changes")
VOTE_ACTIONS = ("vote_accept", "vote_reject")
QUEUES = (
    ("screening", "Drafts to screen"),
    ("revise", "To revise"),
    ("claim_revision", "Revisions to claim"),
    ("audit", "To audit"),
    ("claim_audit", "Audits to claim"),
    ("vote", "To vote"),
)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


# --- access -------------------------------------------------------------------------------------


def _expert(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in expert (LoginRequiredMiddleware keeps anonymous visitors out)."""
    return request.user  # type: ignore[return-value]


def status_for(error: services.WorkflowError) -> int:
    if isinstance(error, services.NotAllowed):
        return 403
    if isinstance(error, services.WrongState | services.VersionConflict):
        return 409
    return 400


def _get_curation_for_user(request: HttpRequest, curation_id: int) -> Curation:
    """The curation, if this user may read it (selectors.Blinding), else 404; writes are the
    services' call."""
    return get_object_or_404(
        selectors.curations_visible_to(user=request.user).select_related(
            "task", "spectrum", "reviser", "auditor_1", "auditor_2", "draft_job"
        ),
        pk=curation_id,
    )


def _get_job_for_user(request: HttpRequest, job_id: int) -> Job:
    return get_object_or_404(Job.objects.select_related("created_by"), pk=job_id)


def job_cancel_allowed(job: Job, user: AbstractBaseUser) -> bool:
    return permissions.is_owner_or_staff(user, job.created_by_id)


def _get_rw_job_for_user(request: HttpRequest, job_id: int) -> Job:
    job = _get_job_for_user(request, job_id)
    if not job_cancel_allowed(job, _expert(request)):
        raise PermissionDenied("only the job's creator or staff can cancel it")
    return job


def standardize_run_check(curation: Curation, user: AbstractBaseUser) -> None:
    """Who may (re)run standardization, and when (the runner skips non-approved ones)."""
    if not getattr(user, "is_staff", False):
        raise services.NotAllowed("only staff can run standardization")
    if curation.state != CurationState.APPROVED:
        raise services.WrongState(
            f"cannot standardize: the trajectory is {curation.get_state_display()}, not approved"
        )


def _page(request: HttpRequest, rows: Any, *, size: int = PAGE_SIZE, param: str = "page") -> Page:
    return Paginator(rows, size).get_page(request.GET.get(param))


def _query_without(request: HttpRequest, *params: str) -> str:
    query = request.GET.copy()
    for param in params:
        query.pop(param, None)
    return query.urlencode()


# --- reads shared by pages and the API (selector candidates) ------------------------------------


@dataclass(frozen=True)
class StepView:
    index: int  # position in the trajectory (audit step comments are keyed by it)
    think: str
    raw: str  # the assistant turn as written
    tool_name: str
    arguments: str  # the call's arguments as JSON text
    wavelength_range: tuple[float, float] | None
    label: str
    result_ok: bool | None
    result_text: str
    image_sha: str | None

    @property
    def number(self) -> int:
        return self.index + 1

    @property
    def call_text(self) -> str:
        if self.wavelength_range is None:
            return self.arguments
        low, high = self.wavelength_range
        return f"[{low:g}, {high:g}] {self.label}".strip()


@dataclass(frozen=True)
class AnswerView:
    index: int
    think: str
    prediction: str | None
    justification: str


@dataclass(frozen=True)
class TrajectoryView:
    user_prompt: str
    initial_image_sha: str | None
    steps: list[StepView]  # every turn but the final answer
    answer: AnswerView | None
    stop_reason: str | None
    format_ok: bool | None
    format_reasons: list[str]


def _step_view(step: dict[str, Any]) -> StepView:
    call = step.get("tool_call") or {}
    result = step.get("tool_result") or {}
    image = result.get("image") or {}
    wavelength_range = call.get("wavelength_range")
    return StepView(
        index=int(step.get("index", 0)),
        think=step.get("think") or "",
        raw=step.get("assistant_text") or "",
        tool_name=call.get("name") or "",
        arguments=json.dumps(call.get("arguments") or {}, ensure_ascii=False) if call else "",
        wavelength_range=tuple(sorted(wavelength_range)) if wavelength_range else None,  # type: ignore[arg-type]
        label=(call.get("label") or "").strip(),
        result_ok=result.get("ok") if result else None,
        result_text=result.get("text") or "",
        image_sha=image.get("png_sha256"),
    )


def trajectory_view(data: dict[str, Any]) -> TrajectoryView:
    """What pages show of a stored trajectory, read from the stored dict (no PNG decoding)."""
    steps = list(data.get("steps") or [])
    answer = data.get("answer")
    answer_view = None
    if answer is not None and steps:
        last = steps.pop()
        answer_view = AnswerView(
            index=int(last.get("index", len(steps))),
            think=last.get("think") or "",
            prediction=answer.get("prediction"),
            justification=answer.get("justification") or "",
        )
    return TrajectoryView(
        user_prompt=data.get("user_prompt") or "",
        initial_image_sha=(data.get("initial_image") or {}).get("png_sha256"),
        steps=[_step_view(step) for step in steps],
        answer=answer_view,
        stop_reason=data.get("stop_reason"),
        format_ok=data.get("format_ok"),
        format_reasons=list(data.get("format_reasons") or []),
    )


def inspected_ranges(data: dict[str, Any]) -> list[list[float]]:
    """Every window the trajectory's tool calls showed ([lo, hi], the plot's frame)."""
    ranges = []
    for step in data.get("steps") or []:
        result = step.get("tool_result") or {}
        shown = (result.get("image") or {}).get("wavelength_range")
        if not shown and result.get("ok"):
            shown = (step.get("tool_call") or {}).get("wavelength_range")
        if shown:
            low, high = sorted(float(value) for value in shown)
            ranges.append([low, high])
    return ranges


@dataclass(frozen=True)
class Segment:
    op: str  # "equal" | "insert" | "delete"
    text: str


_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")


def text_diff(old: str, new: str) -> list[Segment]:
    """A word-level diff as segments; templates render them (escaped) in <ins>/<del>."""
    before, after = _TOKENS.findall(old), _TOKENS.findall(new)
    segments: list[Segment] = []

    def add(op: str, tokens: list[str]) -> None:
        if not tokens:
            return
        if segments and segments[-1].op == op:
            segments[-1] = Segment(op, segments[-1].text + "".join(tokens))
        else:
            segments.append(Segment(op, "".join(tokens)))

    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            add("equal", before[i1:i2])
        else:
            add("delete", before[i1:i2])
            add("insert", after[j1:j2])
    return segments


def _changed(segments: list[Segment]) -> bool:
    return any(segment.op != "equal" for segment in segments)


@dataclass(frozen=True)
class StepDiff:
    position: int  # 1-based position in the comparison
    old: StepView | None
    new: StepView | None
    think: list[Segment]
    call: list[Segment]

    @property
    def changed(self) -> bool:
        return _changed(self.think) or _changed(self.call)

    @property
    def comment_key(self) -> str:
        """Audit step comments are keyed by the step index in the audited (new) version."""
        step = self.new or self.old
        return str(step.index if step else self.position - 1)


@dataclass(frozen=True)
class AnswerDiff:
    old: AnswerView | None
    new: AnswerView | None
    think: list[Segment]
    justification: list[Segment]

    @property
    def prediction_changed(self) -> bool:
        old = self.old.prediction if self.old else None
        new = self.new.prediction if self.new else None
        return old != new

    @property
    def comment_key(self) -> str:
        answer = self.new or self.old
        return str(answer.index if answer else 0)


@dataclass(frozen=True)
class VersionDiff:
    old: TrajectoryVersion
    new: TrajectoryVersion
    steps: list[StepDiff]
    answer: AnswerDiff


def version_diff(old: TrajectoryVersion, new: TrajectoryVersion) -> VersionDiff:
    """Tool steps paired by position, then the final answers; text diffs per field."""
    before, after = trajectory_view(old.data), trajectory_view(new.data)
    steps = []
    for position in range(max(len(before.steps), len(after.steps))):
        a = before.steps[position] if position < len(before.steps) else None
        b = after.steps[position] if position < len(after.steps) else None
        steps.append(
            StepDiff(
                position=position + 1,
                old=a,
                new=b,
                think=text_diff(a.think if a else "", b.think if b else ""),
                call=text_diff(a.call_text if a else "", b.call_text if b else ""),
            )
        )
    answer = AnswerDiff(
        old=before.answer,
        new=after.answer,
        think=text_diff(
            before.answer.think if before.answer else "", after.answer.think if after.answer else ""
        ),
        justification=text_diff(
            before.answer.justification if before.answer else "",
            after.answer.justification if after.answer else "",
        ),
    )
    return VersionDiff(old=old, new=new, steps=steps, answer=answer)


def history_visible_to(*, curation: Curation, user: AbstractBaseUser) -> QuerySet[AuditLog]:
    """The audit log without what blinding hides: another auditor's verdict while its round is
    open, and another voter's vote before the vote has closed."""
    rows = selectors.curation_history(curation=curation)
    open_round = selectors.open_audit_round(curation)
    if open_round is not None:
        rows = rows.exclude(
            Q(action__in=AUDIT_ACTIONS) & ~Q(actor=user) & Q(data__round=open_round)
        )
    if curation.state not in (CurationState.ACCEPTED, CurationState.REJECTED):
        rows = rows.exclude(Q(action__in=VOTE_ACTIONS) & ~Q(actor=user))
    return rows.order_by("id")


def image_is_readable(*, sha256: str, user: AbstractBaseUser, curation_id: int | None) -> bool:
    """An image may be read when a trajectory version the user may read holds it, optionally
    within one curation."""
    return selectors.image_in_curations(user=user, sha256=sha256, curation_id=curation_id)


def draft_candidates(
    *, task: Task, dataset: str = "", split: str = "", label: str = "", skip_curated: bool = True
) -> QuerySet[Spectrum]:
    """Labelled spectra of a task a draft job may take, oldest first."""
    rows = Spectrum.objects.filter(task=task, label__in=Label.values).defer("arrays", "meta")
    if dataset:
        rows = rows.filter(dataset=dataset)
    if split:
        rows = rows.filter(split=split)
    if label:
        rows = rows.filter(label=label)
    if skip_curated:
        rows = rows.exclude(Exists(Curation.objects.filter(spectrum=OuterRef("pk"), task=task)))
    return rows.order_by("id")


def accepted_counts() -> list[dict[str, Any]]:
    """Accepted trajectories per task, with YES and NO counts."""
    table: dict[str, dict[str, Any]] = {}
    rows = (
        selectors.accepted_curations()
        .order_by()
        .values("task__code", "ground_truth")
        .annotate(n=Count("id"))
    )
    for row in rows:
        entry = table.setdefault(
            row["task__code"], {"task": row["task__code"], "YES": 0, "NO": 0, "total": 0}
        )
        entry[row["ground_truth"]] += row["n"]
        entry["total"] += row["n"]
    return [table[code] for code in sorted(table)]


def actions_for(curation: Curation, user: AbstractBaseUser) -> dict[str, bool]:
    """Which actions to offer (a hint for the page; the services enforce the rules)."""
    state, uid = curation.state, user.pk
    is_reviser = curation.reviser_id == uid
    is_auditor = uid in (curation.auditor_1_id, curation.auditor_2_id)
    audited = curation.audits.filter(round=curation.audit_round, auditor_id=uid).exists()
    may_audit = not audited and uid not in selectors.revision_authors(curation)
    voted = curation.votes.filter(voter_id=uid).exists()
    is_staff = permissions.CURATION_MANAGE.allows(user)
    workflow = {
        "screen": state == CurationState.SCREENING,
        "claim_revision": state in EDITABLE_STATES
        and curation.reviser_id is None
        and not is_auditor,
        "revise": state in EDITABLE_STATES and is_reviser,
        "submit": state == CurationState.IN_REVISION and is_reviser,
        "claim_audit": state == CurationState.IN_AUDIT
        and not (is_reviser or is_auditor)
        and may_audit
        and (curation.auditor_1_id is None or curation.auditor_2_id is None),
        "audit": state == CurationState.IN_AUDIT and is_auditor and may_audit,
        "vote": state == CurationState.IN_VOTE
        and uid in (curation.reviser_id, curation.auditor_1_id, curation.auditor_2_id)
        and not voted,
    }
    if not permissions.CURATE.allows(user):  # the workflow's actions are the experts'
        workflow = dict.fromkeys(workflow, False)
    return workflow | {
        "standardize": is_staff and state == CurationState.APPROVED,
        "reassign": is_staff,
    }


def roles_of(curation: Curation, user: AbstractBaseUser) -> list[str]:
    return [role for role in services.ROLES if getattr(curation, f"{role}_id") == user.pk]


def latest_standardized(curation: Curation) -> TrajectoryVersion | None:
    return (
        curation.versions.filter(kind=VersionKind.STANDARDIZED)
        .select_related("author")
        .order_by("-number")
        .first()
    )


def standardizer_of(version: TrajectoryVersion) -> dict[str, Any]:
    try:
        value = json.loads(version.comment or "{}")
    except json.JSONDecodeError:
        return {"name": version.comment}
    return value if isinstance(value, dict) else {"name": str(value)}


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
    rows = selectors.curations_visible_to(user=request.user, rows=rows.only(*LIST_FIELDS))
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
    except services.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=status_for(error))
    messages.success(request, "You are now the reviser of this trajectory.")
    return redirect("curation_revise", curation.pk)


@require_role(permissions.CURATE)
@require_POST
def claim_audit(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    try:
        services.curation_claim_audit(curation=curation, user=_expert(request))
    except services.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=status_for(error))
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
    except services.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=status_for(error))
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
    except services.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=status_for(error))
    messages.success(request, f"The {form.cleaned_data['role'].replace('_', ' ')} was reassigned.")
    return redirect("curation_detail", curation.pk)


@require_role(permissions.CURATION_MANAGE)
@require_POST
def standardize_run(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    try:
        standardize_run_check(curation, _expert(request))
    except services.WorkflowError as error:
        return _render_detail(request, curation, error=str(error), status=status_for(error))
    job = services.job_create(
        kind="standardize",
        params={"curation_ids": [curation.pk]},
        created_by=_expert(request),
        total=1,
    )
    return redirect("job_detail", job.pk)


# --- screening ---------------------------------------------------------------------------------


def _next_to_screen(after: Curation) -> Curation | None:
    rows = Curation.objects.filter(state=CurationState.SCREENING).exclude(pk=after.pk)
    return rows.filter(pk__gt=after.pk).order_by("pk").first() or rows.order_by("pk").first()


def _screen_context(curation: Curation, form: ScreenForm, error: str) -> dict[str, Any]:
    head = selectors.head_version(curation)
    plot_data = selectors.spectrum_plot_data(row=curation.spectrum, task=curation.task)
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
            except services.WorkflowError as problem:
                error, status = str(problem), status_for(problem)
            else:
                messages.success(
                    request, f"Trajectory {curation.pk} {'kept' if keep else 'discarded'}."
                )
                following = _next_to_screen(curation)
                return (
                    redirect("curation_screen", following.pk)
                    if following
                    else redirect("curation_my_work")
                )
        else:
            error, status = form.errors.as_text(), 400
    context = _screen_context(curation, form, error)
    return render(request, "curation/screen.html", context, status=status)


# --- revision editor ---------------------------------------------------------------------------


@dataclass
class EditorRow:
    index: int
    draft: StepDraft
    image_url: str | None
    error: str
    comments: list[Audit]
    range_warning: str = ""  # the reasoning cites a window the tool call no longer shows

    @property
    def number(self) -> int:
        return self.index + 1


_STEP_ERROR = re.compile(r"^step (\d+)\b")


def _place_edit_error(message: str, count: int) -> tuple[int | None, str]:
    """(step index or None, where): EditError messages start with the step or field they name."""
    match = _STEP_ERROR.match(message)
    if match and 1 <= int(match.group(1)) <= count:
        return int(match.group(1)) - 1, "step"
    if message.startswith(("final reasoning", "justification", "answer")):
        return None, "answer"
    return None, "general"


def _parse_range(draft: StepDraft) -> tuple[float, float] | None:
    try:
        low, high = float(draft.lo), float(draft.hi)
    except ValueError:
        return None
    return (low, high) if 0 < low < high else None


def _range_warning(draft: StepDraft) -> str:
    shown = _parse_range(draft)
    problem = range_mismatch(draft.think, shown) if shown is not None else None
    return f"Check the wording: {problem}." if problem else ""


def _step_image_url(curation: Curation, draft: StepDraft, stored: StepView | None) -> str | None:
    shown = _parse_range(draft)
    if shown is None:
        return None
    label = draft.label.strip()
    if (
        stored is not None
        and stored.image_sha
        and stored.wavelength_range == shown
        and stored.label == label
    ):
        return reverse("curation_image", args=[stored.image_sha]) + f"?curation={curation.pk}"
    query = QueryDict(mutable=True)
    query.update({"lo": f"{shown[0]:g}", "hi": f"{shown[1]:g}", "label": label})
    return reverse("spectrum_render_png", args=[curation.spectrum_id]) + "?" + query.urlencode()


def label_step_comments(curation: Curation, audits: list[Audit]) -> list[Audit]:
    """Give each audit `comment_rows`: (label, text) per comment, in trajectory order, the
    comment on the final answer labelled as such (its key is the answer turn's index, one past
    the last tool step: shown as a step number it read "Step 3" of a 2-step trajectory)."""
    numbers = {audit.version_number for audit in audits if audit.step_comments}
    answers = {
        number: trajectory_view(data).answer
        for number, data in curation.versions.filter(number__in=numbers).values_list(
            "number", "data"
        )
    }
    for audit in audits:
        answer = answers.get(audit.version_number)
        answer_key = str(answer.index) if answer is not None else None
        rows = []
        for key, text in sorted(
            (audit.step_comments or {}).items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0
        ):
            label = "Final answer" if key == answer_key else f"Step {int(key) + 1}"
            rows.append((label, text))
        audit.comment_rows = rows  # type: ignore[attr-defined]
        audit.answer_key = answer_key  # type: ignore[attr-defined]
        audit.answer_comment = dict(audit.step_comments or {}).get(answer_key or "", "")  # type: ignore[attr-defined]
    return audits


def _closed_round_audits(curation: Curation, user: AbstractBaseUser) -> list[Audit]:
    """Earlier rounds' audits the reviser may read (both verdicts of a round are in)."""
    return [
        audit
        for audit in selectors.audits_visible_to(curation=curation, user=user)
        if audit.round < curation.audit_round or curation.state != CurationState.IN_AUDIT
    ]


def _render_editor(
    request: HtmxHttpRequest,
    curation: Curation,
    *,
    state: EditorState,
    base_number: int,
    notice: str = "",
    edit_error: str = "",
    error: str = "",
    stale_autosave: RevisionDraft | None = None,
    status: int = 200,
) -> HttpResponse:
    user = _expert(request)
    head = selectors.head_version(curation)
    stored = trajectory_view(head.data).steps if base_number == head.number else []
    previous = label_step_comments(curation, _closed_round_audits(curation, user))
    last_round = max((audit.round for audit in previous), default=None)
    error_index, where = _place_edit_error(edit_error, len(state.steps))
    rows = [
        EditorRow(
            index=index,
            draft=draft,
            image_url=_step_image_url(
                curation, draft, stored[index] if index < len(stored) else None
            ),
            error=edit_error if where == "step" and error_index == index else "",
            comments=[
                audit
                for audit in previous
                if audit.round == last_round
                and str(index) in audit.step_comments
                and str(index) != audit.answer_key  # type: ignore[attr-defined]
            ],
            range_warning=_range_warning(draft),
        )
        for index, draft in enumerate(state.steps)
    ]
    context = {
        "curation": curation,
        "head": head,
        "base_number": base_number,
        "state": state,
        "rows": rows,
        "answer_error": edit_error if where == "answer" else "",
        "error": error or (edit_error if where == "general" else ""),
        "notice": notice,
        "can_edit": curation.reviser_id == user.pk and curation.state in EDITABLE_STATES,
        "actions": actions_for(curation, user),
        "previous_audits": previous,
        "answer_comments": [
            audit for audit in previous if audit.round == last_round and audit.answer_comment
        ],
        "stale_autosave": stale_autosave,
        "stale_state": EditorState.from_data(stale_autosave.data) if stale_autosave else None,
    }
    template = "curation/revise.html" + ("#editor" if request.htmx else "")
    return render(request, template, context, status=status)


def _editor_start(
    curation: Curation, head: TrajectoryVersion, user: AbstractBaseUser
) -> tuple[EditorState, str, RevisionDraft | None]:
    """The head's content, or the user's autosave when it was made on the head."""
    autosave = RevisionDraft.objects.filter(curation=curation, author_id=user.pk).first()
    if autosave is not None and autosave.base_number == head.number:
        when = timezone.localtime(autosave.updated_at).strftime("%Y-%m-%d %H:%M:%S")
        return EditorState.from_data(autosave.data), f"Restored your autosave from {when}.", None
    state = EditorState.from_trajectory(selectors.version_trajectory(head))
    return state, "", autosave


def _save_revision(
    request: HtmxHttpRequest, curation: Curation, state: EditorState, base_number: int
) -> HttpResponse:
    try:
        base = curation.versions.filter(number=base_number).first()
        if base is None:
            raise services.WorkflowError(f"version {base_number} of this trajectory does not exist")
        steps, answer = state.to_edit()
        trajectory = apply_edit(
            selectors.version_trajectory(base),
            tool=selectors.spectrum_tool(curation.spectrum),
            steps=steps,
            answer=answer,
        )
        version = services.curation_save_revision(
            curation=curation,
            user=_expert(request),
            base_number=base_number,
            trajectory=trajectory,
            comment=state.comment,
        )
    except EditError as problem:
        return _render_editor(
            request,
            curation,
            state=state,
            base_number=base_number,
            edit_error=str(problem),
            status=400,
        )
    except services.WorkflowError as problem:
        return _render_editor(
            request,
            curation,
            state=state,
            base_number=base_number,
            error=str(problem),
            status=status_for(problem),
        )
    messages.success(request, f"Saved version {version.number}.")
    if request.htmx:
        return HttpResponseClientRedirect(reverse("curation_revise", args=[curation.pk]))
    return redirect("curation_revise", curation.pk)


@require_role(permissions.CURATE)
@require_http_methods(["GET", "POST"])
def revise(request: HtmxHttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    if request.method == "GET":
        head = selectors.head_version(curation)
        state, notice, stale = _editor_start(curation, head, _expert(request))
        return _render_editor(
            request,
            curation,
            state=state,
            base_number=head.number,
            notice=notice,
            stale_autosave=stale,
        )
    state = EditorState.from_post(request.POST)
    raw_base = request.POST.get("base_number", "")
    base_number = int(raw_base) if raw_base.isdigit() else curation.head_number
    if request.POST.get("action") == "add_step":
        state.steps.append(StepDraft())
        return _render_editor(request, curation, state=state, base_number=base_number)
    removed = request.POST.get("remove", "")
    if removed.isdigit():
        if int(removed) < len(state.steps):
            del state.steps[int(removed)]
        return _render_editor(request, curation, state=state, base_number=base_number)
    return _save_revision(request, curation, state, base_number)


@require_role(permissions.CURATE)
@require_GET
def step_image(request: HttpRequest, curation_id: int) -> HttpResponse:
    """The tool's view of one editor step's range (htmx swaps it in place of the old image)."""
    curation = _get_curation_for_user(request, curation_id)
    raw_index = request.GET.get("index", "0")
    index = int(raw_index) if raw_index.isdigit() else 0
    draft = StepDraft(
        lo=request.GET.get(f"step-{index}-lo", "").strip(),
        hi=request.GET.get(f"step-{index}-hi", "").strip(),
        label=request.GET.get(f"step-{index}-label", "").strip(),
    )
    shown = _parse_range(draft)
    result = None
    if shown is not None:
        result = selectors.spectrum_render(
            row=curation.spectrum, wavelength_range=list(shown), label=draft.label or None
        )
    context = {
        "index": index,
        "result": result,
        "image_url": _step_image_url(curation, draft, None) if result and result.ok else None,
    }
    return render(request, "curation/revise.html#step-image", context)


@require_role(permissions.CURATE)
@require_POST
def autosave(request: HttpRequest, curation_id: int) -> HttpResponse:
    curation = _get_curation_for_user(request, curation_id)
    state = EditorState.from_post(request.POST)
    raw_base = request.POST.get("base_number", "")
    base_number = int(raw_base) if raw_base.isdigit() else curation.head_number
    try:
        draft = services.curation_autosave(
            curation=curation, user=_expert(request), base_number=base_number, data=state.to_data()
        )
    except services.WorkflowError as error:
        context = {"curation": curation, "autosave_error": str(error)}
        return render(
            request, "curation/revise.html#autosave-status", context, status=status_for(error)
        )
    context = {"curation": curation, "autosaved_at": timezone.localtime(draft.updated_at)}
    return render(request, "curation/revise.html#autosave-status", context)


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
            except services.WorkflowError as problem:
                error, status = str(problem), status_for(problem)
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
    raw_base = request.GET.get("base", "1")
    base = curation.versions.filter(number=int(raw_base) if raw_base.isdigit() else 1).first()
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
            except services.WorkflowError as problem:
                error, status = str(problem), status_for(problem)
            else:
                messages.success(request, "Your vote is recorded.")
                return redirect("curation_vote", curation.pk)
        else:
            error, status = form.errors.as_text(), 400
    context = _vote_context(curation, user, form, error)
    return render(request, "curation/vote.html", context, status=status)


# --- drafts and imports ------------------------------------------------------------------------


def draft_params(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The draft job's params and total from a validated DraftJobForm (or API input)."""
    task: Task = data["task"]
    rows = draft_candidates(
        task=task,
        dataset=data.get("dataset") or "",
        split=data.get("split") or "",
        label=data.get("label") or "",
        skip_curated=bool(data.get("skip_curated")),
    )
    ids = list(rows.values_list("id", flat=True)[: data["limit"]])
    if not ids:
        raise services.WorkflowError(
            f"no labelled {task.code} spectrum matches these filters; load or label spectra first"
        )
    params = {
        "spectrum_ids": ids,
        "task": task.code,
        "teacher": teacher_spec(data["teacher"]),
        "max_tool_calls": data["max_tool_calls"],
    }
    return params, len(ids)


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
            except services.WorkflowError as problem:
                error = str(problem)
            else:
                job = services.job_create(
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
                result = services.curation_import(
                    trajectories=parsed.trajectories,
                    created_by=_expert(request),
                    source=parsed.source,
                )
                context["result"] = result
                context["import_warnings"] = parsed.warnings
                status = 200
    return render(request, "curation/import.html", context, status=status)


# --- jobs --------------------------------------------------------------------------------------


@require_role(permissions.JOBS_READ)
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    rows = Job.objects.select_related("created_by").order_by("-id")
    return render(request, "jobs/list.html", {"page": _page(request, rows)})


@require_role(permissions.JOBS_READ)
@require_GET
def job_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = _get_job_for_user(request, job_id)
    context = {
        "job": job,
        "can_cancel": not job.finished and job_cancel_allowed(job, _expert(request)),
    }
    if request.htmx:
        html = render_to_string("jobs/detail.html#progress", context, request=request)
        return HttpResponseStopPolling(html) if job.finished else HttpResponse(html)
    return render(request, "jobs/detail.html", context)


@require_role(permissions.JOB_CONTROL)
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _get_rw_job_for_user(request, job_id)
    if services.job_cancel(job=job, actor=_expert(request)):
        messages.success(request, f"Job {job.pk} was cancelled.")
    else:
        messages.info(request, f"Job {job.pk} had already finished.")
    return redirect("job_detail", job.pk)


# --- datasets ----------------------------------------------------------------------------------


def _datasets_context(request: HttpRequest) -> dict[str, Any]:
    exports = DatasetExport.objects.select_related("created_by").order_by("-version")
    return {
        "accepted": accepted_counts(),
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
    latest = DatasetExport.objects.order_by("-version").first()
    try:
        export = services.dataset_export_create(
            actor=_expert(request), task=request.POST.get("task", "").strip()
        )
    except services.WorkflowError as error:
        context = {**_datasets_context(request), "error": str(error)}
        return render(request, "curation/datasets.html", context, status=status_for(error))
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
def dataset_download(request: HttpRequest, export_id: int) -> FileResponse:
    export = get_object_or_404(DatasetExport, pk=export_id)  # every signed-in expert may read
    return FileResponse(
        export.archive.open("rb"),
        as_attachment=True,
        filename=f"specvet-sft-v{export.version}.zip",
        content_type="application/zip",
    )
