"""Catalog and vetting through the API: list, entry detail, next candidate, expert decision."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation import blinding as selectors
from annotation.catalog import search, trajectories
from annotation.catalog import selectors as catalog
from annotation.catalog.queue import hidden_summary, vetter_queue_hidden, vetter_queue_rows
from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.apis import error_response
from annotation.core.http import _expert
from annotation.core.serializers import CONFLICT, NOT_FOUND
from annotation.inspections import quality as decision_quality
from annotation.inspections import services as inspections_services
from annotation.inspections.decision_history import expert_answer
from annotation.inspections.models import (
    Candidate,
    CatalogEntry,
    ExpertDecision,
    ExpertDecisionValue,
    InspectionRun,
)
from annotation.learning import queue as active_queue
from annotation.learning import selectors as learning_selectors
from annotation.learning import services as learning_services
from annotation.learning.models import GoldAnswer, GoldItem


class CatalogEntryOutputSerializer(serializers.ModelSerializer):
    task = serializers.CharField(source="task_code")
    policy = serializers.CharField(source="policy_name")
    run = serializers.IntegerField(source="run_id")
    candidate = serializers.IntegerField(source="candidate_id", allow_null=True)

    class Meta:
        model = CatalogEntry
        fields = [
            "id",
            "object_id",
            "survey",
            "ra",
            "dec",
            "task",
            "verdict",
            "confidence",
            "snr",
            "policy",
            "model_key",
            "model_label",
            "expert_decision",
            "vetted_label",
            "label_state",
            "expert_quality",
            "expert_issues",
            "synthetic",
            "shifted",
            "evidence_outcome",
            "run",
            "candidate",
            "created_at",
        ]


class ExpertDecisionOutputSerializer(serializers.ModelSerializer):
    """One expert answer; ``replaced_by`` names the same expert's later answer on the spectrum
    for the task (any run) that replaces it, from the ``replaced_by`` map in the context."""

    expert = serializers.CharField(source="expert.get_username")
    run = serializers.IntegerField(source="candidate.run_id")
    replaced_by = serializers.SerializerMethodField(
        help_text="the id of the same expert's later answer on this spectrum and task (on any "
        "run's candidate) that replaces this one; null: this is their answer"
    )

    class Meta:
        model = ExpertDecision
        fields = [
            "id",
            "candidate",
            "run",
            "expert",
            "decision",
            "quality",
            "issues",
            "comment",
            "verdict_seen",
            "confidence_seen",
            "model_key_seen",
            "model_label_seen",
            "created_at",
            "replaced_by",
        ]

    def get_replaced_by(self, decision: ExpertDecision) -> int | None:
        replaced: dict[int, int] = self.context.get("replaced_by", {})
        return replaced.get(decision.pk)


def _image_url(sha256: str, candidate_id: int) -> str | None:
    if not sha256:
        return None
    return f"{reverse('catalog_image', args=[sha256])}?candidate={candidate_id}"


def _trajectory_data(candidate: Candidate) -> list[dict[str, Any]]:
    stored = list(candidate.rollouts.order_by("index"))
    ratings = trajectories.rollout_ratings(rollout.pk for rollout in stored)
    rollouts = []
    for rollout in stored:
        view = trajectories.trajectory_view(rollout.data)
        steps = []
        for step in view.steps:
            item = asdict(step)
            item["image_url"] = _image_url(item.pop("image_sha256"), candidate.pk)
            steps.append(item)
        rollouts.append(
            {
                "index": rollout.index,
                "prediction": rollout.prediction,
                "confidence": rollout.confidence,
                "n_tool_calls": rollout.n_tool_calls,
                "format_ok": rollout.format_ok,
                "stop_reason": rollout.stop_reason,
                "seconds": rollout.seconds,
                "initial_image_url": _image_url(view.initial_image_sha256, candidate.pk),
                "steps": steps,
                "answer": {"prediction": view.prediction, "justification": view.justification},
                "ratings": [
                    {
                        "campaign": rating.item.campaign.name,
                        "rater": rating.rater.get_username(),
                        "score": rating.score,
                        "comment": rating.comment,
                    }
                    for rating in ratings[rollout.pk]
                ],
            }
        )
    return rollouts


def _provenance(run: InspectionRun) -> dict[str, Any]:
    return {
        "run": run.pk,
        "run_name": str(run),
        "task": run.task.code,
        "policy_spec": catalog.public_policy_spec(run.policy_spec),
        "policy_info": catalog.public_policy_spec(run.policy_info),
        "sampling": catalog.public_policy_spec(run.sampling),
        "rollouts_per_candidate": run.rollouts,
        "max_tool_calls": run.max_tool_calls,
        "confidence_threshold": run.confidence_threshold,
        "code_version": run.code_version,
        "created_by": run.created_by.get_username() if run.created_by else None,
        "created_at": run.created_at,
    }


class CatalogListApi(APIView):
    role_rule = permissions.BROWSE

    class FilterSerializer(serializers.Serializer):
        task = serializers.CharField(required=False, allow_blank=True, default="")
        verdict = serializers.ChoiceField(
            choices=["", *catalog.VERDICT_CHOICES], required=False, default=""
        )
        survey = serializers.CharField(required=False, allow_blank=True, default="")
        expert_decision = serializers.ChoiceField(
            choices=["", *catalog.EXPERT_DECISION_CHOICES], required=False, default=""
        )
        confidence_min = serializers.FloatField(
            min_value=0.0, max_value=1.0, required=False, allow_null=True, default=None
        )
        confidence_max = serializers.FloatField(
            min_value=0.0, max_value=1.0, required=False, allow_null=True, default=None
        )
        snr_min = serializers.FloatField(required=False, allow_null=True, default=None)
        object_id = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            help_text="object id or IAU designation prefix (J2208 finds J220848.54-020324.3)",
        )
        dataset = serializers.CharField(
            required=False, allow_blank=True, default="", help_text="the data set, exact name"
        )
        ra = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            help_text="cone search centre: degrees, or sexagesimal hours (22:08:48.54)",
        )
        dec = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            help_text="cone search centre: degrees, or sexagesimal degrees (-02:03:24.3)",
        )
        radius = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            help_text=f"cone radius in arcsec (default {search.DEFAULT_RADIUS_ARCSEC:g}, at most "
            f"{search.MAX_RADIUS_ARCSEC:g})",
        )
        run = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None)
        synthetic = serializers.BooleanField(required=False, allow_null=True, default=None)
        shifted = serializers.BooleanField(
            required=False,
            allow_null=True,
            default=None,
            help_text="its run or survey subset shifted from the calibration set (shift sentinel)",
        )
        evidence = serializers.ChoiceField(
            choices=["", *catalog.EVIDENCE_CHOICES],
            required=False,
            default="",
            help_text="the evidence ablation's outcome (flips: masking its own windows flips the "
            "answer; insensitive: a confident answer that does not move)",
        )
        label_state = serializers.ChoiceField(
            choices=["", *catalog.LABEL_STATE_CHOICES],
            required=False,
            default="",
            help_text="the vetted label's state (none: no decision yet)",
        )
        model = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            max_length=catalog.MODEL_KEY_MAX,
            help_text=f"a model key, or {catalog.CURRENT_MODEL!r}: each task's current "
            "(promoted) model",
        )
        sort = serializers.CharField(
            required=False,
            allow_blank=True,
            default=catalog.DEFAULT_SORT,
            help_text=f"one of {', '.join(catalog.SORT_KEYS)}, '-' prefix for descending; "
            "anything else sorts by the default",
        )
        page = serializers.IntegerField(min_value=1, required=False, default=1)
        page_size = serializers.IntegerField(
            min_value=1, max_value=catalog.MAX_PAGE_SIZE, required=False, default=catalog.PAGE_SIZE
        )

    class OutputSerializer(serializers.Serializer):
        count = serializers.IntegerField(
            help_text=f"matching rows, counted up to {catalog.COUNT_CAP}"
        )
        count_capped = serializers.BooleanField(help_text=f"more than {catalog.COUNT_CAP} match")
        count_estimate = serializers.IntegerField(
            allow_null=True,
            help_text="when count_capped: PostgreSQL's planner estimate of all matching rows "
            "(an estimate, not a count); null otherwise or on other databases",
        )
        page = serializers.IntegerField()
        num_pages = serializers.IntegerField()
        page_size = serializers.IntegerField()
        sort = serializers.CharField()
        results = CatalogEntryOutputSerializer(many=True)

    @extend_schema(
        operation_id="catalog_list", parameters=[FilterSerializer], responses=OutputSerializer
    )
    def get(self, request: Request) -> Response:
        params = self.FilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = dict(params.validated_data)
        sort = catalog.normalize_sort(data.pop("sort"))
        page_number, page_size = data.pop("page"), data.pop("page_size")
        try:
            # The page's reader: the same names, search and cone parsing on every read path.
            filters = catalog.filters_from_query(
                {k: str(v) for k, v in data.items() if v is not None}
            )
        except catalog.CatalogQueryError as error:
            raise ValidationError({"detail": str(error)}) from error
        rows = selectors.catalog_entries_visible_to(
            user=request.user, rows=catalog.catalog_rows(filters, sort)
        )
        page = catalog.catalog_page(rows, page_number, page_size)
        output = {
            "count": page.count,
            "count_capped": page.count_capped,
            "count_estimate": page.count_estimate,
            "page": page.number,
            "num_pages": page.num_pages,
            "page_size": page.page_size,
            "sort": sort,
            "results": page.entries,
        }
        return Response(self.OutputSerializer(output).data)


class CatalogEntryDetailApi(APIView):
    role_rule = permissions.BROWSE

    class OutputSerializer(CatalogEntryOutputSerializer):
        vote_share = serializers.FloatField(source="candidate.vote_share", allow_null=True)
        needs_expert = serializers.BooleanField(source="candidate.needs_expert", allow_null=True)
        spectrum = serializers.IntegerField(source="candidate.spectrum_id", allow_null=True)
        expert_decisions = serializers.SerializerMethodField()
        rollouts = serializers.SerializerMethodField()
        provenance = serializers.SerializerMethodField()

        class Meta(CatalogEntryOutputSerializer.Meta):
            fields = [
                *CatalogEntryOutputSerializer.Meta.fields,
                "vote_share",
                "needs_expert",
                "spectrum",
                "expert_decisions",
                "rollouts",
                "provenance",
            ]

        def get_expert_decisions(self, entry: CatalogEntry) -> list[dict[str, Any]]:
            if entry.candidate is None:
                return []
            history = selectors.decision_history_visible_to(
                user=self.context["request"].user,
                spectrum_id=entry.candidate.spectrum_id,
                task_id=entry.run.task_id,
            )
            replaced = {row.decision.pk: row.replaced_by.pk for row in history if row.replaced_by}
            return list(
                ExpertDecisionOutputSerializer(
                    [row.decision for row in history], many=True, context={"replaced_by": replaced}
                ).data
            )

        def get_rollouts(self, entry: CatalogEntry) -> list[dict[str, Any]]:
            return _trajectory_data(entry.candidate) if entry.candidate else []

        def get_provenance(self, entry: CatalogEntry) -> dict[str, Any]:
            return _provenance(entry.run)

    @extend_schema(operation_id="catalog_entry_retrieve", responses=OutputSerializer)
    def get(self, request: Request, entry_id: int) -> Response:
        entries = selectors.catalog_entries_visible_to(user=request.user)
        entry = get_object_or_404(
            entries.select_related("run__task", "run__created_by", "candidate"), pk=entry_id
        )
        return Response(self.OutputSerializer(entry, context={"request": request}).data)


class VettingCandidateOutputSerializer(serializers.ModelSerializer):
    object_id = serializers.CharField(source="spectrum.object_id")
    survey = serializers.CharField(source="spectrum.survey")
    task = serializers.CharField(source="run.task.code")
    confidence_threshold = serializers.FloatField(source="run.confidence_threshold")
    rollouts = serializers.SerializerMethodField()

    class Meta:
        model = Candidate
        fields = [
            "id",
            "run",
            "spectrum",
            "object_id",
            "survey",
            "task",
            "verdict",
            "confidence",
            "vote_share",
            "confidence_threshold",
            "finished_at",
            "rollouts",
        ]

    def get_rollouts(self, candidate: Candidate) -> list[dict[str, Any]]:
        return _trajectory_data(candidate)


class HiddenCampaignOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="the rating campaign")
    name = serializers.CharField()
    count = serializers.IntegerField(help_text="queue candidates this campaign hides from you")
    url = serializers.CharField(help_text="the campaign's page")


class HiddenOutputSerializer(serializers.Serializer):
    count = serializers.IntegerField(
        help_text="candidates that would wait for you but for blinding (each counted once)"
    )
    campaigns = HiddenCampaignOutputSerializer(
        many=True, help_text="the open campaigns you rate that hide them; they come back on close"
    )


class VettingNextApi(APIView):
    role_rule = permissions.VET

    class OutputSerializer(serializers.Serializer):
        remaining = serializers.IntegerField(help_text="candidates waiting for this expert")
        candidate = VettingCandidateOutputSerializer(allow_null=True)
        hidden = HiddenOutputSerializer(
            help_text="queue candidates hidden from you while you rate an open campaign"
        )

    @extend_schema(
        operation_id="vetting_next_retrieve",
        responses=OutputSerializer,
        description="The candidate routed to experts whose decision is worth most that you "
        "have not decided yet, conflicts first (candidate is null when none waits).",
    )
    def get(self, request: Request) -> Response:
        queue = vetter_queue_rows(request.user)
        gold = selectors.candidates_visible_to(
            user=request.user, rows=active_queue.gold_candidates(request.user)
        )
        candidate = active_queue.next_candidate(
            user=request.user, queue=queue, gold=gold, skipped=[]
        )
        output = {
            "remaining": active_queue.waiting_count(queue),
            "candidate": candidate,
            "hidden": hidden_summary(vetter_queue_hidden(request.user)),
        }
        return Response(self.OutputSerializer(output).data)


class ExpertDecisionCreateApi(APIView):
    role_rule = permissions.VET

    class InputSerializer(serializers.Serializer):
        candidate = serializers.IntegerField(min_value=1)
        decision = serializers.ChoiceField(choices=ExpertDecisionValue.values)
        comment = serializers.CharField(
            required=False,
            allow_blank=True,
            default="",
            help_text=f"at most {decision_quality.COMMENT_MAX_CHARS} characters; shown escaped",
        )
        quality = serializers.ChoiceField(
            choices=list(decision_quality.QUALITY_VALUES),
            required=False,
            allow_null=True,
            default=None,
            help_text="how securely the spectrum supports the decision: "
            + "; ".join(f"{v} {name}" for v, name, _ in decision_quality.QUALITY_SCALE),
        )
        issues = serializers.ListField(
            child=serializers.ChoiceField(choices=list(decision_quality.ISSUE_CODES)),
            required=False,
            default=list,
            help_text="issue flags: " + ", ".join(decision_quality.ISSUE_CODES),
        )

    @extend_schema(
        operation_id="expert_decision_create",
        request=InputSerializer,
        responses={
            201: ExpertDecisionOutputSerializer,
            200: ExpertDecisionOutputSerializer,
            404: NOT_FOUND,
            409: CONFLICT,
        },
        description="Record your YES / NO / unsure on a finished candidate (201), or change "
        "your earlier answer (200): you have one answer per spectrum and task, so an answer on "
        "another run's candidate of the same spectrum replaces your earlier one, which stays in "
        "the entry's expert_decisions with replaced_by set.",
    )
    def post(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        candidate = get_object_or_404(
            selectors.candidates_visible_to(user=request.user), pk=data["candidate"]
        )
        gold = learning_services.gold_for_vetter(candidate=candidate, vetter=_expert(request))
        if gold is not None:
            return _gold_answer_response(gold, candidate, request, data)
        existed = (
            expert_answer(
                spectrum_id=candidate.spectrum_id,
                task_id=candidate.run.task_id,
                expert_id=_expert(request).pk,
            )
            is not None
        )
        try:
            record = inspections_services.expert_decision_record(
                candidate=candidate,
                expert=_expert(request),
                decision=data["decision"],
                comment=data["comment"].strip(),
                quality=data["quality"],
                issues=data["issues"],
                audit_sampled=learning_selectors.in_open_audit_sample(candidate.pk),
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            ExpertDecisionOutputSerializer(record).data,
            status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
        )


def _gold_answer_response(
    gold: GoldItem, candidate: Candidate, request: Request, data: dict[str, Any]
) -> Response:
    """A gold answer, answered in the shape of an expert decision: the expert must not learn
    that the candidate was a gold item."""
    existed = GoldAnswer.objects.filter(gold=gold, vetter=_expert(request)).exists()
    try:
        answer = learning_services.gold_answer_record(
            gold=gold, vetter=_expert(request), answer=data["decision"]
        )
    except core_errors.WorkflowError as error:
        return error_response(error)
    run = candidate.run
    shown = ExpertDecision(
        pk=answer.pk,
        candidate=candidate,
        expert=_expert(request),
        decision=answer.answer,
        comment=data["comment"].strip(),
        verdict_seen=candidate.verdict,
        confidence_seen=candidate.confidence,
        model_key_seen=run.model_key,
        model_label_seen=run.model_label,
        created_at=answer.answered_at,
    )
    return Response(
        ExpertDecisionOutputSerializer(shown).data,
        status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
    )
