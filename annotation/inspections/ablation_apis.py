"""Evidence ablation API: a candidate's ablation (in the candidate's own API), and staff sending
a seeded random sample of a run to be ablated."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import blinding
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.http import _expert
from annotation.core.serializers import BAD_REQUEST, CONFLICT, FORBIDDEN, NOT_FOUND
from annotation.inspections import ablation_selectors, ablations
from annotation.inspections.models import EvidenceAblation, EvidenceOutcome, InspectionRun


def _readable_run(request: Request, run_id: int) -> InspectionRun:
    """The run, if this user may read it; otherwise 404, as if there were none (blinding)."""
    return get_object_or_404(blinding.runs_visible_to(user=request.user), pk=run_id)


class EvidenceWindowSerializer(serializers.Serializer):
    lo = serializers.FloatField(help_text="Angstrom, rest frame when the spectrum has a redshift")
    hi = serializers.FloatField()
    source = serializers.ChoiceField(choices=["zoom", "cited"])  # type: ignore[assignment]
    name = serializers.CharField(help_text="the zoom's label or the cited line, as written")


class EvidenceAblationSerializer(serializers.ModelSerializer):
    """The candidate's first rollout re-run with its evidence windows replaced by the continuum
    (after), beside a re-run on the original spectrum (before) and one with random windows of
    the same widths masked (control)."""

    windows = EvidenceWindowSerializer(many=True)
    masked = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()))
    control = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()))
    decisive = serializers.ListField(
        child=serializers.CharField(), help_text="windows that flip the answer when masked alone"
    )
    outcome = serializers.ChoiceField(choices=EvidenceOutcome.choices)
    notes = serializers.SerializerMethodField()

    class Meta:
        model = EvidenceAblation
        fields = [
            "seed",
            "windows",
            "masked",
            "control",
            "decisive",
            "answer_before",
            "confidence_before",
            "answer_after",
            "confidence_after",
            "answer_control",
            "confidence_control",
            "flipped",
            "control_flipped",
            "confident",
            "insensitive",
            "outcome",
            "notes",
            "created_at",
        ]

    def get_notes(self, row: EvidenceAblation) -> list[str]:
        return [str(note) for note in (row.detail or {}).get("notes") or []]


class RunEvidenceAblationApi(APIView):
    """Staff: ablate the evidence of a seeded random sample of the run's finished candidates
    (a background job); GET: the run's ablations counted."""

    role_rule = permissions.EVIDENCE_ABLATE

    class InputSerializer(serializers.Serializer):
        size = serializers.IntegerField(min_value=1, max_value=ablations.MAX_SAMPLE, default=20)
        seed = serializers.IntegerField(min_value=0, default=0)

    class StartedSerializer(serializers.Serializer):
        job_id = serializers.IntegerField()
        candidate_ids = serializers.ListField(child=serializers.IntegerField())
        seed = serializers.IntegerField()

    class CountsSerializer(serializers.Serializer):
        label = serializers.CharField()  # type: ignore[assignment]
        ablated = serializers.IntegerField()
        no_evidence = serializers.IntegerField()
        flipped = serializers.IntegerField()
        control_ran = serializers.IntegerField()
        control_flipped = serializers.IntegerField()
        confident = serializers.IntegerField()
        confident_survived = serializers.IntegerField()
        insensitive = serializers.IntegerField()
        flip_rate = serializers.FloatField(allow_null=True)
        control_flip_rate = serializers.FloatField(allow_null=True)
        confident_survival_rate = serializers.FloatField(allow_null=True)

    @extend_schema(responses={200: CountsSerializer, 403: FORBIDDEN, 404: NOT_FOUND})
    def get(self, request: Request, run_id: int) -> Response:
        run = _readable_run(request, run_id)
        counts = ablation_selectors.run_ablation_counts(run)
        if counts is None:
            return Response({"detail": "no ablation of this run yet"}, status=404)
        return Response(counts.as_dict())

    @extend_schema(
        request=InputSerializer,
        responses={202: StartedSerializer, 400: BAD_REQUEST, 403: FORBIDDEN, 404: NOT_FOUND,
                   409: CONFLICT},
    )  # fmt: skip
    def post(self, request: Request, run_id: int) -> Response:
        run = _readable_run(request, run_id)
        given = self.InputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        try:
            job = ablations.evidence_ablation_start(
                run=run,
                actor=_expert(request),
                size=given.validated_data["size"],
                seed=given.validated_data["seed"],
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            {
                "job_id": job.pk,
                "candidate_ids": job.params["candidate_ids"],
                "seed": job.params["seed"],
            },
            status=202,
        )
