"""Rating campaigns through the API: rate, compare, close, analyse, run LLM judges.

What a rater receives (next item, next pair) is built by `rater_item_view`: no policy, no
source, no other rater's score, no trajectory policy or meta.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.core import endpoints, permissions
from annotation.core import errors as core_errors
from annotation.core.apis import error_response
from annotation.core.fields import IdField
from annotation.core.http import _expert
from annotation.core.models import ModelEndpoint
from annotation.core.roles import Role, users_holding
from annotation.core.serializers import CONFLICT
from annotation.curation.models import Curation, CurationState
from annotation.inspections.models import InspectionRun
from annotation.rating import selectors, services
from annotation.rating.figures import FIGURES, analysis_figure
from annotation.rating.models import Judge, PairJudgement, RatingAssignment, RatingCampaign
from annotation.rating.permissions import (
    ANALYSIS_HIDDEN,
    get_campaign_for_user,
    is_manager,
    is_rater,
)
from annotation.rating.selectors import (
    campaign_summary,
    own_assignment,
    own_judgement,
    rater_item_view,
    rater_pair_queue,
)
from annotation.rating.services import campaign_create_from_choices, judge_run_start
from annotation.spectra.apis import SpectrumPlotWindowApi


def _forbidden(reason: str) -> Response:
    return Response({"detail": reason}, status=status.HTTP_403_FORBIDDEN)


class RaterProgressSerializer(serializers.Serializer):
    rated = serializers.IntegerField()
    total = serializers.IntegerField()
    judged = serializers.IntegerField()
    pairs = serializers.IntegerField()


class RatingCampaignSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    closed = serializers.BooleanField()


class RaterStepSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    think = serializers.CharField()
    assistant_text = serializers.CharField()
    tool_call = serializers.JSONField(allow_null=True)
    tool_result = serializers.JSONField(allow_null=True)


class BlindedItemSerializer(serializers.Serializer):
    blind_id = serializers.CharField()
    task = serializers.CharField()
    question = serializers.CharField()
    prompt = serializers.CharField()
    initial_image = serializers.CharField(allow_null=True)
    steps = RaterStepSerializer(many=True)
    answer = serializers.JSONField(allow_null=True)
    stop_reason = serializers.CharField()
    inspected = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()))


# --- campaigns ----------------------------------------------------------------------------------


class CampaignListApi(APIView):
    """Campaigns I rate (with my progress) and campaigns I manage."""

    role_rule = permissions.RATING_READ

    class OutputSerializer(RatingCampaignSerializer):
        rater = serializers.BooleanField()
        manager = serializers.BooleanField()
        progress = RaterProgressSerializer(allow_null=True)

    @extend_schema(responses=OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        user = _expert(request)
        out = []
        for campaign in selectors.campaigns_visible_to(user=user):
            rater = is_rater(campaign, user)
            progress = selectors.rater_progress(campaign=campaign, rater=user) if rater else None
            out.append(
                campaign_summary(campaign)
                | {"rater": rater, "manager": is_manager(campaign, user), "progress": progress}
            )
        return Response(self.OutputSerializer(out, many=True).data)


class CampaignCreateApi(APIView):
    role_rule = permissions.RATING_MANAGE

    class InputSerializer(serializers.Serializer):
        names_objects = True  # raters, runs, curations: one that does not exist is a 404
        name = serializers.CharField(max_length=120)
        description = serializers.CharField(required=False, allow_blank=True, default="")
        raters = serializers.ListField(
            child=serializers.CharField(), min_length=1, help_text="usernames"
        )
        raters_per_item = serializers.IntegerField(min_value=1, max_value=50, default=2)
        runs = serializers.ListField(child=IdField(), default=list)
        rollouts_per_run = serializers.IntegerField(min_value=1, max_value=100000, default=50)
        curations = serializers.ListField(
            child=IdField(), default=list, help_text="accepted curation ids"
        )
        pair_runs = serializers.ListField(
            child=IdField(),
            min_length=2,
            max_length=2,
            required=False,
            help_text="two run ids to compare pairwise over the spectra they share",
        )
        raters_per_pair = serializers.IntegerField(min_value=1, max_value=50, default=1)
        seed = serializers.IntegerField(min_value=0, max_value=2**62, required=False)

        def validate_raters(self, usernames: list[str]) -> list[Any]:
            users = get_user_model().objects.filter(username__in=usernames)
            missing = sorted(set(usernames) - {u.get_username() for u in users})
            if missing:
                raise serializers.ValidationError(
                    f"unknown users: {', '.join(missing)}", code="does_not_exist"
                )
            raters = users_holding(Role.RATER).filter(pk__in=[u.pk for u in users])
            not_raters = sorted(
                {u.get_username() for u in users} - {u.get_username() for u in raters}
            )
            if not_raters:
                raise serializers.ValidationError(
                    f"not raters: {', '.join(not_raters)} (staff grant the rater role first)"
                )
            return list(users)

        # A run or curation the creator may not read (they rate in an open campaign built on
        # it) is answered like a missing id.
        def _visible_runs(self) -> Any:
            from annotation.blinding import runs_visible_to

            return runs_visible_to(user=self.context["request"].user)

        def validate_runs(self, ids: list[int]) -> list[InspectionRun]:
            return _rows_by_id(self._visible_runs(), ids, "inspection runs")

        def validate_curations(self, ids: list[int]) -> list[Curation]:
            from annotation.blinding import curations_visible_to

            accepted = curations_visible_to(
                user=self.context["request"].user,
                rows=Curation.objects.filter(state=CurationState.ACCEPTED),
            )
            return _rows_by_id(accepted, ids, "accepted curations")

        def validate_pair_runs(self, ids: list[int]) -> list[InspectionRun]:
            if ids[0] == ids[1]:
                raise serializers.ValidationError("choose two different runs to compare")
            return _rows_by_id(self._visible_runs(), ids, "inspection runs")

    class OutputSerializer(RatingCampaignSerializer):
        seed = serializers.IntegerField()
        n_items = serializers.IntegerField()
        n_pairs = serializers.IntegerField()

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            return _forbidden("only staff can create rating campaigns")
        params = self.InputSerializer(data=request.data, context={"request": request})
        params.is_valid(raise_exception=True)
        data = params.validated_data
        pair_runs = data.get("pair_runs")
        try:
            campaign = campaign_create_from_choices(
                name=data["name"],
                description=data["description"],
                raters=data["raters"],
                raters_per_item=data["raters_per_item"],
                runs=data["runs"],
                rollouts_per_run=data["rollouts_per_run"],
                curations=data["curations"],
                pair_runs=(pair_runs[0], pair_runs[1]) if pair_runs else None,
                raters_per_pair=data["raters_per_pair"],
                seed=data.get("seed"),
                created_by=request.user,
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        out = campaign_summary(campaign) | {
            "seed": campaign.seed,
            "n_items": campaign.items.count(),
            "n_pairs": campaign.pairs.count(),
        }
        return Response(self.OutputSerializer(out).data, status=status.HTTP_201_CREATED)


def _rows_by_id(rows: Any, ids: list[int], what: str) -> list[Any]:
    found = {row.pk: row for row in rows.filter(pk__in=ids)}
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise serializers.ValidationError(
            f"no such {what}: {', '.join(missing)}", code="does_not_exist"
        )
    return [found[pk] for pk in dict.fromkeys(ids)]


class CampaignDetailApi(APIView):
    """A campaign, my progress, and (for staff and its creator) every rater's progress."""

    role_rule = permissions.RATING_READ

    class OutputSerializer(RatingCampaignSerializer):
        n_items = serializers.IntegerField()
        n_pairs = serializers.IntegerField()
        my_progress = RaterProgressSerializer(allow_null=True)
        raters = serializers.DictField(child=RaterProgressSerializer(), allow_null=True)
        can_see_analysis = serializers.BooleanField()

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, campaign_id: int) -> Response:
        campaign = get_campaign_for_user(request, campaign_id)
        user = request.user
        manager, rater = is_manager(campaign, user), is_rater(campaign, user)
        raters = None
        if manager:
            raters = {
                r.get_username(): selectors.rater_progress(campaign=campaign, rater=r)
                for r in campaign.raters.all()
            }
        out = campaign_summary(campaign) | {
            "n_items": campaign.items.count(),
            "n_pairs": campaign.pairs.count(),
            "my_progress": selectors.rater_progress(campaign=campaign, rater=user)
            if rater
            else None,
            "raters": raters,
            "can_see_analysis": selectors.can_see_analysis(campaign=campaign, user=user),
        }
        return Response(self.OutputSerializer(out).data)


class CampaignCloseApi(APIView):
    role_rule = permissions.RATING_MANAGE

    @extend_schema(request=None, responses={200: RatingCampaignSerializer, 409: CONFLICT})
    def post(self, request: Request, campaign_id: int) -> Response:
        campaign = get_campaign_for_user(request, campaign_id)
        try:
            campaign = services.campaign_close(campaign=campaign, actor=_expert(request))
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(RatingCampaignSerializer(campaign_summary(campaign)).data)


# --- rating -------------------------------------------------------------------------------------


def _rater_campaign(request: Request, campaign_id: int) -> RatingCampaign | Response:
    campaign = get_campaign_for_user(request, campaign_id)
    if not is_rater(campaign, request.user):
        return _forbidden("you are not a rater of this campaign")
    return campaign


class RatingNextItemApi(APIView):
    """The next trajectory in my order, blinded; `item` is null when none is left."""

    role_rule = permissions.RATE

    class OutputSerializer(serializers.Serializer):
        campaign = RatingCampaignSerializer()
        progress = RaterProgressSerializer()
        assignment = serializers.IntegerField(allow_null=True)
        item = BlindedItemSerializer(allow_null=True)

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, campaign_id: int) -> Response:
        campaign = _rater_campaign(request, campaign_id)
        if isinstance(campaign, Response):
            return campaign
        assignment = None
        if not campaign.closed:
            assignment = selectors.rater_queue(campaign=campaign, rater=request.user).first()
        out = {
            "campaign": campaign_summary(campaign),
            "progress": selectors.rater_progress(campaign=campaign, rater=request.user),
            "assignment": assignment.pk if assignment else None,
            "item": rater_item_view(assignment.item) if assignment else None,
        }
        return Response(self.OutputSerializer(out).data)


class RatingSubmitApi(APIView):
    """Score one of my assignments 0-5 (while the campaign is open; a new score replaces mine)."""

    role_rule = permissions.RATE

    class InputSerializer(serializers.Serializer):
        score = serializers.IntegerField(help_text="0-5, paper Table 7")
        comment = serializers.CharField(
            max_length=5000, required=False, allow_blank=True, default=""
        )

    class OutputSerializer(serializers.Serializer):
        assignment = serializers.IntegerField()
        blind_id = serializers.CharField()
        score = serializers.IntegerField()
        comment = serializers.CharField()

    @extend_schema(request=InputSerializer, responses={200: OutputSerializer, 409: CONFLICT})
    def post(self, request: Request, assignment_id: int) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        row = get_object_or_404(
            RatingAssignment.objects.select_related("item__campaign"), pk=assignment_id
        )
        assignment = own_assignment(row.item.campaign, request.user, assignment_id)
        if assignment is None:
            return _forbidden("this item is assigned to another rater")
        try:
            services.rating_submit(
                assignment=assignment,
                rater=_expert(request),
                score=params.validated_data["score"],
                comment=params.validated_data["comment"],
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        out = {
            "assignment": assignment.pk,
            "blind_id": assignment.item.blind_id,
            "score": assignment.score,
            "comment": assignment.comment,
        }
        return Response(self.OutputSerializer(out).data)


class RatingItemPlotWindowApi(SpectrumPlotWindowApi):
    """A zoomed rating plot's window at full resolution (the page's plot is thinned), asked for
    by the item's blind id: only a rater shown the item (to rate, or in a pair) gets it, and the
    answer names neither the spectrum nor the run."""

    role_rule = permissions.RATE

    @extend_schema(
        parameters=[SpectrumPlotWindowApi.FilterSerializer],
        responses=SpectrumPlotWindowApi.OutputSerializer,
    )
    def get(self, request: Request, campaign_id: int, blind_id: str) -> Response:  # type: ignore[override]
        campaign = get_campaign_for_user(request, campaign_id)
        item = selectors.rater_item(campaign=campaign, rater=request.user, blind_id=blind_id)
        if item is None or item.spectrum is None:
            return Response({"detail": "no such item"}, status=status.HTTP_404_NOT_FOUND)
        return self.window_response(request, item.spectrum)


class PairNextApi(APIView):
    """The next pair in my order, both sides blinded; `left` is null when none is left."""

    role_rule = permissions.RATE

    class OutputSerializer(serializers.Serializer):
        campaign = RatingCampaignSerializer()
        progress = RaterProgressSerializer()
        judgement = serializers.IntegerField(allow_null=True)
        left = BlindedItemSerializer(allow_null=True)
        right = BlindedItemSerializer(allow_null=True)

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, campaign_id: int) -> Response:
        campaign = _rater_campaign(request, campaign_id)
        if isinstance(campaign, Response):
            return campaign
        judgement = None
        if not campaign.closed:
            judgement = (
                rater_pair_queue(campaign=campaign, rater=request.user)
                .select_related("pair__left__task", "pair__right__task")
                .first()
            )
        out = {
            "campaign": campaign_summary(campaign),
            "progress": selectors.rater_progress(campaign=campaign, rater=request.user),
            "judgement": judgement.pk if judgement else None,
            "left": rater_item_view(judgement.pair.left) if judgement else None,
            "right": rater_item_view(judgement.pair.right) if judgement else None,
        }
        return Response(self.OutputSerializer(out).data)


class PairJudgementSubmitApi(APIView):
    """left: the left explanation is better; tie; right: the right one is better."""

    role_rule = permissions.RATE

    class InputSerializer(serializers.Serializer):
        outcome = serializers.CharField(help_text="left, tie or right")

    class OutputSerializer(serializers.Serializer):
        judgement = serializers.IntegerField()
        outcome = serializers.CharField()

    @extend_schema(request=InputSerializer, responses={200: OutputSerializer, 409: CONFLICT})
    def post(self, request: Request, judgement_id: int) -> Response:
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        row = get_object_or_404(
            PairJudgement.objects.select_related("pair__campaign"), pk=judgement_id
        )
        judgement = own_judgement(row.pair.campaign, request.user, judgement_id)
        if judgement is None:
            return _forbidden("this pair is assigned to another rater")
        try:
            services.pair_judgement_submit(
                judgement=judgement,
                rater=_expert(request),
                outcome=params.validated_data["outcome"],
            )
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(
            self.OutputSerializer({"judgement": judgement.pk, "outcome": judgement.outcome}).data
        )


# --- analysis -----------------------------------------------------------------------------------


class CampaignAnalysisApi(APIView):
    """Figure 4 for one campaign (the analysis page's data); raters only once it is closed."""

    role_rule = permissions.RATING_READ

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="rating_campaign_analysis")
    def get(self, request: Request, campaign_id: int) -> Response:
        campaign = get_campaign_for_user(request, campaign_id)
        if not selectors.can_see_analysis(campaign=campaign, user=request.user):
            return _forbidden(ANALYSIS_HIDDEN)
        return Response(selectors.campaign_analysis(campaign=campaign))


class CampaignAnalysisFigureApi(APIView):
    """One figure's table (the same rows as its CSV export)."""

    role_rule = permissions.RATING_READ

    class OutputSerializer(serializers.Serializer):
        figure = serializers.ChoiceField(choices=FIGURES)
        columns = serializers.ListField(child=serializers.CharField())
        rows = serializers.ListField(child=serializers.ListField())

    @extend_schema(
        parameters=[OpenApiParameter("figure", str, OpenApiParameter.PATH, enum=list(FIGURES))],
        responses=OutputSerializer,
        operation_id="rating_campaign_analysis_figure",
    )
    def get(self, request: Request, campaign_id: int, figure: str) -> Response:
        campaign = get_campaign_for_user(request, campaign_id)
        if figure not in FIGURES:
            return Response(
                {"detail": f"unknown figure {figure!r}; one of {', '.join(FIGURES)}"},
                status=status.HTTP_404_NOT_FOUND,
            )
        if not selectors.can_see_analysis(campaign=campaign, user=request.user):
            return _forbidden(ANALYSIS_HIDDEN)
        analysis = selectors.campaign_analysis(campaign=campaign)
        columns, rows = analysis_figure(campaign=campaign, analysis=analysis, figure=figure)
        return Response({"figure": figure, "columns": columns, "rows": rows})


# --- LLM judges -------------------------------------------------------------------------------


class JudgeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Judge
        fields = [
            "id",
            "name",
            "endpoint",
            "base_url",
            "model",
            "prompt",
            "include_images",
            "created_at",
        ]

    endpoint: serializers.SlugRelatedField[ModelEndpoint] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )


class JudgeListApi(APIView):
    role_rule = permissions.RATING_MANAGE

    @extend_schema(responses=JudgeSerializer(many=True))
    def get(self, request: Request) -> Response:
        if not request.user.is_staff:
            return _forbidden("only staff can see the LLM judges' endpoints")
        return Response(JudgeSerializer(selectors.judges_with_counts(), many=True).data)


class JudgeCreateApi(APIView):
    role_rule = permissions.RATING_MANAGE

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=80)
        endpoint = serializers.CharField(
            max_length=60, help_text="a registered model endpoint's name (GET /api/endpoints/)"
        )
        model = serializers.CharField(
            max_length=200, required=False, help_text="optional: must be the endpoint's model"
        )
        prompt = serializers.CharField(
            required=False, allow_blank=True, default="", help_text="empty: the Table 7 prompt"
        )
        include_images = serializers.BooleanField(default=True)

        def validate_name(self, name: str) -> str:
            if Judge.objects.filter(name=name).exists():
                raise serializers.ValidationError(f"a judge named {name!r} exists already")
            return name

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            for refused in ("base_url", "api_key"):
                if refused in self.initial_data:
                    raise serializers.ValidationError(
                        {
                            refused: f"{refused} is not accepted; choose a registered endpoint: "
                            f"{endpoints.choices_text()}"
                        }
                    )
            try:
                endpoint = endpoints.find_usable(attrs["endpoint"])
            except endpoints.EndpointError as error:
                raise serializers.ValidationError({"endpoint": str(error)}) from None
            model = attrs.pop("model", None)
            if model not in (None, "", endpoint.model):
                raise serializers.ValidationError(
                    {
                        "model": f"endpoint {endpoint.name!r} serves {endpoint.model!r}, not {model!r}"
                    }
                )
            return {**attrs, "endpoint": endpoint}

    @extend_schema(request=InputSerializer, responses={201: JudgeSerializer})
    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            return _forbidden("only staff can add LLM judges")
        params = self.InputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            judge = services.judge_create(actor=request.user, **params.validated_data)
        except core_errors.WorkflowError as error:
            return error_response(error)
        return Response(JudgeSerializer(judge).data, status=status.HTTP_201_CREATED)


class JudgeRunApi(APIView):
    """Start a job in which the judge scores every trajectory of the campaign."""

    role_rule = permissions.RATING_MANAGE

    class OutputSerializer(serializers.Serializer):
        job = serializers.IntegerField()
        state = serializers.CharField()
        total = serializers.IntegerField()

    @extend_schema(request=None, responses={202: OutputSerializer, 409: CONFLICT})
    def post(self, request: Request, campaign_id: int, judge_id: int) -> Response:
        campaign = get_campaign_for_user(request, campaign_id)
        judge = get_object_or_404(Judge, pk=judge_id)
        try:
            job = judge_run_start(campaign=campaign, judge=judge, user=request.user)
        except core_errors.WorkflowError as error:
            return error_response(error)
        out = {"job": job.pk, "state": job.state, "total": job.total}
        return Response(self.OutputSerializer(out).data, status=status.HTTP_202_ACCEPTED)
