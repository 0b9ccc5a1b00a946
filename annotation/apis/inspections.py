"""Inspection runs through the API: start, follow, cancel, read steps, retry."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import selectors, services
from annotation.models import Candidate, InspectionRun, Task


class RunOutputSerializer(serializers.ModelSerializer):
    task = serializers.SlugRelatedField(slug_field="code", read_only=True)
    policy_spec = serializers.SerializerMethodField()

    class Meta:
        model = InspectionRun
        fields = [
            "id",
            "name",
            "task",
            "policy_spec",
            "policy_info",
            "sampling",
            "rollouts",
            "max_tool_calls",
            "confidence_threshold",
            "cancelled",
            "code_version",
            "created_at",
        ]

    def get_policy_spec(self, run: InspectionRun) -> dict:
        return {k: v for k, v in run.policy_spec.items() if k != "api_key"}


class CandidateOutputSerializer(serializers.ModelSerializer):
    object_id = serializers.CharField(source="spectrum.object_id")

    class Meta:
        model = Candidate
        fields = [
            "id",
            "spectrum",
            "object_id",
            "state",
            "verdict",
            "confidence",
            "vote_share",
            "needs_expert",
            "error",
            "attempts",
            "started_at",
            "finished_at",
        ]


class InspectionRunListApi(APIView):
    @extend_schema(responses=RunOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(
            InspectionRun.objects.select_related("task"), request, view=self
        )
        return paginator.get_paginated_response(RunOutputSerializer(page, many=True).data)


class InspectionRunCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        spectrum_ids = serializers.ListField(
            child=serializers.IntegerField(), min_length=1, max_length=100000
        )
        policy = serializers.DictField(help_text='e.g. {"kind": "rule-based"}')
        sampling = serializers.DictField(required=False)
        rollouts = serializers.IntegerField(min_value=1, max_value=16, default=1)
        max_tool_calls = serializers.IntegerField(min_value=0, max_value=16, default=8)
        confidence_threshold = serializers.FloatField(min_value=0, max_value=1, default=0.0)
        name = serializers.CharField(max_length=120, required=False, allow_blank=True)

    @extend_schema(request=InputSerializer, responses=RunOutputSerializer)
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            run = services.inspection_run_create(
                task=data["task"],
                spectrum_ids=data["spectrum_ids"],
                policy_spec=data["policy"],
                sampling=data.get("sampling"),
                rollouts=data["rollouts"],
                max_tool_calls=data["max_tool_calls"],
                confidence_threshold=data["confidence_threshold"],
                name=data.get("name", ""),
                created_by=request.user,
            )
        except services.WorkflowError as error:
            return Response({"detail": str(error)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(RunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class InspectionRunDetailApi(APIView):
    @extend_schema(responses=RunOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(InspectionRun.objects.select_related("task"), pk=run_id)
        data = dict(RunOutputSerializer(run).data)
        data["progress"] = selectors.run_progress(run=run)
        data["metrics"] = selectors.run_metrics(run=run)
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(
            run.candidates.select_related("spectrum").order_by("id"), request, view=self
        )
        data["candidates"] = CandidateOutputSerializer(page, many=True).data
        data["candidates_count"] = paginator.page.paginator.count
        return Response(data)


class InspectionRunCancelApi(APIView):
    class OutputSerializer(serializers.Serializer):
        cancelled = serializers.IntegerField(help_text="pending candidates that will not run")

    @extend_schema(request=None, responses=OutputSerializer)
    def post(self, request: Request, run_id: int) -> Response:
        run = get_object_or_404(InspectionRun, pk=run_id)
        cancelled = services.inspection_run_cancel(run=run, actor=request.user)
        return Response({"cancelled": cancelled})


class CandidateDetailApi(APIView):
    @extend_schema(responses=CandidateOutputSerializer)
    def get(self, request: Request, candidate_id: int) -> Response:
        candidate = get_object_or_404(Candidate.objects.select_related("spectrum"), pk=candidate_id)
        data = dict(CandidateOutputSerializer(candidate).data)
        data["rollouts"] = [
            {
                "index": r.index,
                "prediction": r.prediction,
                "confidence": r.confidence,
                "trajectory": r.data,
            }
            for r in candidate.rollouts.order_by("index")
        ]
        return Response(data)


class CandidateStepsApi(APIView):
    """Steps stored so far (the live view's data), after a given step id."""

    class OutputSerializer(serializers.Serializer):
        state = serializers.CharField()
        steps = serializers.ListField(child=serializers.DictField())

    @extend_schema(
        parameters=[OpenApiParameter("after", int, description="return steps after this id")],
        responses=OutputSerializer,
    )
    def get(self, request: Request, candidate_id: int) -> Response:
        candidate = get_object_or_404(Candidate, pk=candidate_id)
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            return Response({"after": ["must be an integer"]}, status=status.HTTP_400_BAD_REQUEST)
        steps = selectors.live_steps_after(candidate=candidate, after=after)
        return Response(
            {
                "state": candidate.state,
                "steps": [
                    {"id": s.pk, "rollout": s.rollout_index, "index": s.step_index, "step": s.data}
                    for s in steps
                ],
            }
        )


class CandidateRetryApi(APIView):
    @extend_schema(request=None, responses=CandidateOutputSerializer)
    def post(self, request: Request, candidate_id: int) -> Response:
        candidate = get_object_or_404(Candidate, pk=candidate_id)
        try:
            services.candidate_retry(candidate=candidate, actor=request.user)
        except services.WorkflowError as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        return Response(CandidateOutputSerializer(candidate).data)
