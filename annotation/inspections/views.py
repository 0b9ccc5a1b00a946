"""Inspection runs: start, follow progress, watch a candidate live, retry, cancel."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import HtmxHttpRequest
from annotation.core.permissions import require_role
from annotation.inspections import (
    ablation_selectors,
    evaluations,
    interruptions,
    reproduction,
    run_policies,
    selectors,
    services,
)
from annotation.inspections import permissions as inspection_permissions
from annotation.inspections.forms import EvaluationForm, InspectionRunForm
from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.spectra.models import Spectrum
from annotation.spectra.workbench import spectrum_viewer_context
from annotation.training_runs import selectors as training_runs_selectors

PAGE_SIZE = 50


def _candidate_spectra(form: InspectionRunForm) -> list[int]:
    data = form.cleaned_data
    rows = Spectrum.objects.order_by("id")
    if data["labelled_for_task"]:
        rows = rows.filter(task=data["task"])
    for field in ("dataset", "split", "survey", "label"):
        if data.get(field):
            rows = rows.filter(**{field: data[field]})
    return list(rows.values_list("pk", flat=True)[: data["limit"]])


def _get_run_for_user(request: HttpRequest, run_id: int) -> InspectionRun:
    """The run, if this user may read it; otherwise 404, as if there were none (Blinding)."""
    runs = blinding.runs_visible_to(user=request.user).select_related("task")
    return get_object_or_404(runs, pk=run_id)


def _get_candidate_for_user(request: HttpRequest, candidate_id: int) -> Candidate:
    candidates = blinding.candidates_visible_to(user=request.user)
    return get_object_or_404(candidates.select_related("run__task", "spectrum"), pk=candidate_id)


@require_role(permissions.INSPECTION_READ)
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    runs = blinding.runs_visible_to(user=request.user).select_related("task", "created_by")
    page = Paginator(runs, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "inspections/run_list.html", {"page": page})


@require_role(permissions.INSPECT)
@require_http_methods(["GET", "POST"])
def run_create(request: HttpRequest) -> HttpResponse:
    form = InspectionRunForm(request.POST or None, initial=request.GET or None)
    if request.method == "POST" and form.is_valid():
        spectrum_ids = _candidate_spectra(form)
        try:
            run = services.inspection_run_create(
                task=form.cleaned_data["task"],
                spectrum_ids=spectrum_ids,
                policy_spec=form.policy_spec(),
                sampling=form.sampling(),
                rollouts=form.cleaned_data["rollouts"],
                max_tool_calls=form.cleaned_data["max_tool_calls"],
                confidence_threshold=form.cleaned_data["confidence_threshold"],
                name=form.cleaned_data["name"],
                created_by=request.user,  # type: ignore[arg-type]
            )
        except core_errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            return redirect("run_detail", run_id=run.pk)
    return render(request, "inspections/run_create.html", {"form": form})


@require_role(permissions.INSPECTION_READ)
@require_GET
def run_detail(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = _get_run_for_user(request, run_id)
    progress = selectors.run_progress(run=run, user=request.user)
    if request.htmx and request.GET.get("part") == "progress":
        response = render(
            request,
            "inspections/run_detail.html#progress",
            {
                "run": run,
                "progress": progress,
                "can_resend": permissions.INSPECTION_RESEND.allows(request.user),
            },
        )
        if progress["finished"]:
            # One last full refresh brings the metrics and the final table.
            response = HttpResponseStopPolling(response.content)
            response["HX-Refresh"] = "true"
        return response
    candidates = blinding.candidates_visible_to(user=request.user).filter(run=run)
    interrupted = (
        selectors.interrupted_candidate_ids(rows=candidates) if progress["interrupted"] else set()
    )
    candidates = candidates.select_related("spectrum").order_by("id")
    state = request.GET.get("state", "")
    if state == "expert":
        candidates = candidates.filter(needs_expert=True)
    elif state == "interrupted":
        candidates = candidates.filter(pk__in=interrupted)
    elif state:
        candidates = candidates.filter(state=state)
        if state == CandidateState.RUNNING:
            candidates = candidates.exclude(pk__in=interrupted)
    page = Paginator(candidates, PAGE_SIZE).get_page(request.GET.get("page"))
    metrics = selectors.run_metrics(run=run, user=request.user) if progress["done"] else None
    checkpoint = training_runs_selectors.checkpoint_for_policy_spec(run.policy_spec)
    return render(
        request,
        "inspections/run_detail.html",
        {
            "run": run,
            "progress": progress,
            "page": page,
            "state": state,
            "metrics": metrics,
            "policy_spec": {k: v for k, v in run.policy_spec.items() if k != "api_key"},
            "checkpoint": checkpoint,
            "lineage": training_runs_selectors.lineage_summary(checkpoint.lineage)
            if checkpoint
            else None,
            "can_control": _can_control(request, run),
            "can_resend": permissions.INSPECTION_RESEND.allows(request.user),
            "interrupted": interrupted,
            "reproducibility": selectors.run_reproducibility(run=run, user=request.user),
            "shift": selectors.run_shift(run=run, user=request.user),
            "ablation_counts": ablation_selectors.run_ablation_counts(run),
            "can_ablate": permissions.EVIDENCE_ABLATE.allows(request.user),
        },
    )


@require_role(permissions.INSPECTION_RESEND)
@require_POST
def run_resend(request: HttpRequest, run_id: int) -> HttpResponse:
    """Staff: send the run's interrupted candidates again now (the ``candidate`` fields name
    some of them; none: every interrupted candidate the user may read)."""
    run = _get_run_for_user(request, run_id)
    visible = blinding.candidates_visible_to(user=request.user).filter(run=run)
    raw = request.POST.getlist("candidate")
    if raw:
        if not all(value.isdigit() for value in raw):
            messages.error(request, "candidate must be candidate ids")
            return redirect("run_detail", run_id=run.pk)
        ids = sorted({int(v) for v in raw})
        missing = sorted(set(ids) - set(visible.filter(pk__in=ids).values_list("pk", flat=True)))
        if missing:  # not of this run, or hidden from this user: the same answer
            messages.error(request, f"no candidate {missing[0]} in this run")
            return redirect("run_detail", run_id=run.pk)
    else:
        ids = sorted(selectors.interrupted_candidate_ids(rows=visible))[: interruptions.MAX_RESEND]
    try:
        resent = interruptions.candidates_resend_interrupted(
            run=run,
            candidate_ids=ids,
            actor=request.user,  # type: ignore[arg-type]
        )
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(
            request,
            f"Sent again: {len(resent)} interrupted candidate{'s' if len(resent) != 1 else ''}.",
        )
    return redirect("run_detail", run_id=run.pk)


@require_role(permissions.INSPECTION_CONTROL)
@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _get_run_for_user(request, run_id)
    cancelled = services.inspection_run_cancel(run=run, actor=request.user)  # type: ignore[arg-type]
    messages.info(request, f"Run cancelled: {cancelled} pending candidates will not run.")
    return redirect("run_detail", run_id=run.pk)


@require_role(permissions.INSPECTION_CONTROL)
@require_POST
def candidate_retry(request: HttpRequest, candidate_id: int) -> HttpResponse:
    candidate = _get_candidate_for_user(request, candidate_id)
    try:
        services.candidate_retry(candidate=candidate, actor=request.user)  # type: ignore[arg-type]
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    return redirect("candidate_live", candidate_id=candidate.pk)


def _can_control(request: HttpRequest, run: InspectionRun) -> bool:
    """Whether to show cancel and retry (the services check it again)."""
    return inspection_permissions.can_control(request.user, run)


def _step_context(live: list) -> list[dict]:
    return [
        {"pk": step.pk, "rollout": step.rollout_index, "index": step.step_index, "data": step.data}
        for step in live
    ]


@require_role(permissions.INSPECTION_READ)
@require_GET
def candidate_live(request: HttpRequest, candidate_id: int) -> HttpResponse:
    candidate = _get_candidate_for_user(request, candidate_id)
    steps = selectors.live_steps_after(candidate=candidate, after=0)
    viewer = spectrum_viewer_context(
        row=candidate.spectrum,
        task=candidate.run.task,
        user=request.user,
        inspected=selectors.inspected_ranges([s.data for s in steps]),
        fit_later=True,
    )
    status = selectors.candidate_status(candidate=candidate)
    return render(
        request,
        "inspections/candidate_live.html",
        {
            "candidate": candidate,
            "run": candidate.run,
            "steps": _step_context(steps),
            "last_pk": steps[-1].pk if steps else 0,
            **viewer,
            "finished": status.finished,
            **_outcome_context(request, candidate, status),
        },
    )


def _outcome_context(
    request: HttpRequest, candidate: Candidate, status: selectors.CandidateStatus
) -> dict[str, Any]:
    """The outcome panel's: the candidate's true state (``selectors.candidate_status``) and
    what this user may do about it."""
    return {
        "status": status,
        "can_control": _can_control(request, candidate.run),
        "can_reproduce": inspection_permissions.can_reproduce(request.user, candidate.run),
        "can_resend": permissions.INSPECTION_RESEND.allows(request.user),
        "ablation": _ablation(candidate),
    }


@require_role(permissions.INSPECTION_READ)
@require_POST
def candidate_reproduce(request: HtmxHttpRequest, candidate_id: int) -> HttpResponse:
    """Re-run the candidate in-process now and show what differs from what was stored."""
    candidate = _get_candidate_for_user(request, candidate_id)
    if not inspection_permissions.can_reproduce(request.user, candidate.run):
        raise PermissionDenied(
            "reproducing a model's candidate sends the model every turn again: only the run's "
            "owner or staff may"
        )
    outcome = reproduction.candidate_reproduce(candidate.pk)
    exact, why_not = run_policies.deterministic(candidate.run)
    template = "inspections/_reproduction.html" if request.htmx else "inspections/reproduction.html"
    return render(
        request,
        template,
        {"candidate": candidate, "outcome": outcome, "deterministic": exact, "why_not": why_not},
    )


@require_role(permissions.INSPECTION_READ)
@require_GET
def candidate_steps(request: HttpRequest, candidate_id: int) -> HttpResponse:
    """New steps since `after` (htmx polling); stops polling once the candidate is finished."""
    candidate = _get_candidate_for_user(request, candidate_id)
    try:
        after = int(request.GET.get("after", "0"))
    except ValueError:
        after = 0
    if request.GET.get("attempt", str(candidate.attempts)) != str(candidate.attempts):
        # A worker was lost and another attempt replaced the steps shown: reload them all.
        refresh = HttpResponse("")
        refresh["HX-Refresh"] = "true"
        return refresh
    finished = candidate.state in (
        CandidateState.DONE,
        CandidateState.FAILED,
        CandidateState.CANCELLED,
    )
    steps = selectors.live_steps_after(candidate=candidate, after=after)
    if finished and not steps:
        # The chain of pollers ends here; the page refreshes the outcome panel on this event.
        done = HttpResponse("")
        done["HX-Trigger"] = json.dumps({"candidate-finished": candidate.pk})
        return done
    return render(
        request,
        "inspections/candidate_live.html#new-steps",
        {
            "candidate": candidate,
            "steps": _step_context(steps),
            "last_pk": steps[-1].pk if steps else after,
            "finished": finished,
        },
    )


@require_role(permissions.INSPECTION_READ)
@require_GET
def candidate_outcome(request: HttpRequest, candidate_id: int) -> HttpResponse:
    candidate = _get_candidate_for_user(request, candidate_id)
    status = selectors.candidate_status(candidate=candidate)
    context = {"candidate": candidate, **_outcome_context(request, candidate, status)}
    return render(request, "inspections/candidate_live.html#outcome", context)


def _ablation(candidate: Candidate) -> dict[str, Any] | None:
    row = ablation_selectors.candidate_ablation(candidate)
    return ablation_selectors.ablation_view(row) if row is not None else None


@require_role(permissions.TOOL_IMAGE)
@require_GET
def image_blob(request: HttpRequest, sha256: str) -> HttpResponse:
    """A stored tool image (content-addressed, immutable: cache it for a long time), for those
    who may read an object that shows it; ?candidate= or ?campaign= narrows the search."""
    from annotation.core.models import ImageBlob

    scope = {
        f"{name}_id": int(request.GET[name])
        for name in ("candidate", "campaign")
        if request.GET.get(name, "").isdigit()
    }
    if not blinding.image_readable(user=request.user, sha256=sha256, **scope):
        raise Http404("no readable trajectory shows this image")
    blob = get_object_or_404(ImageBlob, sha256=sha256)
    response = HttpResponse(bytes(blob.png), content_type="image/png")
    response["Cache-Control"] = "private, max-age=31536000, immutable"
    return response


# --- evaluations ---------------------------------------------------------------------------------


def _evaluations_page(
    request: HttpRequest, form: EvaluationForm | None, *, status: int = 200
) -> HttpResponse:
    chosen = request.GET.get("job", "")
    context = {
        "form": form,
        **evaluations.evaluation_overview(
            user=request.user, job_id=int(chosen) if chosen.isdigit() else None
        ),
    }
    return render(request, "inspections/evaluations.html", context, status=status)


@require_role(permissions.BROWSE)
@require_GET
def evaluation_list(request: HttpRequest) -> HttpResponse:
    """The policies' figures on real spectra beside SpecVI-mini, and a form to evaluate one."""
    may_start = permissions.INSPECT.allows(request.user)
    return _evaluations_page(request, EvaluationForm() if may_start else None)


@require_role(permissions.INSPECT)
@require_POST
def evaluation_start(request: HttpRequest) -> HttpResponse:
    form = EvaluationForm(request.POST)
    if form.is_valid():
        try:
            job = evaluations.evaluation_start(
                policy_spec=form.policy_spec(),
                tasks=form.cleaned_data["tasks"],
                synthetic_per_task=form.cleaned_data["synthetic_per_task"],
                vetted_per_task=form.cleaned_data.get("vetted_per_task") or 0,
                max_tool_calls=form.cleaned_data["max_tool_calls"],
                actor=request.user,  # type: ignore[arg-type]
            )
        except core_errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Evaluation job {job.pk} started.")
            return redirect("job_detail", job_id=job.pk)
    return _evaluations_page(request, form, status=400)
