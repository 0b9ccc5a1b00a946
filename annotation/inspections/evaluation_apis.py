"""Evaluations through the API: the read twin of /evaluations/.

Both read ``evaluations.evaluation_overview``, so the API lists the rows the page lists for the
same reader: the vetted part of a job's figures is withheld from a reader with a gold item
waiting, and the per-model figures count only the catalog entries the reader may read (rating
blinding and gold masking).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.core import permissions
from annotation.core.apis import WorkflowApi
from annotation.core.endpoints import public_policy_spec
from annotation.core.fields import IdField
from annotation.core.models import Job, JobState
from annotation.core.serializers import BAD_REQUEST
from annotation.inspections import evaluations


class EvaluationQuerySerializer(serializers.Serializer):
    job = IdField(
        required=False,
        help_text="the evaluation job to show; default (or an id that is not an evaluation "
        "job): the latest finished one",
    )


class EvaluationJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=JobState.values)
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    created_by = serializers.CharField(allow_null=True, help_text="who started it (username)")
    created_at = serializers.DateTimeField()


class FiguresSerializer(serializers.Serializer):
    accuracy = serializers.FloatField(allow_null=True)
    balanced_accuracy = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True, help_text="of the positive class")
    ece = serializers.FloatField(allow_null=True, help_text="expected calibration error")


class EvaluationRowSerializer(FiguresSerializer):
    task = serializers.CharField()
    part = serializers.ChoiceField(
        choices=[*evaluations.REAL_PARTS, evaluations.VETTED_PART, evaluations.SYNTHETIC_PART]
    )
    part_label = serializers.CharField()
    synthetic = serializers.BooleanField()
    n = serializers.IntegerField()
    positives = serializers.IntegerField()
    confident_wrong = serializers.IntegerField(help_text="answers wrong at confidence >= 0.9")
    triage = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="[deferral fraction, F1 of what is decided automatically] pairs",
    )


class ShownEvaluationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=JobState.values)
    policy = serializers.CharField(help_text="the policy's kind and model, as the page names it")
    policy_spec = serializers.DictField(help_text="the evaluated policy (no secrets)")
    finished_at = serializers.DateTimeField(allow_null=True)
    created_by = serializers.CharField(allow_null=True)
    vetted_withheld = serializers.BooleanField(
        help_text="the vetted part is left out: it scored the answer of a gold item waiting for "
        "you (it shows once you answered it)"
    )
    missing_parts = serializers.ListField(child=serializers.CharField())
    rows = EvaluationRowSerializer(many=True, help_text="one per task and part, real parts first")


class VettedFiguresSerializer(FiguresSerializer):
    task = serializers.CharField()
    model_key = serializers.CharField()
    model_label = serializers.CharField()
    current = serializers.BooleanField(help_text="the task's current model")
    n = serializers.IntegerField()
    positives = serializers.IntegerField()
    confident_wrong = serializers.IntegerField()


class EvaluationOverviewSerializer(serializers.Serializer):
    jobs = EvaluationJobSerializer(many=True, help_text="the last 20 evaluation jobs")
    shown = ShownEvaluationSerializer(allow_null=True, help_text="null: no evaluation yet")
    vetted_by_model = VettedFiguresSerializer(
        many=True,
        help_text="each model's stored verdicts on the vetted spectra you may read, per task",
    )


def _username(user: User | None) -> str | None:
    return user.get_username() if user is not None else None


def _job(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "state": job.state,
        "done": job.done,
        "total": job.total,
        "created_by": _username(job.created_by),
        "created_at": job.created_at,
    }


class EvaluationListApi(WorkflowApi):
    role_rule = permissions.BROWSE

    @extend_schema(
        operation_id="evaluations_retrieve",
        parameters=[EvaluationQuerySerializer],
        responses={200: EvaluationOverviewSerializer, 400: BAD_REQUEST},
        description="The evaluations page's figures: the last evaluation jobs, one job's table "
        "(real parts, the vetted part, synthetic), and each model's figures on the vetted "
        "spectra. Start an evaluation from the page (machine learning engineers).",
    )
    def get(self, request: Request) -> Response:
        # ?job= sent empty reads as not sent, as the schema says of optional query parameters
        query = EvaluationQuerySerializer(
            data={key: value for key, value in request.query_params.items() if value != ""}
        )
        query.is_valid(raise_exception=True)
        view = evaluations.evaluation_overview(
            user=request.user, job_id=query.validated_data.get("job")
        )
        shown: Job | None = view["shown"]
        staff = bool(request.user.is_staff)
        output = {
            "jobs": [_job(job) for job in view["jobs"]],
            "shown": None
            if shown is None
            else {
                "id": shown.pk,
                "state": shown.state,
                "policy": view["shown_policy"],
                "policy_spec": public_policy_spec(
                    (shown.result or {}).get("policy", {}), addresses=staff
                ),
                "finished_at": shown.finished_at,
                "created_by": _username(shown.created_by),
                "vetted_withheld": view["vetted_withheld"],
                "missing_parts": view["missing_parts"],
                "rows": [
                    {
                        **{key: row[key] for key in ("task", "part", "part_label", "synthetic")},
                        **row["values"],
                        "n": row["n"],
                        "positives": row["positives"],
                        "confident_wrong": row["confident_wrong"],
                        "triage": row["triage_values"],
                    }
                    for row in view["rows"]
                ],
            },
            "vetted_by_model": [
                {
                    **{
                        key: row[key]
                        for key in (
                            "task",
                            "model_key",
                            "model_label",
                            "current",
                            "n",
                            "positives",
                            "confident_wrong",
                        )
                    },
                    **row["values"],
                }
                for row in view["vetted_rows"]
            ],
        }
        return Response(EvaluationOverviewSerializer(output).data)
