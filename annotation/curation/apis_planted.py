"""Staff APIs of planted-error audits (annotation.curation.planted) and the curation analysis."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.core import permissions
from annotation.core.apis import ERROR, WorkflowApi
from annotation.core.http import _expert
from annotation.core.serializers import BAD_REQUEST
from annotation.curation import analysis, planted
from annotation.curation.models import PlantedError, PlantedErrorKind, PlantRound


class RateOutputSerializer(serializers.Serializer):
    key = serializers.CharField()
    # Serializer fields are popped into _declared_fields by the metaclass; the stubs
    # see a class attribute overriding Field.label (str) instead.
    label = serializers.CharField()  # type: ignore[assignment]
    n = serializers.IntegerField(help_text="verdicts given on planted copies")
    caught = serializers.IntegerField(help_text="verdicts that requested changes")
    catch_rate = serializers.FloatField(allow_null=True)
    wilson_low = serializers.FloatField(help_text="Wilson 95 % interval of the catch rate")
    wilson_high = serializers.FloatField()
    located = serializers.IntegerField(help_text="caught with a comment on the planted step")
    located_rate = serializers.FloatField(allow_null=True)
    located_wilson_low = serializers.FloatField()
    located_wilson_high = serializers.FloatField()


class CatchRatesOutputSerializer(serializers.Serializer):
    overall = RateOutputSerializer()
    by_auditor = RateOutputSerializer(many=True)
    by_kind = RateOutputSerializer(many=True)
    by_auditor_and_kind = RateOutputSerializer(many=True)
    pending = serializers.IntegerField(help_text="planted copies still in audit")


class PlantedErrorOutputSerializer(serializers.ModelSerializer):
    state = serializers.CharField(source="curation.state")
    verdicts = serializers.SerializerMethodField()

    class Meta:
        model = PlantedError
        fields = [
            "curation",
            "source",
            "source_version",
            "kind",
            "target",
            "description",
            "state",
            "verdicts",
        ]

    def get_verdicts(self, error: PlantedError) -> list[dict[str, Any]]:
        return [
            {"auditor": t.auditor, "verdict": t.verdict, "caught": t.caught, "located": t.located}
            for t in planted.trials(errors=[error])
        ]


class PlantRoundOutputSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username")
    copies = PlantedErrorOutputSerializer(source="errors", many=True)

    class Meta:
        model = PlantRound
        fields = ["id", "created_by", "seed", "kinds", "note", "created_at", "copies"]


class PlantedAuditsApi(WorkflowApi):
    """Staff plant known errors in copies of approved trajectories; catch rates per auditor and
    error kind (Wilson 95 % intervals)."""

    role_rule = permissions.CURATION_MANAGE

    class InputSerializer(serializers.Serializer):
        kinds = serializers.ListField(
            child=serializers.ChoiceField(choices=PlantedErrorKind.values), min_length=1
        )
        count = serializers.IntegerField(min_value=1, max_value=planted.MAX_PER_ROUND)
        seed = serializers.IntegerField(default=0, min_value=0, max_value=planted.MAX_SEED)
        auditors = serializers.ListField(
            child=serializers.CharField(),
            default=list,
            max_length=2,
            help_text="usernames; empty: the copies wait to be claimed like any audit",
        )
        note = serializers.CharField(max_length=200, default="", allow_blank=True)

    @extend_schema(
        responses=inline_serializer(
            "PlantedAuditsOutput",
            {
                "catch_rates": CatchRatesOutputSerializer(),
                "rounds": PlantRoundOutputSerializer(many=True),
            },
        )
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "catch_rates": planted.catch_rates().as_dict(),
                "rounds": PlantRoundOutputSerializer(planted.plant_rounds()[:50], many=True).data,
            }
        )

    @extend_schema(
        request=InputSerializer,
        responses={
            201: PlantRoundOutputSerializer,
            400: BAD_REQUEST,
            403: ERROR,
            404: ERROR,
            409: ERROR,
        },
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        auditors = []
        for username in data["auditors"]:
            user = get_user_model().objects.filter(username=username, is_active=True).first()
            if user is None:  # a name that names no one: 404, like an id in the path
                raise NotFound(f"auditors: no active expert is called {username!r}")
            auditors.append(user)
        plant_round = planted.plant_round_create(
            actor=_expert(request),
            kinds=data["kinds"],
            count=data["count"],
            seed=data["seed"],
            auditors=auditors,
            note=data["note"],
        )
        return Response(
            PlantRoundOutputSerializer(planted.plant_rounds().get(pk=plant_round.pk)).data,
            status=status.HTTP_201_CREATED,
        )


class CurationAnalysisApi(WorkflowApi):
    """Real trajectories per state, the two auditors' agreement, and catch rates on planted
    errors (planted copies count only there)."""

    role_rule = permissions.CURATION_MANAGE

    @extend_schema(
        responses=inline_serializer(
            "CurationAnalysisOutput",
            {
                "states": inline_serializer(
                    "CurationStateCount",
                    {
                        "state": serializers.CharField(),
                        "label": serializers.CharField(),
                        "count": serializers.IntegerField(),
                    },
                    many=True,
                ),
                "agreement": inline_serializer(
                    "AuditAgreement",
                    {
                        "rounds": serializers.IntegerField(),
                        "agreed": serializers.IntegerField(),
                        "agreement": serializers.FloatField(allow_null=True),
                        "kappa": serializers.FloatField(allow_null=True),
                    },
                ),
                "catch_rates": CatchRatesOutputSerializer(),
            },
        )
    )
    def get(self, request: Request) -> Response:
        found = analysis.curation_analysis()
        return Response(
            {
                "states": found["states"],
                "agreement": found["agreement"].as_dict(),
                "catch_rates": found["catch_rates"].as_dict(),
            }
        )
