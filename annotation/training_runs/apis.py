"""Training runs through the API: list, start, follow (detail and metrics), cancel; policies."""

from __future__ import annotations

from typing import Any, cast

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.blinding import dataset_exports_visible_to, label_exports_visible_to
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.http import _expert
from annotation.core.permissions import job_cancel_allowed
from annotation.core.serializers import _paginated
from annotation.curation.models import DatasetExport, ExportKind
from annotation.spectra.models import LabelExport
from annotation.training_runs import selectors, services
from annotation.training_runs.models import (
    PolicyCheckpoint,
    TrainingMetric,
    TrainingRun,
    TrainingStage,
)


class CheckpointOutputSerializer(serializers.ModelSerializer):
    policy_spec = serializers.SerializerMethodField()

    class Meta:
        model = PolicyCheckpoint
        fields = [
            "id",
            "name",
            "stage",
            "path",
            "dataset_version",
            "base_model",
            "run",
            "lineage",
            "policy_spec",
            "created_at",
        ]

    def get_policy_spec(self, checkpoint: PolicyCheckpoint) -> dict[str, Any]:
        return checkpoint.policy_spec()


class TrainingRunOutputSerializer(serializers.ModelSerializer):
    state = serializers.CharField(source="job.state")
    step = serializers.IntegerField(source="job.done")
    total = serializers.IntegerField(source="job.total")
    error = serializers.CharField(source="job.error")
    dataset_export: serializers.SlugRelatedField[DatasetExport] = serializers.SlugRelatedField(
        slug_field="version", read_only=True
    )
    dataset_export_kind = serializers.CharField(
        source="dataset_export.kind",
        allow_null=True,
        default=None,
        help_text="accepted, revised or preference: the kind dataset_export's version is of",
    )
    checkpoint = serializers.SerializerMethodField()

    class Meta:
        model = TrainingRun
        fields = [
            "id",
            "name",
            "stage",
            "preset",
            "overrides",
            "base_model",
            "base_checkpoint",
            "dataset_export",
            "dataset_export_kind",
            "label_source",
            "output_dir",
            "job",
            "state",
            "step",
            "total",
            "error",
            "checkpoint",
            "created_at",
        ]

    def get_checkpoint(self, run: TrainingRun) -> dict[str, Any] | None:
        checkpoint = PolicyCheckpoint.objects.filter(run=run).first()
        return None if checkpoint is None else {"id": checkpoint.pk, "name": checkpoint.name}


class MetricOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = TrainingMetric
        fields = ["id", "step", "name", "value", "epoch"]


class TrainingRunListApi(APIView):
    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.TRAINING_READ

    @extend_schema(responses=TrainingRunOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return _paginated(request, self, selectors.training_runs(), TrainingRunOutputSerializer)


class LabelSourceSerializer(serializers.Serializer):
    dataset = serializers.CharField(max_length=80, help_text="data set of the labelled spectra")
    split = serializers.CharField(max_length=16, required=False, allow_blank=True)
    tasks = serializers.ListField(child=serializers.CharField(max_length=16), min_length=1)
    limit = serializers.IntegerField(
        min_value=1, max_value=services.LABEL_SOURCE_MAX, default=services.LABEL_SOURCE_MAX
    )


# The export fields of a training run's input, each of one kind (a version names an export of
# its kind); the page's form offers the same three, and a run trains on one.
EXPORT_FIELDS = {
    "dataset_export": ExportKind.ACCEPTED,
    "revised_export": ExportKind.REVISED,
    "preference_export": ExportKind.PREFERENCE,
}


class TrainingRunCreateApi(APIView):
    role_rule = permissions.TRAIN

    class InputSerializer(serializers.Serializer):
        stage = serializers.ChoiceField(choices=TrainingStage.choices)
        preset = serializers.ChoiceField(choices=sorted(selectors.TRAINING_PRESETS))
        name = serializers.CharField(max_length=120, required=False, allow_blank=True)
        base_model = serializers.CharField(max_length=500, required=False, allow_blank=True)
        base_checkpoint = serializers.PrimaryKeyRelatedField(
            queryset=PolicyCheckpoint.objects.all(), required=False, allow_null=True
        )
        dataset_export = serializers.SlugRelatedField(
            slug_field="version",
            queryset=DatasetExport.objects.filter(kind=ExportKind.ACCEPTED),
            required=False,
            allow_null=True,
            help_text="version of the accepted-trajectory export (SFT)",
        )
        revised_export = serializers.SlugRelatedField(
            slug_field="version",
            queryset=DatasetExport.objects.filter(kind=ExportKind.REVISED),
            required=False,
            allow_null=True,
            help_text="SFT: version of the expert-revised trajectories' export (instead of "
            "dataset_export)",
        )
        preference_export = serializers.SlugRelatedField(
            slug_field="version",
            queryset=DatasetExport.objects.filter(kind=ExportKind.PREFERENCE),
            required=False,
            allow_null=True,
            help_text="DPO: version of the preference-pair export",
        )
        label_export = serializers.SlugRelatedField(
            slug_field="version",
            queryset=LabelExport.objects.all(),
            required=False,
            allow_null=True,
            help_text="GRPO: version of the vetted-label export to learn from (instead of "
            "label_source); the checkpoint names the decisions behind it",
        )
        label_source = LabelSourceSerializer(
            required=False, help_text="GRPO: the labelled spectra to learn from"
        )
        overrides = serializers.DictField(
            required=False,
            help_text="any of learning_rate, num_train_epochs, max_steps, use_lora, lora_r",
        )

    @extend_schema(request=InputSerializer, responses={201: TrainingRunOutputSerializer})
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        # The exports this user may read (annotation/blinding.py); another version is unknown.
        for name, kind in EXPORT_FIELDS.items():
            field = cast(serializers.SlugRelatedField, params.fields[name])
            field.queryset = dataset_exports_visible_to(
                user=request.user, rows=DatasetExport.objects.filter(kind=kind)
            )
        labels = cast(serializers.SlugRelatedField, params.fields["label_export"])
        labels.queryset = label_exports_visible_to(
            user=request.user, rows=LabelExport.objects.all()
        )
        params.is_valid(raise_exception=True)
        data = params.validated_data
        exports = [data[name] for name in EXPORT_FIELDS if data.get(name) is not None]
        if len(exports) > 1:
            raise ValidationError(
                {"dataset_export": [f"give one of {', '.join(EXPORT_FIELDS)}, not several"]}
            )
        label_source = dict(data.get("label_source") or {})
        if data.get("label_export") is not None:
            if label_source:
                raise ValidationError(
                    {"label_export": ["give label_export or label_source, not both"]}
                )
            label_source = {"label_export": data["label_export"].version}
        try:
            run = services.training_run_create(
                stage=data["stage"],
                preset=data["preset"],
                base_model=data.get("base_model", ""),
                base_checkpoint=data.get("base_checkpoint"),
                dataset_export=exports[0] if exports else None,
                label_source=label_source,
                overrides=data.get("overrides") or {},
                name=data.get("name", ""),
                created_by=_expert(request),
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(TrainingRunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class TrainingRunDetailOutputSerializer(TrainingRunOutputSerializer):
    config = serializers.DictField(help_text="the resolved training configuration")
    progress = serializers.DictField(help_text="the job's step, total and latest metrics")
    checkpoint = CheckpointOutputSerializer(allow_null=True)  # type: ignore[assignment]

    class Meta(TrainingRunOutputSerializer.Meta):
        fields = [*TrainingRunOutputSerializer.Meta.fields, "config", "progress"]


class TrainingRunDetailApi(APIView):
    role_rule = permissions.TRAINING_READ

    @extend_schema(responses=TrainingRunDetailOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(selectors.training_runs(), pk=run_id)
        data = dict(TrainingRunOutputSerializer(run).data)
        data["config"] = run.config
        data["progress"] = selectors.training_progress(run=run)
        checkpoint = PolicyCheckpoint.objects.filter(run=run).first()
        data["checkpoint"] = (
            None if checkpoint is None else CheckpointOutputSerializer(checkpoint).data
        )
        return Response(data)


class TrainingRunMetricsApi(APIView):
    """Metric rows in the order they were written; ``after`` follows a live run."""

    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.TRAINING_READ

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="rows after this id"),
            OpenApiParameter("name", str, many=True, description="only these metric names"),
        ],
        responses=MetricOutputSerializer(many=True),
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(TrainingRun, pk=run_id)
        try:
            after = int(request.query_params.get("after") or "0")  # ?after= is not given
        except ValueError:
            return Response({"after": ["must be an integer"]}, status=400)
        rows = selectors.training_metrics(
            run=run, names=request.query_params.getlist("name"), after=after
        )
        return _paginated(request, self, rows, MetricOutputSerializer)


class TrainingRunCancelApi(APIView):
    role_rule = permissions.TRAINING_CONTROL

    @extend_schema(request=None, responses=TrainingRunOutputSerializer)
    def post(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(selectors.training_runs(), pk=run_id)
        if not job_cancel_allowed(run.job, _expert(request)):
            raise PermissionDenied("only the run's creator or staff can cancel it")
        services.training_run_cancel(run=run, actor=_expert(request))
        run.job.refresh_from_db()
        return Response(TrainingRunOutputSerializer(run).data)


class PolicyCheckpointListApi(APIView):
    """Registered checkpoints; ``policy_spec`` is what an inspection run's ``policy`` takes."""

    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.TRAINING_READ

    @extend_schema(responses=CheckpointOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return _paginated(request, self, selectors.policy_checkpoints(), CheckpointOutputSerializer)
