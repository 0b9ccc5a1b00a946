"""Training data from the loop through the API: the twins of the page /labels/exports/
(annotation.rating.views_exports), for the three export kinds experts' decisions make.

- vetted labels, the GRPO rows (annotation.spectra: LabelExport), by version;
- SFT rows of expert-revised trajectories (annotation.curation.revised), by version;
- DPO preference pairs (annotation.rating.preferences), by version.

Each kind is listed, made (the next version, or the latest when nothing changed: 200 with
``new`` false) and downloaded. The same services make them and the same blinding rule hides them
as on the page: a rater of an open campaign neither lists, downloads nor makes an export that
shows its items' spectra, their curations or their runs (a hidden one answers 404, like a
missing one; making one answers 403 with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django.http import FileResponse, HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response

from annotation import blinding
from annotation.core import permissions
from annotation.core.apis import WorkflowApi
from annotation.core.http import _expert
from annotation.core.serializers import CONFLICT, FORBIDDEN, NOT_FOUND, _paginated
from annotation.curation import revised
from annotation.curation import selectors as curation_selectors
from annotation.curation.models import DatasetExport, ExportKind
from annotation.curation.serializers import ExportOutputSerializer
from annotation.rating import preferences
from annotation.spectra import services as spectra_services
from annotation.spectra.labels import label_export_jsonl
from annotation.spectra.models import LabelExport

PAGE = [OpenApiParameter("page", int, description="1-based page, newest version first")]
NEW_HELP = "false: nothing changed since the latest version, which this is"


class LabelExportOutputSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(
        source="created_by.get_username", allow_null=True, default=None
    )

    class Meta:
        model = LabelExport
        fields = ["id", "version", "content_hash", "manifest", "created_by", "created_at"]


class LabelExportCreatedOutputSerializer(LabelExportOutputSerializer):
    new = serializers.BooleanField(help_text=NEW_HELP)

    class Meta(LabelExportOutputSerializer.Meta):
        fields = [*LabelExportOutputSerializer.Meta.fields, "new"]


class LoopExportOutputSerializer(ExportOutputSerializer):
    kind = serializers.CharField(help_text="revised (SFT rows) or preference (DPO pairs)")

    class Meta(ExportOutputSerializer.Meta):
        fields = [*ExportOutputSerializer.Meta.fields, "kind"]


class LoopExportCreatedOutputSerializer(LoopExportOutputSerializer):
    new = serializers.BooleanField(help_text=NEW_HELP)

    class Meta(LoopExportOutputSerializer.Meta):
        fields = [*LoopExportOutputSerializer.Meta.fields, "new"]


class TaskFilterInputSerializer(serializers.Serializer):
    task = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="a task code; blank: every task"
    )


def _label_exports(request: Request) -> QuerySet[LabelExport]:
    rows = LabelExport.objects.defer("rows").select_related("created_by").order_by("-version")
    return blinding.label_exports_visible_to(user=request.user, rows=rows)


# --- vetted labels (GRPO rows) -----------------------------------------------------------------


class LabelExportListApi(WorkflowApi):
    """The vetted-label exports you may read, newest version first (each without its rows)."""

    pagination_class = PageNumberPagination  # answers a page: the schema says so too
    role_rule = permissions.DATASETS_READ

    @extend_schema(
        operation_id="label_exports_list",
        parameters=PAGE,
        responses=LabelExportOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return _paginated(request, self, _label_exports(request), LabelExportOutputSerializer)


class LabelExportCreateApi(WorkflowApi):
    role_rule = permissions.DATASET_EXPORT

    class InputSerializer(serializers.Serializer):
        tasks = serializers.ListField(
            child=serializers.CharField(max_length=16),
            required=False,
            default=list,
            help_text="task codes to export; empty: every task",
        )

    @extend_schema(
        operation_id="label_export_create",
        request=InputSerializer,
        responses={
            201: LabelExportCreatedOutputSerializer,
            200: OpenApiResponse(
                LabelExportCreatedOutputSerializer, description="unchanged: the latest"
            ),
            403: FORBIDDEN,
            409: CONFLICT,  # no vetted label to export yet
        },
        description="Export the vetted labels as the next version (a row per label, naming the "
        "expert decisions it rests on), or answer the latest when nothing changed.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        hidden = blinding.blinding_for(request.user)
        latest = LabelExport.objects.order_by("-version").values_list("pk", flat=True).first()
        export = spectra_services.label_export_create(
            actor=_expert(request),
            task_codes=[code for code in params.validated_data["tasks"] if code],
            hidden_runs=hidden.run_ids,
            hidden_hashes=hidden.content_hashes,
        )
        new = export.pk != latest
        body = {**LabelExportOutputSerializer(export).data, "new": new}
        return Response(body, status=status.HTTP_201_CREATED if new else status.HTTP_200_OK)


class LabelExportDownloadApi(WorkflowApi):
    """One vetted-label export as JSON lines (the page's download): the manifest first, then a
    row per label naming the decisions it rests on."""

    role_rule = permissions.DATASETS_READ

    @extend_schema(
        operation_id="label_export_download",
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                description="JSON lines: the manifest first, then a row per label"
            )
        },
    )
    def get(self, request: Request, version: int) -> HttpResponse:
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


# --- SFT rows of expert revisions and DPO pairs ------------------------------------------------


def _listed(view: WorkflowApi, request: Request, kind: ExportKind) -> Response:
    rows = curation_selectors.dataset_exports(user=request.user, kind=kind)
    return _paginated(request, view, rows, LoopExportOutputSerializer)


def _created(
    request: Request,
    kind: ExportKind,
    make: Callable[[blinding.Blinding, str], DatasetExport],
) -> Response:
    params = TaskFilterInputSerializer(data=request.data)
    params.is_valid(raise_exception=True)
    latest = (
        DatasetExport.objects.filter(kind=kind)
        .order_by("-version")
        .values_list("pk", flat=True)
        .first()
    )
    export = make(blinding.blinding_for(request.user), params.validated_data["task"].strip())
    new = export.pk != latest
    body = {**LoopExportOutputSerializer(export).data, "new": new}
    return Response(body, status=status.HTTP_201_CREATED if new else status.HTTP_200_OK)


def _download(request: Request, kind: ExportKind, version: int) -> FileResponse:
    export = get_object_or_404(
        curation_selectors.dataset_exports(user=request.user, kind=kind), version=version
    )
    try:
        archive = export.archive.open("rb")
    except FileNotFoundError:
        raise NotFound(
            f"the archive of {ExportKind(kind).label} v{version} is missing from the storage; "
            "make the export again"
        ) from None
    return FileResponse(
        archive,
        as_attachment=True,
        filename=f"specvet-{kind}-v{export.version}.zip",
        content_type="application/zip",
    )


def _create_schema(operation_id: str, what: str) -> Callable[[Any], Any]:
    return extend_schema(
        operation_id=operation_id,
        request=TaskFilterInputSerializer,
        responses={
            201: LoopExportCreatedOutputSerializer,
            200: OpenApiResponse(
                LoopExportCreatedOutputSerializer, description="unchanged: the latest"
            ),
            403: FORBIDDEN,
            409: CONFLICT,  # nothing to export yet
        },
        description=f"Export {what} as the next version, or answer the latest when nothing "
        "changed.",
    )


ZIP = {(200, "application/zip"): OpenApiResponse(description="the zip archive"), 404: NOT_FOUND}


class RevisedExportListApi(WorkflowApi):
    """The SFT exports of expert-revised trajectories you may read, newest version first."""

    pagination_class = PageNumberPagination
    role_rule = permissions.DATASETS_READ

    @extend_schema(
        operation_id="revised_exports_list",
        parameters=PAGE,
        responses=LoopExportOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return _listed(self, request, ExportKind.REVISED)


class RevisedExportCreateApi(WorkflowApi):
    role_rule = permissions.DATASET_EXPORT

    @_create_schema(
        "revised_export_create",
        "the expert-revised trajectories that passed audit (SFT rows, TRL and ShareGPT)",
    )
    def post(self, request: Request) -> Response:
        return _created(
            request,
            ExportKind.REVISED,
            lambda hidden, task: revised.revised_export_create(
                actor=_expert(request),
                task=task,
                hidden_curations=hidden.curation_ids,
                hidden_hashes=hidden.content_hashes,
            ),
        )


class RevisedExportDownloadApi(WorkflowApi):
    """One expert-revised SFT export's zip: TRL ``trl.jsonl``, ShareGPT ``sharegpt.json``, the
    PNGs and the manifest."""

    role_rule = permissions.DATASETS_READ

    @extend_schema(operation_id="revised_export_download", responses=ZIP)
    def get(self, request: Request, version: int) -> FileResponse:
        return _download(request, ExportKind.REVISED, version)


class PreferenceExportListApi(WorkflowApi):
    """The DPO preference-pair exports you may read, newest version first."""

    pagination_class = PageNumberPagination
    role_rule = permissions.DATASETS_READ

    @extend_schema(
        operation_id="preference_exports_list",
        parameters=PAGE,
        responses=LoopExportOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        return _listed(self, request, ExportKind.PREFERENCE)


class PreferenceExportCreateApi(WorkflowApi):
    role_rule = permissions.DATASET_EXPORT

    @_create_schema(
        "preference_export_create",
        "the preference pairs (closed campaigns' pairwise judgements, drafts against their "
        "revisions) in TRL's vision DPO format",
    )
    def post(self, request: Request) -> Response:
        return _created(
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


class PreferenceExportDownloadApi(WorkflowApi):
    """One DPO preference-pair export's zip: TRL ``dpo.jsonl``, the PNGs and the manifest."""

    role_rule = permissions.DATASETS_READ

    @extend_schema(operation_id="preference_export_download", responses=ZIP)
    def get(self, request: Request, version: int) -> FileResponse:
        return _download(request, ExportKind.PREFERENCE, version)
