"""The revision editor: edit a trajectory's steps and answer, autosave, re-render a step."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agent.editing import EditError, apply_edit, range_mismatch
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.errors import http_status
from annotation.core.permissions import require_role
from annotation.curation import selectors, services
from annotation.curation.forms import (
    EditorState,
    StepDraft,
)
from annotation.curation.models import (
    Audit,
    Curation,
    CurationState,
    RevisionDraft,
    TrajectoryVersion,
)
from annotation.curation.permissions import EDITABLE_STATES, actions_for
from annotation.curation.selectors import StepView, label_step_comments, trajectory_view
from annotation.curation.views import HtmxHttpRequest, _expert, _get_curation_for_user
from annotation.spectra import selectors as spectra_selectors

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
            audit
            for audit in previous
            # answer_comment: set on each Audit by selectors.previous_audits, not a model field.
            if audit.round == last_round and audit.answer_comment  # type: ignore[attr-defined]
        ],
        "stale_autosave": stale_autosave,
        "stale_state": EditorState.from_data(stale_autosave.data) if stale_autosave else None,
    }
    if not request.htmx:  # the whole spectrum with each step's window, above the editor
        plot = spectra_selectors.spectrum_plot_data(row=curation.spectrum, task=curation.task)
        plot["inspected"] = [
            list(window) for draft in state.steps if (window := _parse_range(draft)) is not None
        ]
        context["plot_data"] = plot
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
            raise core_errors.WorkflowError(
                f"version {base_number} of this trajectory does not exist"
            )
        steps, answer = state.to_edit()
        trajectory = apply_edit(
            selectors.version_trajectory(base),
            tool=spectra_selectors.spectrum_tool(curation.spectrum),
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
    except core_errors.WorkflowError as problem:
        return _render_editor(
            request,
            curation,
            state=state,
            base_number=base_number,
            error=str(problem),
            status=http_status(problem),
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
        result = spectra_selectors.spectrum_render(
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
    except core_errors.WorkflowError as error:
        context = {"curation": curation, "autosave_error": str(error)}
        return render(
            request, "curation/revise.html#autosave-status", context, status=http_status(error)
        )
    context = {"curation": curation, "autosaved_at": timezone.localtime(draft.updated_at)}
    return render(request, "curation/revise.html#autosave-status", context)
