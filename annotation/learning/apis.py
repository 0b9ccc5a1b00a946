"""The vetting loop through the API, beside its pages: calibration per task, refits, target
purity, audit samples, gold items and vetters' accuracy on them."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core.apis import error_response
from annotation.core.http import _expert
from annotation.core.serializers import BAD_REQUEST, CONFLICT, FORBIDDEN, NOT_FOUND
from annotation.learning import permissions, selectors, services
from annotation.learning.models import CalibrationFit, TriageThreshold
from annotation.spectra.models import Task


class IntervalSerializer(serializers.Serializer):
    value = serializers.FloatField(allow_null=True)
    low = serializers.FloatField(allow_null=True)
    high = serializers.FloatField(allow_null=True)
    unlabelled_strata = serializers.ListField(child=serializers.CharField())


class FitSerializer(serializers.ModelSerializer):
    class Meta:
        model = CalibrationFit
        fields = [
            "id",
            "version",
            "method",
            "params",
            "n_labels",
            "positives",
            "reliability",
            "created_at",
        ]


class ThresholdSerializer(serializers.ModelSerializer):
    class Meta:
        model = TriageThreshold
        fields = [
            "threshold",
            "threshold_low",
            "threshold_high",
            "details",
            "changed",
            "created_at",
        ]


class ModelCalibrationSerializer(serializers.Serializer):
    model_key = serializers.CharField()
    model_label = serializers.CharField()
    fit = FitSerializer(allow_null=True)
    threshold = ThresholdSerializer(allow_null=True)


class AuditEstimateSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="sample.pk")
    model_key = serializers.CharField(source="sample.model_key")
    open = serializers.BooleanField(source="sample.open")
    sampled = serializers.IntegerField()
    labelled = serializers.IntegerField()
    strata = serializers.ListField(child=serializers.DictField())
    purity = IntervalSerializer()
    completeness = IntervalSerializer()


def _task(code: str) -> Task:
    return get_object_or_404(Task, code=code)


class CalibrationDetailApi(APIView):
    role_rule = permissions.CALIBRATION_READ

    class OutputSerializer(serializers.Serializer):
        task = serializers.CharField()
        target_purity = serializers.FloatField(allow_null=True)
        models = ModelCalibrationSerializer(many=True)
        audits = AuditEstimateSerializer(many=True)

    @extend_schema(
        operation_id="calibration_retrieve",
        responses={200: OutputSerializer, 404: NOT_FOUND},
        description="Each model's newest recalibration on the task, the triage threshold it "
        "gave and the task's audit samples with their purity and completeness estimates.",
    )
    def get(self, request: Request, task_code: str) -> Response:
        task = _task(task_code)
        overview = selectors.calibration_overview(
            task, runs=blinding.runs_visible_to(user=request.user)
        )
        keys = {model.model_key for model in overview}
        target = selectors.current_target(task)
        output = {
            "task": task.code,
            "target_purity": target.target_purity if target else None,
            "models": overview,
            "audits": [
                selectors.audit_estimate(sample)
                for sample in selectors.audit_samples(task).filter(model_key__in=keys)[:10]
            ],
        }
        return Response(self.OutputSerializer(output).data)


class JobStartedSerializer(serializers.Serializer):
    job = serializers.IntegerField()


class CalibrationRefitApi(APIView):
    role_rule = permissions.CALIBRATE

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        model_key = serializers.CharField(
            max_length=200, required=False, allow_blank=True, default=""
        )

    @extend_schema(
        operation_id="calibration_refit",
        request=InputSerializer,
        responses={202: JobStartedSerializer, 400: BAD_REQUEST, 403: FORBIDDEN},
        description="Refit a model's recalibration on the task (every model's when model_key "
        "is blank) on the vetted labels, as a job that then re-routes its candidates.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            job = services.recalibration_start(
                task=data["task"], model_key=data["model_key"], actor=_expert(request)
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response({"job": job.pk}, status=status.HTTP_202_ACCEPTED)


class TriageTargetSetApi(APIView):
    role_rule = permissions.TRIAGE_MANAGE

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        target_purity = serializers.FloatField(min_value=0.5, max_value=0.9999)

    class OutputSerializer(serializers.Serializer):
        task = serializers.CharField()
        target_purity = serializers.FloatField()
        job = serializers.IntegerField()

    @extend_schema(
        operation_id="triage_target_set",
        request=InputSerializer,
        responses={201: OutputSerializer, 400: BAD_REQUEST, 403: FORBIDDEN},
        description="Set the task's target purity for auto-accepted YES verdicts; each "
        "model's threshold follows in a recalibration job.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            target, job = services.triage_target_set(
                task=data["task"], target_purity=data["target_purity"], actor=_expert(request)
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        output = {"task": data["task"].code, "target_purity": target.target_purity, "job": job.pk}
        return Response(self.OutputSerializer(output).data, status=status.HTTP_201_CREATED)


class AuditSampleCreateApi(APIView):
    role_rule = permissions.TRIAGE_MANAGE

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        model_key = serializers.CharField(max_length=200)
        per_stratum = serializers.IntegerField(min_value=1, max_value=services.MAX_PER_STRATUM)

    @extend_schema(
        operation_id="audit_sample_create",
        request=InputSerializer,
        responses={201: AuditEstimateSerializer, 400: BAD_REQUEST, 403: FORBIDDEN, 409: CONFLICT},
        description="Draw a stratified audit sample of a model's candidates on the task; its "
        "candidates join the vetting queue and their labels give the estimates.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        visible = {
            key
            for key, _ in selectors.models_on_task(
                data["task"], runs=blinding.runs_visible_to(user=request.user)
            )
        }
        try:
            if data["model_key"] not in visible:
                raise core_errors.WorkflowError(
                    f"no model you may read with key {data['model_key'][:200]!r} answered {data['task'].code}"
                )
            sample = services.audit_sample_draw(
                task=data["task"],
                model_key=data["model_key"],
                per_stratum=data["per_stratum"],
                actor=_expert(request),
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            AuditEstimateSerializer(selectors.audit_estimate(sample)).data,
            status=status.HTTP_201_CREATED,
        )


class GoldRecordSerializer(serializers.Serializer):
    vetter = serializers.CharField(source="username")
    answered = serializers.IntegerField()
    correct = serializers.IntegerField()
    accuracy = serializers.FloatField(allow_null=True)
    low = serializers.FloatField()
    high = serializers.FloatField()


class GoldAccuracyApi(APIView):
    role_rule = permissions.GOLD_MANAGE

    @extend_schema(
        operation_id="gold_accuracy_list",
        responses=GoldRecordSerializer(many=True),
        description="Each vetter's answers on gold items: answered, correct, accuracy and its "
        "95 % Wilson interval.",
    )
    def get(self, request: Request) -> Response:
        return Response(GoldRecordSerializer(selectors.gold_records(), many=True).data)


class GoldItemCreateApi(APIView):
    role_rule = permissions.GOLD_MANAGE

    class InputSerializer(serializers.Serializer):
        candidate = serializers.IntegerField(min_value=1)

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        candidate = serializers.IntegerField(source="candidate_id")
        answer = serializers.CharField()
        active = serializers.BooleanField()

    @extend_schema(
        operation_id="gold_item_create",
        request=InputSerializer,
        responses={201: OutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT},
        description="Make a candidate whose spectrum has a vetted label a gold item.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        candidate = get_object_or_404(
            blinding.candidates_visible_to(user=request.user), pk=params.validated_data["candidate"]
        )
        try:
            gold = services.gold_item_mark(candidate=candidate, actor=_expert(request))
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(self.OutputSerializer(gold).data, status=status.HTTP_201_CREATED)
