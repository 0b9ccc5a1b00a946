"""Model lineage through the API: the twins of /catalog/compare/ and its promotion form.

The comparison is resolved by annotation.catalog.comparisons.model_choice, as the page resolves
it (defaults, the models the reader may read, the catalog entries they may read); a promotion
goes through annotation.inspections.promotions.model_promote (staff only, audit-logged), after
the page's check that the model has answered the task in a run the promoter may read.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.catalog import comparisons
from annotation.core import permissions
from annotation.core.apis import WorkflowApi
from annotation.core.http import _expert
from annotation.core.serializers import BAD_REQUEST, FORBIDDEN
from annotation.inspections import promotions
from annotation.inspections.models import ModelPromotion
from annotation.spectra.models import Task

OUTCOMES = ["fixed", "broken", "flipped", "unchanged"]


class ModelOutputSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="what catalog entries name as model_key")
    label = serializers.CharField()  # type: ignore[assignment]
    current = serializers.BooleanField(help_text="the task's current model (latest promotion)")


class ComparedVerdictSerializer(serializers.Serializer):
    entry = serializers.IntegerField(source="entry_id", help_text="the catalog entry")
    verdict = serializers.CharField(help_text="YES, NO, or blank for no answer")
    confidence = serializers.FloatField(allow_null=True)
    uncertain = serializers.BooleanField(help_text="sent to experts, or no answer")


class ComparedRowSerializer(serializers.Serializer):
    spectrum = serializers.IntegerField(source="spectrum_id")
    object_id = serializers.CharField()
    old = ComparedVerdictSerializer()
    new = ComparedVerdictSerializer()
    label = serializers.CharField(  # type: ignore[assignment]
        help_text="the vetted label, blank when there is none"
    )
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    newly_uncertain = serializers.BooleanField()


class ComparisonOutputSerializer(serializers.Serializer):
    shared = serializers.IntegerField(help_text="spectra both models answered")
    flipped = serializers.IntegerField()
    fixed = serializers.IntegerField(help_text="old verdict wrong, new one right")
    broken = serializers.IntegerField(help_text="old verdict right, new one wrong")
    newly_uncertain = serializers.IntegerField()
    labelled = serializers.IntegerField(help_text="shared spectra with a vetted label")
    old_correct = serializers.IntegerField()
    new_correct = serializers.IntegerField()
    rows = ComparedRowSerializer(
        many=True,
        help_text=f"the spectra whose verdict changed or became uncertain, at most "
        f"{comparisons.ROWS_SHOWN} (the counts cover every spectrum)",
    )


class ModelComparisonApi(WorkflowApi):
    role_rule = permissions.BROWSE

    class OutputSerializer(serializers.Serializer):
        task = serializers.CharField()
        models = ModelOutputSerializer(many=True, help_text="the models on the task, newest first")
        current = serializers.CharField(allow_null=True, help_text="the current model's key")
        new = serializers.CharField(help_text="the new model's key (blank: no model yet)")
        old = serializers.CharField(help_text="the key of the model it is compared with")
        comparison = ComparisonOutputSerializer(
            allow_null=True, help_text="null when fewer than two different models are chosen"
        )

    @extend_schema(
        operation_id="model_comparison_retrieve",
        parameters=[
            OpenApiParameter("task", str, description="a task code; default: the first task"),
            OpenApiParameter("new", str, description="a model key; default: the newest"),
            OpenApiParameter(
                "old",
                str,
                description="a model key; default: the task's current model, else the newest other",
            ),
        ],
        responses={200: OutputSerializer, 400: BAD_REQUEST},
        description="Two models' verdicts on the same spectra of a task, with the vetted labels "
        "as truth (each model's newest catalog entry per spectrum).",
    )
    def get(self, request: Request) -> Response:
        choice = comparisons.model_choice(
            user=request.user,
            task=str(request.query_params.get("task", "")),
            new=str(request.query_params.get("new", "")),
            old=str(request.query_params.get("old", "")),
        )
        if choice.error:
            raise ValidationError({"detail": choice.error})
        output: dict[str, Any] = {
            "task": choice.task,
            "models": [
                {"key": key, "label": label, "current": key == choice.current}
                for key, label in choice.models
            ],
            "current": choice.current,
            "new": choice.new,
            "old": choice.old,
            "comparison": choice.comparison,
        }
        return Response(self.OutputSerializer(output).data)


class ModelPromotionOutputSerializer(serializers.ModelSerializer):
    task = serializers.CharField(source="task.code")
    promoted_by = serializers.CharField(source="promoted_by.get_username")

    class Meta:
        model = ModelPromotion
        fields = [
            "id",
            "task",
            "model_key",
            "model_label",
            "run",
            "comment",
            "promoted_by",
            "created_at",
        ]


class ModelPromoteApi(WorkflowApi):
    role_rule = permissions.MODEL_PROMOTE

    class InputSerializer(serializers.Serializer):
        task = serializers.SlugRelatedField(slug_field="code", queryset=Task.objects.all())
        model_key = serializers.CharField(max_length=200)
        comment = serializers.CharField(
            max_length=2000, required=False, allow_blank=True, default="", help_text="why"
        )

    @extend_schema(
        operation_id="model_promote",
        request=InputSerializer,
        responses={201: ModelPromotionOutputSerializer, 400: BAD_REQUEST, 403: FORBIDDEN},
        description="Make a model the task's current model (staff; recorded in the audit log): "
        "the catalog's 'current model' filter and the default baseline of comparisons.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        task, model_key = data["task"], data["model_key"].strip()
        if model_key not in dict(comparisons.models_readable(user=request.user, task=task.code)):
            raise ValidationError(
                {"model_key": [f"no model you may read has answered task {task.code}"]}
            )
        promotion = promotions.model_promote(
            task=task, model_key=model_key, actor=_expert(request), comment=data["comment"].strip()
        )
        return Response(
            ModelPromotionOutputSerializer(promotion).data, status=status.HTTP_201_CREATED
        )
