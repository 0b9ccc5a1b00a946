"""Training data from the loop on one page: the three export kinds experts' decisions make.

- GRPO rows from vetted labels (annotation.spectra: LabelExport),
- SFT rows from expert-revised trajectories (annotation.curation.revised),
- DPO preference pairs from pairwise judgements and draft-versus-revision pairs
  (annotation.rating.preferences).

The page sits in the rating domain because the preference pairs read rating campaigns, and all
three kinds hide under the blinding rule, which reads rating campaigns too: the SFT and DPO
archives are DatasetExports and hide as the accepted-trajectory exports do
(annotation.blinding.dataset_exports_visible_to); the vetted-label exports hide by their
spectra and the runs their experts vetted (annotation.blinding.label_exports_visible_to).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.http import _expert
from annotation.core.permissions import require_role
from annotation.curation import revised
from annotation.curation.models import DatasetExport, ExportKind
from annotation.rating import preferences
from annotation.spectra import services as spectra_services
from annotation.spectra.labels import label_export_jsonl
from annotation.spectra.models import LabelExport, Task

LIST_LIMIT = 50


def _exports_context(request: HttpRequest) -> dict[str, Any]:
    visible = blinding.dataset_exports_visible_to(
        user=request.user, rows=DatasetExport.objects.select_related("created_by")
    ).order_by("-version")
    return {
        "exports": blinding.label_exports_visible_to(
            user=request.user, rows=LabelExport.objects.defer("rows").select_related("created_by")
        )[:LIST_LIMIT],
        "revised_exports": visible.filter(kind=ExportKind.REVISED)[:LIST_LIMIT],
        "preference_exports": visible.filter(kind=ExportKind.PREFERENCE)[:LIST_LIMIT],
        "tasks": Task.objects.values_list("code", flat=True),
        "may_export": permissions.DATASET_EXPORT.allows(request.user),
    }


@require_role(permissions.DATASETS_READ)
@require_GET
def label_export_list(request: HttpRequest) -> HttpResponse:
    """The three kinds of training data from the loop and, for who may export, their buttons."""
    return render(request, "spectra/label_exports.html", _exports_context(request))


def _created(request: HttpRequest, export: DatasetExport, latest: DatasetExport | None) -> None:
    if latest is not None and latest.pk == export.pk:
        messages.info(request, f"Nothing changed since v{export.version}; no new version.")
    else:
        rows = export.manifest.get("rows", 0)
        messages.success(
            request, f"{ExportKind(export.kind).label} v{export.version}: {rows} rows."
        )


def _latest(kind: str) -> DatasetExport | None:
    return DatasetExport.objects.filter(kind=kind).order_by("-version").first()


def _refused(request: HttpRequest, error: core_errors.WorkflowError) -> HttpResponse:
    context = {**_exports_context(request), "error": str(error)}
    status = core_errors.http_status(error)
    return render(request, "spectra/label_exports.html", context, status=status)


def _dataset_export_made(
    request: HttpRequest,
    kind: ExportKind,
    make: Callable[[blinding.Blinding, str], DatasetExport],
) -> HttpResponse:
    """Make an SFT-revision or DPO-pair export for the posted task, hiding what the blinding
    rule hides from the user; a refusal re-renders the page with its reason and status."""
    latest = _latest(kind)
    try:
        export = make(blinding.blinding_for(request.user), request.POST.get("task", "").strip())
    except core_errors.WorkflowError as error:
        return _refused(request, error)
    _created(request, export, latest)
    return redirect("label_export_list")


@require_role(permissions.DATASET_EXPORT)
@require_POST
def revised_export_create(request: HttpRequest) -> HttpResponse:
    return _dataset_export_made(
        request,
        ExportKind.REVISED,
        lambda hidden, task: revised.revised_export_create(
            actor=_expert(request),
            task=task,
            hidden_curations=hidden.curation_ids,
            hidden_hashes=hidden.content_hashes,
        ),
    )


@require_role(permissions.DATASET_EXPORT)
@require_POST
def preference_export_create(request: HttpRequest) -> HttpResponse:
    return _dataset_export_made(
        request,
        ExportKind.PREFERENCE,
        lambda hidden, task: preferences.preference_export_create(
            actor=_expert(request),
            task=task,
            hidden_curations=hidden.curation_ids,
            hidden_runs=hidden.run_ids,
            hidden_hashes=hidden.content_hashes,
        ),
    )


@require_role(permissions.DATASET_EXPORT)
@require_POST
def label_export_create(request: HttpRequest) -> HttpResponse:
    hidden = blinding.blinding_for(request.user)
    codes = [code for code in request.POST.getlist("tasks") if code]
    try:
        export = spectra_services.label_export_create(
            actor=_expert(request),
            task_codes=codes,
            hidden_runs=hidden.run_ids,
            hidden_hashes=hidden.content_hashes,
        )
    except core_errors.NotAllowed as error:
        return _refused(request, error)
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Vetted labels v{export.version}: {len(export.rows)} rows.")
    return redirect("label_export_list")


@require_role(permissions.DATASETS_READ)
@require_GET
def label_export_download(request: HttpRequest, version: int) -> HttpResponse:
    """One export as JSON lines, a row per label, the manifest first (404 to a rater of an open
    campaign it shows, like a missing one)."""
    visible = blinding.label_exports_visible_to(user=request.user)
    export = get_object_or_404(visible, version=version)
    response = HttpResponse(
        label_export_jsonl(manifest=export.manifest, rows=export.rows),
        content_type="application/x-ndjson",
    )
    response["Content-Disposition"] = (
        f'attachment; filename="specvet-vetted-v{export.version}.jsonl"'
    )
    return response
