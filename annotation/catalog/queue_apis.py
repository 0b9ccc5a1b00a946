"""Staff's bulk vetting-queue actions through the API (the page is ``queue_views``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.catalog import queue
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.fields import IdField
from annotation.core.http import _expert
from annotation.inspections import queue_actions


class VettingQueueActionApi(APIView):
    role_rule = permissions.VETTING_MANAGE

    class InputSerializer(serializers.Serializer):
        action = serializers.ChoiceField(choices=["reassign", "close", "requeue"])
        candidates = serializers.ListField(
            child=IdField(),  # a larger id than a primary key holds is bad input, not a 500
            min_length=1,
            max_length=queue_actions.MAX_BULK,
        )
        expert = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            help_text="reassign: the expert's username; blank: back to every expert",
        )
        reason = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            max_length=queue_actions.CLOSE_REASON_MAX,
            help_text="close: why the candidates leave the queue (required)",
        )

    class OutputSerializer(serializers.Serializer):
        action = serializers.CharField()
        candidates = serializers.ListField(child=serializers.IntegerField())

    @extend_schema(
        operation_id="vetting_queue_action",
        request=InputSerializer,
        responses=OutputSerializer,
        description="Staff: reassign, close (with a reason) or requeue finished candidates; "
        "candidates you may not read are left out; each is audit-logged.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        actor = _expert(request)
        ids = queue.readable_selection(user=request.user, candidate_ids=data["candidates"])
        try:
            if data["action"] == "reassign":
                expert = queue.expert_for_assignment(username=data["expert"], candidate_ids=ids)
                done = queue_actions.candidates_reassign(
                    candidate_ids=ids, expert=expert, actor=actor
                )
            elif data["action"] == "close":
                done = queue_actions.candidates_close(
                    candidate_ids=ids, reason=data["reason"], actor=actor
                )
            else:
                done = queue_actions.candidates_requeue(candidate_ids=ids, actor=actor)
        except core_errors.WorkflowError as error:
            return error_response(error)
        output = {"action": data["action"], "candidates": [row.pk for row in done]}
        return Response(self.OutputSerializer(output).data)
