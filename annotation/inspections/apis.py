"""Inspection runs through the API: start, follow, cancel, read steps, retry."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.endpoints import public_policy_spec
from annotation.core.fields import IdField
from annotation.core.http import _expert
from annotation.core.serializers import BAD_REQUEST, CONFLICT, FORBIDDEN, NOT_FOUND
from annotation.inspections import (
    ablation_selectors,
    interruptions,
    reproduction,
    selectors,
    services,
    shifts,
)
from annotation.inspections import permissions as inspection_permissions
from annotation.inspections.ablation_apis import EvidenceAblationSerializer
from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.spectra.models import Spectrum, Task


class RunOutputSerializer(serializers.ModelSerializer):
    task: serializers.SlugRelatedField[Task] = serializers.SlugRelatedField(
        slug_field="code", read_only=True
    )
    policy_spec = serializers.SerializerMethodField()
    policy_info = serializers.SerializerMethodField()
    sampling = serializers.SerializerMethodField()

    class Meta:
        model = InspectionRun
        fields = [
            "id",
            "name",
            "task",
            "policy_spec",
            "policy_info",
            "sampling",
            "model_key",
            "model_label",
            "rollouts",
            "max_tool_calls",
            "confidence_threshold",
            "cancelled",
            "code_version",
            "created_at",
        ]

    def _shown(self, value: dict) -> dict:
        # A model server's address is for staff (it names internal hosts); secrets for nobody.
        request = self.context.get("request")
        staff = bool(request is not None and request.user.is_staff)
        return public_policy_spec(value, addresses=staff)

    def get_policy_spec(self, run: InspectionRun) -> dict:
        return self._shown(run.policy_spec)

    def get_policy_info(self, run: InspectionRun) -> dict:
        return self._shown(run.policy_info)

    def get_sampling(self, run: InspectionRun) -> dict:
        return self._shown(run.sampling)


SHOWN_STATES = [*CandidateState.values, "interrupted"]


class CandidateOutputSerializer(serializers.ModelSerializer):
    """A candidate; ``state`` is "interrupted" for a running one no live worker runs (a killed
    worker left it; staff may resend it at once), given by the context's ``interrupted`` ids."""

    object_id = serializers.CharField(source="spectrum.object_id")
    state = serializers.SerializerMethodField()

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
            "triage_reason",
            "error",
            "attempts",
            "started_at",
            "finished_at",
            "retry_at",
        ]
        extra_kwargs = {
            "retry_at": {
                "help_text": "a pending candidate waiting for a model endpoint is sent again at "
                "this time (error says why); null otherwise"
            }
        }

    @extend_schema_field(
        serializers.ChoiceField(
            choices=SHOWN_STATES,
            help_text="interrupted: running, but no live worker runs it (a worker was killed); "
            "staff resend it with POST /api/inspections/{run_id}/resend/",
        )
    )
    def get_state(self, candidate: Candidate) -> str:
        if candidate.pk in self.context.get("interrupted", ()):
            return "interrupted"
        return candidate.state


class RunDetailOutputSerializer(RunOutputSerializer):
    """The run, how far it is, its figures, and a page of its candidates (``?page=``)."""

    progress = serializers.DictField(help_text="candidate counts by state, the pace and the ETA")
    metrics = serializers.DictField(
        allow_null=True, help_text="on a labelled set: F1, accuracy, calibration (else null)"
    )
    reproducibility = serializers.DictField(help_text="what the background re-check found")
    shift = serializers.DictField(
        allow_null=True,
        help_text="the shift sentinel's latest comparison with the calibration set (state "
        "pending, clear, shifted, recalibrated or failed; per group and feature: KS D, p, PSI); "
        "state 'not checked' with the reason when the run was never compared",
    )
    candidates = CandidateOutputSerializer(many=True, help_text="this page of the candidates")
    candidates_count = serializers.IntegerField(help_text="all the candidates this user may read")

    class Meta(RunOutputSerializer.Meta):
        fields = [
            *RunOutputSerializer.Meta.fields,
            "progress",
            "metrics",
            "reproducibility",
            "shift",
            "candidates",
            "candidates_count",
        ]


class RolloutOutputSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    prediction = serializers.CharField(allow_blank=True, help_text="YES, NO or blank")
    confidence = serializers.FloatField(allow_null=True)
    trajectory = serializers.DictField(help_text="the stored trajectory (steps and answer)")


class CandidateDetailOutputSerializer(CandidateOutputSerializer):
    rollouts = RolloutOutputSerializer(many=True)
    evidence_ablation = EvidenceAblationSerializer(
        allow_null=True, help_text="its evidence ablation; null when none was run"
    )

    class Meta(CandidateOutputSerializer.Meta):
        fields = [*CandidateOutputSerializer.Meta.fields, "rollouts", "evidence_ablation"]


def _get_run_for_user(request: Request, run_id: int) -> InspectionRun:
    """The run, if this user may read it; otherwise 404, as if there were none (Blinding)."""
    runs = blinding.runs_visible_to(user=request.user).select_related("task")
    return get_object_or_404(runs, pk=run_id)


def _get_candidate_for_user(request: Request, candidate_id: int) -> Candidate:
    candidates = blinding.candidates_visible_to(user=request.user).select_related("spectrum")
    return get_object_or_404(candidates, pk=candidate_id)


class InspectionRunListApi(APIView):
    # Answers a page (count, next, previous, results): the schema says so too.
    pagination_class = PageNumberPagination

    role_rule = permissions.INSPECTION_READ

    @extend_schema(responses=RunOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(
            blinding.runs_visible_to(user=request.user).select_related("task"), request, view=self
        )
        return paginator.get_paginated_response(
            RunOutputSerializer(page, many=True, context={"request": request}).data
        )


class InspectionRunCreateApi(APIView):
    role_rule = permissions.INSPECT

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        spectrum_ids = serializers.ListField(child=IdField(), min_length=1, max_length=100000)
        policy = serializers.DictField(
            help_text='e.g. {"kind": "rule-based"} (optional: threshold, max_windows, name, '
            'calibration), {"kind": "transformers", "model_path": ...} (optional: device, dtype, '
            'max_pixels, reuse_cache) or {"kind": "openai", "endpoint": "default"} (a registered '
            "endpoint, GET /api/endpoints/; base_url and api_key are refused). Any other key, or "
            "a value out of range, is refused with 400 naming it."
        )
        sampling = serializers.DictField(required=False)
        rollouts = serializers.IntegerField(min_value=1, max_value=16, default=1)
        max_tool_calls = serializers.IntegerField(min_value=0, max_value=16, default=8)
        confidence_threshold = serializers.FloatField(min_value=0, max_value=1, default=0.0)
        name = serializers.CharField(max_length=120, required=False, allow_blank=True)

        def validate_spectrum_ids(self, ids: list[int]) -> list[int]:
            # code does_not_exist: a 404 when nothing else is wrong (webapp.api_errors)
            found = set(Spectrum.objects.filter(pk__in=ids).values_list("pk", flat=True))
            missing = sorted(set(ids) - found)
            if missing:
                raise serializers.ValidationError(
                    f"unknown spectrum ids: {missing[:10]}", code="does_not_exist"
                )
            return ids

    @extend_schema(request=InputSerializer, responses={201: RunOutputSerializer})
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
                created_by=_expert(request),
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            RunOutputSerializer(run, context={"request": request}).data,
            status=status.HTTP_201_CREATED,
        )


class InspectionRunDetailApi(APIView):
    role_rule = permissions.INSPECTION_READ

    @extend_schema(responses=RunDetailOutputSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = _get_run_for_user(request, run_id)
        data = dict(RunOutputSerializer(run, context={"request": request}).data)
        data["progress"] = selectors.run_progress(run=run, user=request.user)
        data["metrics"] = selectors.run_metrics(run=run, user=request.user)
        data["reproducibility"] = selectors.run_reproducibility(run=run, user=request.user)
        data["shift"] = selectors.run_shift(run=run, user=request.user)
        paginator = PageNumberPagination()
        candidates = blinding.candidates_visible_to(user=request.user).filter(run=run)
        page = paginator.paginate_queryset(
            candidates.select_related("spectrum").order_by("id"), request, view=self
        )
        interrupted = (
            selectors.interrupted_candidate_ids(rows=candidates)
            if data["progress"]["interrupted"]
            else set()
        )
        data["candidates"] = CandidateOutputSerializer(
            page, many=True, context={"interrupted": interrupted}
        ).data
        assert paginator.page is not None  # set by paginate_queryset (PAGE_SIZE is set)
        data["candidates_count"] = paginator.page.paginator.count
        return Response(data)


class InspectionRunShiftCheckApi(APIView):
    """Compare the run with its model's calibration set again (the shift sentinel): its owner
    or staff. Its confident answers wait for experts until the comparison is done."""

    role_rule = permissions.INSPECTION_CONTROL

    class OutputSerializer(serializers.Serializer):
        check_id = serializers.IntegerField()
        state = serializers.CharField(help_text="pending: the comparison runs as a job")
        job_id = serializers.IntegerField(allow_null=True)

    @extend_schema(
        request=None,
        responses={202: OutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND, 409: CONFLICT},
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _get_run_for_user(request, run_id)
        try:
            if not inspection_permissions.can_control(request.user, run):
                raise core_errors.NotAllowed("only the run's owner or staff may compare it again")
            check = shifts.shift_check_request(run=run, actor=_expert(request))
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            {"check_id": check.pk, "state": check.state, "job_id": check.job_id}, status=202
        )


class InspectionRunCancelApi(APIView):
    role_rule = permissions.INSPECTION_CONTROL

    class OutputSerializer(serializers.Serializer):
        cancelled = serializers.IntegerField(help_text="pending candidates that will not run")

    @extend_schema(request=None, responses=OutputSerializer)
    def post(self, request: Request, run_id: int) -> Response:
        run = _get_run_for_user(request, run_id)
        cancelled = services.inspection_run_cancel(run=run, actor=_expert(request))
        return Response({"cancelled": cancelled})


class InspectionRunResendApi(APIView):
    role_rule = permissions.INSPECTION_RESEND

    class InputSerializer(serializers.Serializer):
        candidates = serializers.ListField(
            child=IdField(),
            required=False,
            max_length=interruptions.MAX_RESEND,
            help_text="the interrupted candidates to send again (default: every one you may read)",
        )

    class OutputSerializer(serializers.Serializer):
        resent = serializers.ListField(
            child=serializers.IntegerField(), help_text="the candidates sent again (now pending)"
        )

    @extend_schema(
        operation_id="inspection_run_resend",
        request=InputSerializer,
        responses={200: OutputSerializer, 400: BAD_REQUEST, 404: NOT_FOUND, 409: CONFLICT},
        description='Staff: send the run\'s interrupted candidates (state "interrupted": a '
        "killed worker left them running) again now, without waiting for the broker's "
        "visibility timeout; each is audit-logged and ends with one verdict. 409 when one of "
        "those named is not interrupted (a live worker runs it, or it is not running).",
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = _get_run_for_user(request, run_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        visible = blinding.candidates_visible_to(user=request.user).filter(run=run)
        if "candidates" in params.validated_data:
            ids = sorted(set(params.validated_data["candidates"]))
            readable = set(visible.filter(pk__in=ids).values_list("pk", flat=True))
            if missing := [pk for pk in ids if pk not in readable]:
                raise Http404(f"no candidate {missing[0]} in this run")
        else:
            ids = sorted(selectors.interrupted_candidate_ids(rows=visible))[
                : interruptions.MAX_RESEND
            ]
        try:
            resent = interruptions.candidates_resend_interrupted(
                run=run, candidate_ids=ids, actor=_expert(request)
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response({"resent": resent})


class CandidateDetailApi(APIView):
    role_rule = permissions.INSPECTION_READ

    @extend_schema(responses=CandidateDetailOutputSerializer)
    def get(self, request: Request, candidate_id: int) -> Response:
        candidate = _get_candidate_for_user(request, candidate_id)
        interrupted = selectors.interrupted_candidate_ids(
            rows=Candidate.objects.filter(pk=candidate.pk)
        )
        data = dict(CandidateOutputSerializer(candidate, context={"interrupted": interrupted}).data)
        data["rollouts"] = [
            {
                "index": r.index,
                "prediction": r.prediction,
                "confidence": r.confidence,
                "trajectory": r.data,
            }
            for r in candidate.rollouts.order_by("index")
        ]
        ablation = ablation_selectors.candidate_ablation(candidate)
        data["evidence_ablation"] = (
            EvidenceAblationSerializer(ablation).data if ablation is not None else None
        )
        return Response(data)


class CandidateStepsApi(APIView):
    """Steps stored so far (the live view's data), after a given step id."""

    role_rule = permissions.INSPECTION_READ

    class OutputSerializer(serializers.Serializer):
        state = serializers.CharField()
        steps = serializers.ListField(child=serializers.DictField())

    @extend_schema(
        parameters=[OpenApiParameter("after", int, description="return steps after this id")],
        responses=OutputSerializer,
    )
    def get(self, request: Request, candidate_id: int) -> Response:
        candidate = _get_candidate_for_user(request, candidate_id)
        try:
            after = int(request.query_params.get("after") or "0")  # ?after= is not given
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


class ReproductionOutputSerializer(serializers.Serializer):
    candidate = serializers.IntegerField()
    checked = serializers.BooleanField(help_text="False when nothing was stored to compare")
    matches = serializers.BooleanField(help_text="stored equals the in-process re-run")
    reason = serializers.CharField(allow_blank=True)
    differences = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        help_text="where, stored and reproduced value of each difference (the first 50)",
    )
    notes = serializers.ListField(child=serializers.CharField())
    seconds = serializers.FloatField()


class CandidateReproduceApi(APIView):
    """Re-run a finished candidate in-process now and compare with what was stored."""

    role_rule = permissions.INSPECTION_READ

    @extend_schema(request=None, responses=ReproductionOutputSerializer)
    def post(self, request: Request, candidate_id: int) -> Response:
        candidate = _get_candidate_for_user(request, candidate_id)
        if not inspection_permissions.can_reproduce(request.user, candidate.run):
            return error_response(
                core_errors.NotAllowed(
                    "reproducing a model's candidate sends the model every turn again: only "
                    "the run's owner or staff may"
                )
            )
        return Response(reproduction.candidate_reproduce(candidate.pk).as_dict())


class CandidateRetryApi(APIView):
    role_rule = permissions.INSPECTION_CONTROL

    @extend_schema(
        request=None, responses={200: CandidateOutputSerializer, 400: BAD_REQUEST, 409: CONFLICT}
    )
    def post(self, request: Request, candidate_id: int) -> Response:
        candidate = _get_candidate_for_user(request, candidate_id)
        try:
            services.candidate_retry(candidate=candidate, actor=_expert(request))
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(CandidateOutputSerializer(candidate).data)
