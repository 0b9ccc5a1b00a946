""" "Find more like this" through the API: a spectrum's nearest stored spectra, and the staff's
"queue these for vetting" (the page is ``similar_views``)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.catalog import similar
from annotation.catalog.selectors import CatalogQueryError
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.fields import IdField
from annotation.core.http import _expert
from annotation.inspections import queue_actions
from annotation.spectra.models import Spectrum, Task


def _spectrum(request: Request, spectrum_id: int) -> Spectrum:
    row = similar.spectrum_for(user=request.user, spectrum_id=spectrum_id)
    if row is None:
        raise Http404("no such spectrum")
    return row


class NeighbourSerializer(serializers.Serializer):
    spectrum_id = serializers.IntegerField()
    object_id = serializers.CharField()
    survey = serializers.CharField()
    dataset = serializers.CharField()
    redshift = serializers.FloatField()
    snr = serializers.FloatField(allow_null=True)
    distance = serializers.FloatField(help_text="Euclidean distance in embedding space")
    labels = serializers.DictField(
        child=serializers.CharField(), help_text="vetted label per task code you may read"
    )


class SpectrumSimilarApi(APIView):
    role_rule = permissions.BROWSE

    class OutputSerializer(serializers.Serializer):
        spectrum_id = serializers.IntegerField()
        basis = serializers.CharField()
        method = serializers.CharField()
        error = serializers.CharField()
        neighbours = NeighbourSerializer(many=True)

    @extend_schema(
        operation_id="spectrum_similar",
        parameters=[
            OpenApiParameter("k", int, description=f"how many, 1 to {similar.MAX_K}"),
            OpenApiParameter("task", str, description="a task code"),
            OpenApiParameter("dataset", str),
            OpenApiParameter("vetted", str, enum=list(similar.VETTED_CHOICES)),
        ],
        responses=OutputSerializer,
        description="The stored spectra nearest this one in embedding space (rest frame, "
        "common grid and resolution, continuum divided out, PCA), nearest first; spectra "
        "you may not read are left out.",
    )
    def get(self, request: Request, spectrum_id: int) -> Response:
        spectrum = _spectrum(request, spectrum_id)
        try:
            filters = similar.similar_filters_from_query(request.query_params)
        except CatalogQueryError as error:
            return Response({"detail": str(error)}, status=400)
        result = similar.similar_spectra(user=request.user, spectrum=spectrum, filters=filters)
        output: dict[str, Any] = {
            "spectrum_id": result.spectrum_id,
            "basis": result.basis,
            "method": result.method,
            "error": result.error,
            "neighbours": [
                {**row.__dict__, "labels": dict(row.labels)} for row in result.neighbours
            ],
        }
        return Response(self.OutputSerializer(output).data)


class SpectrumSimilarQueueApi(APIView):
    role_rule = permissions.VETTING_MANAGE

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        spectra = serializers.ListField(
            child=IdField(), min_length=1, max_length=queue_actions.MAX_BULK
        )

    class OutputSerializer(serializers.Serializer):
        task = serializers.CharField()
        queued = serializers.ListField(child=serializers.IntegerField(), help_text="candidates")
        waiting = serializers.ListField(child=serializers.IntegerField(), help_text="spectra")
        labelled = serializers.ListField(child=serializers.IntegerField(), help_text="spectra")
        no_candidate = serializers.ListField(
            child=serializers.IntegerField(), help_text="spectra no finished inspection covers"
        )
        not_found = serializers.ListField(child=serializers.IntegerField(), help_text="spectra")

    @extend_schema(
        operation_id="spectrum_similar_queue",
        request=InputSerializer,
        responses=OutputSerializer,
        description="Staff: put the selected spectra's newest finished candidates of the task "
        "back in the vetting queue (labelled and already waiting ones are left as they are).",
    )
    def post(self, request: Request, spectrum_id: int) -> Response:
        _spectrum(request, spectrum_id)
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            plan = similar.queue_plan(
                user=request.user, spectrum_ids=data["spectra"], task=data["task"].code
            )
            done = []
            if plan.candidate_ids:
                done = queue_actions.candidates_requeue(
                    candidate_ids=plan.candidate_ids, actor=_expert(request)
                )
        except CatalogQueryError as error:
            return Response({"detail": str(error)}, status=400)
        except core_errors.WorkflowError as error:
            return error_response(error)
        output = {
            "task": plan.task,
            "queued": [row.pk for row in done],
            "waiting": plan.waiting,
            "labelled": plan.labelled,
            "no_candidate": plan.no_candidate,
            "not_found": plan.not_found,
        }
        return Response(self.OutputSerializer(output).data)
