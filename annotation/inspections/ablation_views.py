"""Evidence ablation pages: staff send a seeded random sample of a run to be ablated."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import _expert
from annotation.core.permissions import require_role
from annotation.inspections import ablations
from annotation.inspections.views import _get_run_for_user

DEFAULT_SAMPLE = 20
DEFAULT_SEED = 0


def _whole(raw: str | None, default: int) -> int:
    text = (raw or "").strip()
    return int(text) if text.isdigit() else default


@require_role(permissions.EVIDENCE_ABLATE)
@require_POST
def run_evidence_ablation(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _get_run_for_user(request, run_id)
    size = _whole(request.POST.get("size"), DEFAULT_SAMPLE)
    seed = _whole(request.POST.get("seed"), DEFAULT_SEED)
    try:
        job = ablations.evidence_ablation_start(
            run=run, actor=_expert(request), size=size, seed=seed
        )
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(
            request,
            f"Evidence ablation of {job.total} candidate{'s' if job.total != 1 else ''} "
            f"(seed {seed}) started as job {job.pk}.",
        )
    return redirect("run_detail", run_id=run.pk)
