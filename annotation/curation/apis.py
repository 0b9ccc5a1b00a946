"""Curation APIs, the pages' twins. Refusals answer through core.errors like the pages."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from agent.editing import EditedAnswer, EditedStep, EditError, apply_edit
from annotation import blinding
from annotation.core import permissions
from annotation.core import services as core_services
from annotation.core.apis import ERROR, WorkflowApi
from annotation.core.http import _expert
from annotation.core.models import AuditLog, ImageBlob
from annotation.core.serializers import (
    BAD_REQUEST,
    CONFLICT,
    ErrorOutputSerializer,
    JobOutputSerializer,
    _paginated,
    _username,
)
from annotation.curation import datasets, selectors, services
from annotation.curation.forms import (
    EditorState,
    ImportFileError,
    StepDraft,
    draft_params,
    read_import_upload,
    teacher_choices,
)
from annotation.curation.models import (
    AuditVerdict,
    Curation,
    CurationState,
    ExportKind,
    TrajectoryVersion,
    VoteValue,
)
from annotation.curation.permissions import actions_for, roles_of, standardize_run_check
from annotation.curation.selectors import (
    LIST_DEFER,
    accepted_counts,
    history_visible_to,
    image_is_readable,
)
from annotation.curation.serializers import (
    AuditOutputSerializer,
    CurationOutputSerializer,
    ExportOutputSerializer,
    VersionOutputSerializer,
    VoteOutputSerializer,
)
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Label, Task


class CurationApi(WorkflowApi):
    """A curation API: an edit or import file the parser refuses is the client's error (400)."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, EditError | ImportFileError):
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return super().handle_exception(exc)


def _get_curation_for_user(request: Request, curation_id: int) -> Curation:
    """The curation, if this user may read it (selectors.Blinding), else 404; writes are the
    services' call."""
    curations = blinding.curations_visible_to(user=request.user)
    return get_object_or_404(
        curations.select_related("task", "spectrum", "reviser", "auditor_1", "auditor_2"),
        pk=curation_id,
    )


# --- reads -----------------------------------------------------------------------------------


class MyWorkApi(CurationApi):
    """What waits for me, by stage: a count and the first ids of each queue."""

    role_rule = permissions.CURATE

    IDS_PER_QUEUE = 100

    class QueueOutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        ids = serializers.ListField(child=serializers.IntegerField(), help_text="first 100")

    @extend_schema(
        responses=inline_serializer(
            "MyWorkOutput", {"queues": serializers.DictField(child=QueueOutputSerializer())}
        )
    )
    def get(self, request: Request) -> Response:
        queues = selectors.curation_queues(user=request.user)
        return Response(
            {
                "queues": {
                    key: {
                        "count": rows.count(),
                        "ids": list(rows.order_by("id").values_list("id", flat=True))[
                            : self.IDS_PER_QUEUE
                        ],
                    }
                    for key, rows in queues.items()
                }
            }
        )


class CurationListApi(CurationApi):
    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.CURATION_READ

    class FilterSerializer(serializers.Serializer):
        state = serializers.ChoiceField(choices=["", *CurationState.values], required=False)
        task = serializers.CharField(required=False, allow_blank=True)

    @extend_schema(parameters=[FilterSerializer], responses=CurationOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        rows = selectors.curation_list(**filters.validated_data).defer(*LIST_DEFER)
        rows = blinding.curations_visible_to(user=request.user, rows=rows)
        return _paginated(request, self, rows, CurationOutputSerializer)


class DiscardOutputSerializer(serializers.ModelSerializer):
    by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        source="actor", slug_field="username", read_only=True
    )
    reason = serializers.CharField(source="comment")
    at = serializers.DateTimeField(source="created_at")

    class Meta:
        model = AuditLog
        fields = ["by", "reason", "at"]


class CurationDetailApi(CurationApi):
    role_rule = permissions.CURATION_READ

    class OutputSerializer(CurationOutputSerializer):
        your_roles = serializers.ListField(child=serializers.CharField())
        actions = serializers.DictField(child=serializers.BooleanField())
        head = VersionOutputSerializer()
        audits = AuditOutputSerializer(many=True, help_text="only those blinding lets you see")
        votes = VoteOutputSerializer(many=True, help_text="only your own until all have voted")
        discard = DiscardOutputSerializer(
            allow_null=True, help_text="who discarded it and why; null unless discarded"
        )

        class Meta(CurationOutputSerializer.Meta):
            fields = [
                *CurationOutputSerializer.Meta.fields,
                "your_roles",
                "actions",
                "head",
                "audits",
                "votes",
                "discard",
            ]

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        data = dict(CurationOutputSerializer(curation).data)
        data["your_roles"] = roles_of(curation, _expert(request))
        data["actions"] = actions_for(curation, _expert(request))
        data["head"] = VersionOutputSerializer(selectors.head_version(curation)).data
        data["audits"] = AuditOutputSerializer(
            selectors.audits_visible_to(curation=curation, user=request.user), many=True
        ).data
        data["votes"] = VoteOutputSerializer(
            selectors.votes_visible_to(curation=curation, user=request.user), many=True
        ).data
        discard = selectors.discard_entry(curation)
        data["discard"] = DiscardOutputSerializer(discard).data if discard else None
        return Response(data)


class CurationVersionDetailApi(CurationApi):
    role_rule = permissions.CURATION_READ

    @extend_schema(responses=VersionOutputSerializer)
    def get(self, request: Request, curation_id: int, number: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        version = get_object_or_404(curation.versions.select_related("author"), number=number)
        return Response(VersionOutputSerializer(version).data)


class CurationHistoryApi(CurationApi):
    """The audit log (paginated, blinded like the page) and the version chain."""

    role_rule = permissions.CURATION_READ

    class EntryOutputSerializer(serializers.ModelSerializer):
        actor = _username()

        class Meta:
            model = AuditLog
            fields = ["id", "actor", "action", "from_state", "to_state", "comment", "created_at"]

    class VersionSummarySerializer(serializers.ModelSerializer):
        author = _username()

        class Meta:
            model = TrajectoryVersion
            fields = ["number", "kind", "author", "comment", "created_at"]

    @extend_schema(
        parameters=[OpenApiParameter("page", int, description="1-based page of the log")],
        # A page of the log (count, next, previous, results) and the whole version chain.
        responses=inline_serializer(
            "CurationHistoryPage",
            {
                "count": serializers.IntegerField(),
                "next": serializers.URLField(allow_null=True),
                "previous": serializers.URLField(allow_null=True),
                "results": EntryOutputSerializer(many=True),
                "versions": VersionSummarySerializer(many=True),
            },
        ),
    )
    def get(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        rows = history_visible_to(curation=curation, user=_expert(request))
        response = _paginated(request, self, rows, self.EntryOutputSerializer)
        versions = curation.versions.select_related("author").order_by("number")
        response.data["versions"] = self.VersionSummarySerializer(versions, many=True).data
        return response


class CurationImageApi(CurationApi):
    """A tool PNG of a stored trajectory (the png_sha256 references of the trajectory dicts)."""

    role_rule = permissions.CURATION_READ

    @extend_schema(responses={(200, "image/png"): OpenApiResponse(description="PNG bytes")})
    def get(self, request: Request, sha256: str) -> HttpResponse:
        raw = request.query_params.get("curation", "")
        curation_id = int(raw) if raw.isdigit() else None
        if not image_is_readable(sha256=sha256, user=_expert(request), curation_id=curation_id):
            raise Http404("no readable trajectory holds this image")
        blob = get_object_or_404(ImageBlob, sha256=sha256)
        return HttpResponse(bytes(blob.png), content_type="image/png")


# --- curation actions ----------------------------------------------------------------------------


def _curation_response(curation: Curation, code: int = status.HTTP_200_OK) -> Response:
    curation.refresh_from_db()
    return Response(CurationOutputSerializer(curation).data, status=code)


class CurationScreenApi(CurationApi):
    role_rule = permissions.CURATE

    class InputSerializer(serializers.Serializer):
        keep = serializers.BooleanField()
        reason = serializers.CharField(
            max_length=2000, required=False, default="", allow_blank=True
        )

    @extend_schema(
        request=InputSerializer,
        responses={200: CurationOutputSerializer, 400: BAD_REQUEST, 403: ERROR, 409: CONFLICT},
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        services.curation_screen(curation=curation, user=_expert(request), **params.validated_data)
        return _curation_response(curation)


class CurationClaimRevisionApi(CurationApi):
    role_rule = permissions.CURATE

    @extend_schema(
        request=None, responses={200: CurationOutputSerializer, 403: ERROR, 409: CONFLICT}
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        services.curation_claim_revision(curation=curation, user=_expert(request))
        return _curation_response(curation)


class EditedStepInput(serializers.Serializer):
    think = serializers.CharField(allow_blank=True, trim_whitespace=False)
    wavelength_range = serializers.ListField(
        child=serializers.FloatField(), min_length=2, max_length=2
    )
    # Serializer fields are popped into _declared_fields by the metaclass; the stubs
    # see a class attribute overriding Field.label (str) instead.
    label = serializers.CharField(allow_blank=True, required=False, default="")  # type: ignore[assignment]


class EditedAnswerInput(serializers.Serializer):
    think = serializers.CharField(allow_blank=True, trim_whitespace=False)
    prediction = serializers.CharField(help_text="YES or NO")
    justification = serializers.CharField(allow_blank=True, trim_whitespace=False)


class RevisionInput(serializers.Serializer):
    base_number = serializers.IntegerField(min_value=1)
    steps = EditedStepInput(many=True)
    answer = EditedAnswerInput()
    comment = serializers.CharField(allow_blank=True, required=False, default="")


class CurationRevisionSaveApi(CurationApi):
    """Save an edit (structured steps and answer) as a new version; images are re-rendered."""

    role_rule = permissions.CURATE

    InputSerializer = RevisionInput

    @extend_schema(
        request=InputSerializer,
        responses={201: VersionOutputSerializer, 400: BAD_REQUEST, 403: ERROR, 409: CONFLICT},
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        base = curation.versions.filter(number=data["base_number"]).first()
        if base is None:  # a version that names nothing: 404, like an id in the path
            raise NotFound(
                f"base_number: version {data['base_number']} of this trajectory does not exist"
            )
        trajectory = apply_edit(
            selectors.version_trajectory(base),
            tool=spectra_selectors.spectrum_tool(curation.spectrum),
            steps=[
                EditedStep(step["think"], tuple(step["wavelength_range"]), step["label"])
                for step in data["steps"]
            ],
            answer=EditedAnswer(**data["answer"]),
        )
        version = services.curation_save_revision(
            curation=curation,
            user=_expert(request),
            base_number=data["base_number"],
            trajectory=trajectory,
            comment=data["comment"],
        )
        return Response(VersionOutputSerializer(version).data, status=status.HTTP_201_CREATED)


class CurationAutosaveApi(CurationApi):
    """Keep an unsaved edit (same body as a save); the revision page restores it."""

    role_rule = permissions.CURATE

    InputSerializer = RevisionInput

    @extend_schema(
        request=InputSerializer,
        responses={
            200: inline_serializer(
                "AutosaveOutput",
                {
                    "base_number": serializers.IntegerField(),
                    "updated_at": serializers.DateTimeField(),
                },
            ),
            403: ERROR,
        },
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        state = EditorState(
            steps=[
                StepDraft(
                    think=step["think"],
                    lo=f"{step['wavelength_range'][0]:g}",
                    hi=f"{step['wavelength_range'][1]:g}",
                    label=step["label"],
                )
                for step in data["steps"]
            ],
            final_think=data["answer"]["think"],
            prediction=data["answer"]["prediction"],
            justification=data["answer"]["justification"],
            comment=data["comment"],
        )
        draft = services.curation_autosave(
            curation=curation,
            user=_expert(request),
            base_number=data["base_number"],
            data=state.to_data(),
        )
        return Response({"base_number": draft.base_number, "updated_at": draft.updated_at})


class CurationSubmitForAuditApi(CurationApi):
    role_rule = permissions.CURATE

    class InputSerializer(serializers.Serializer):
        base_number = serializers.IntegerField(min_value=1)

    @extend_schema(
        request=InputSerializer,
        responses={200: CurationOutputSerializer, 403: ERROR, 409: CONFLICT},
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        services.curation_submit_for_audit(
            curation=curation,
            user=_expert(request),
            base_number=params.validated_data["base_number"],
        )
        return _curation_response(curation)


class CurationClaimAuditApi(CurationApi):
    role_rule = permissions.CURATE

    @extend_schema(
        request=None, responses={200: CurationOutputSerializer, 403: ERROR, 409: CONFLICT}
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        services.curation_claim_audit(curation=curation, user=_expert(request))
        return _curation_response(curation)


class AuditSubmitApi(CurationApi):
    role_rule = permissions.CURATE

    class InputSerializer(serializers.Serializer):
        version_number = serializers.IntegerField(min_value=1)
        verdict = serializers.ChoiceField(choices=AuditVerdict.values)
        comment = serializers.CharField(allow_blank=True, required=False, default="")
        step_comments = serializers.DictField(
            child=serializers.CharField(allow_blank=True),
            required=False,
            default=dict,
            help_text="comments keyed by the step index (0-based) in the audited version",
        )

    @extend_schema(
        request=InputSerializer,
        responses={201: AuditOutputSerializer, 400: BAD_REQUEST, 403: ERROR, 409: CONFLICT},
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        audit = services.audit_submit(
            curation=curation, user=_expert(request), **params.validated_data
        )
        return Response(AuditOutputSerializer(audit).data, status=status.HTTP_201_CREATED)


class VoteCastApi(CurationApi):
    role_rule = permissions.CURATE

    class InputSerializer(serializers.Serializer):
        value = serializers.ChoiceField(choices=VoteValue.values)
        comment = serializers.CharField(allow_blank=True, required=False, default="")

    @extend_schema(
        request=InputSerializer,
        responses={201: VoteOutputSerializer, 400: BAD_REQUEST, 403: ERROR, 409: CONFLICT},
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        cast = services.vote_cast(curation=curation, user=_expert(request), **params.validated_data)
        return Response(VoteOutputSerializer(cast).data, status=status.HTTP_201_CREATED)


class CurationReassignApi(CurationApi):
    role_rule = permissions.CURATION_MANAGE

    class InputSerializer(serializers.Serializer):
        role = serializers.ChoiceField(choices=services.ROLES)
        username = serializers.CharField(allow_null=True, help_text="null frees the role")

    @extend_schema(
        request=InputSerializer,
        responses={200: CurationOutputSerializer, 400: BAD_REQUEST, 403: ERROR},
    )
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        username = params.validated_data["username"]
        user = None
        if username is not None:
            user = get_user_model().objects.filter(username=username, is_active=True).first()
            if user is None:  # a name that names no one: 404, like an id in the path
                raise NotFound(f"username: no active expert is called {username!r}")
        services.curation_reassign(
            curation=curation, role=params.validated_data["role"], user=user, actor=_expert(request)
        )
        return _curation_response(curation)


class CurationStandardizeApi(CurationApi):
    """Staff (re)run the standardization of an approved trajectory as a job."""

    role_rule = permissions.CURATION_MANAGE

    @extend_schema(request=None, responses={202: JobOutputSerializer, 403: ERROR, 409: CONFLICT})
    def post(self, request: Request, curation_id: int) -> Response:
        curation = _get_curation_for_user(request, curation_id)
        standardize_run_check(curation, _expert(request))
        job = core_services.job_create(
            kind="standardize",
            params={"curation_ids": [curation.pk]},
            created_by=_expert(request),
            total=1,
        )
        return Response(JobOutputSerializer(job).data, status=status.HTTP_202_ACCEPTED)


# --- drafts and imports ------------------------------------------------------------------------


class DraftJobCreateApi(CurationApi):
    """Draft trajectories for the first N labelled spectra matching the filters."""

    role_rule = permissions.DRAFT

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        dataset = serializers.CharField(required=False, allow_blank=True, default="")
        split = serializers.CharField(required=False, allow_blank=True, default="")
        # Serializer fields are popped into _declared_fields by the metaclass; the stubs
        # see a class attribute overriding Field.label (str) instead.
        label = serializers.ChoiceField(choices=["", *Label.values], required=False, default="")  # type: ignore[assignment]
        skip_curated = serializers.BooleanField(required=False, default=True)
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=20)
        teacher = serializers.CharField(
            max_length=60,
            default="rule-based",
            help_text="rule-based, or the name of an enabled model endpoint (GET /api/endpoints/)",
        )
        max_tool_calls = serializers.IntegerField(min_value=1, max_value=16, default=8)

        def validate_teacher(self, teacher: str) -> str:
            # Read when a request is checked, not when the schema is built (no database then).
            names = [key for key, _ in teacher_choices()]
            if teacher not in names:
                # Names no teacher (a URL names none either): does_not_exist, a 404 when
                # nothing else is wrong (webapp.api_errors).
                raise serializers.ValidationError(
                    f"teacher {teacher!r} is not one of: {', '.join(names)} (a URL is not accepted)",
                    code="does_not_exist",
                )
            return teacher

    @extend_schema(request=InputSerializer, responses={201: JobOutputSerializer, 400: BAD_REQUEST})
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        job_params, total = draft_params(params.validated_data)
        job = core_services.job_create(
            kind="draft", params=job_params, created_by=_expert(request), total=total
        )
        return Response(JobOutputSerializer(job).data, status=status.HTTP_201_CREATED)


class CurationImportApi(CurationApi):
    """Import a project JSONL or a ShareGPT ZIP; a bad file stores nothing."""

    role_rule = permissions.DRAFT

    parser_classes = [MultiPartParser]

    class InputSerializer(serializers.Serializer):
        file = serializers.FileField()
        task = serializers.SlugRelatedField(
            slug_field="code", queryset=Task.objects.all(), required=False, allow_null=True
        )

    class OutputSerializer(serializers.Serializer):
        created = serializers.IntegerField()
        created_ids = serializers.ListField(child=serializers.IntegerField())
        skipped = serializers.ListField(child=serializers.CharField())

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer, 400: BAD_REQUEST})
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        task = params.validated_data.get("task")
        parsed = read_import_upload(params.validated_data["file"], task=task.code if task else None)
        result = datasets.curation_import(
            trajectories=parsed.trajectories, created_by=_expert(request), source=parsed.source
        )
        body = {
            "created": len(result.created),
            "created_ids": [curation.pk for curation in result.created],
            "skipped": result.skipped,
        }
        return Response(body, status=status.HTTP_201_CREATED)


# --- datasets ----------------------------------------------------------------------------------


class DatasetListApi(CurationApi):
    """Accepted trajectories per task and label, and the exports (paginated)."""

    role_rule = permissions.DATASETS_READ

    @extend_schema(
        parameters=[OpenApiParameter("page", int, description="1-based page of exports")],
        responses=inline_serializer(
            "DatasetListPage",
            {
                "accepted": inline_serializer(
                    "AcceptedCounts",
                    {
                        "task": serializers.CharField(),
                        "YES": serializers.IntegerField(),
                        "NO": serializers.IntegerField(),
                        "total": serializers.IntegerField(),
                    },
                    many=True,
                ),
                "count": serializers.IntegerField(),
                "next": serializers.URLField(allow_null=True),
                "previous": serializers.URLField(allow_null=True),
                "results": ExportOutputSerializer(many=True),
            },
        ),
    )
    def get(self, request: Request) -> Response:
        response = _paginated(
            request,
            self,
            selectors.dataset_exports(user=request.user, kind=ExportKind.ACCEPTED),
            ExportOutputSerializer,
        )
        response.data["accepted"] = accepted_counts(user=request.user)
        return response


class DatasetExportCreateApi(CurationApi):
    """Export accepted trajectories as the next version; same content gives the same version."""

    role_rule = permissions.DATASET_EXPORT

    class InputSerializer(serializers.Serializer):
        task = serializers.CharField(required=False, allow_blank=True, default="")

    class OutputSerializer(ExportOutputSerializer):
        new = serializers.BooleanField(help_text="false: nothing changed, this is the latest")

        class Meta(ExportOutputSerializer.Meta):
            fields = [*ExportOutputSerializer.Meta.fields, "new"]

    @extend_schema(
        request=InputSerializer,
        responses={
            201: OutputSerializer,
            200: OpenApiResponse(OutputSerializer, description="unchanged: the latest"),
            400: BAD_REQUEST,
        },
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        latest = selectors.dataset_exports(user=request.user, kind=ExportKind.ACCEPTED).first()
        export = datasets.dataset_export_create(
            actor=_expert(request),
            task=params.validated_data["task"],
            withheld_from_actor=blinding.blinding_for(request.user).curation_ids,
        )
        new = latest is None or export.pk != latest.pk
        body = {**ExportOutputSerializer(export).data, "new": new}
        return Response(body, status=status.HTTP_201_CREATED if new else status.HTTP_200_OK)


class DatasetDownloadApi(CurationApi):
    role_rule = permissions.DATASETS_READ

    @extend_schema(
        responses={
            (200, "application/zip"): OpenApiResponse(description="the zip"),
            404: OpenApiResponse(
                ErrorOutputSerializer,
                description="No such export you may read, or its archive is missing from storage "
                "(the reason says which).",
            ),
        }
    )
    def get(self, request: Request, export_id: int) -> FileResponse:
        export = get_object_or_404(
            selectors.dataset_exports(user=request.user, kind=ExportKind.ACCEPTED), pk=export_id
        )
        return FileResponse(
            selectors.dataset_export_archive(export),
            as_attachment=True,
            filename=f"specvet-sft-v{export.version}.zip",
            content_type="application/zip",
        )
