"""Expert rating (paper section 4.5, appendix G): campaigns, the Figure 7 rating page, pairwise
comparisons, LLM judges and the agreement analysis of Figure 4.

Blinding: what a rater is shown is built by `rater_item_view` as plain dicts (never model
instances), so neither a template nor the API can reach an item's policy, its source or the
other raters' scores while the campaign is open. The helpers under "shared with the API" are
also used by annotation/rating/apis.py; every write goes through annotation/rating/services.py.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from agent.agreement import RUBRIC
from annotation.core import charts, permissions
from annotation.core import errors as core_errors
from annotation.core.http import _expert
from annotation.core.permissions import require_role
from annotation.rating import selectors, services
from annotation.rating.figures import FIGURES, analysis_figure, csv_text
from annotation.rating.forms import CampaignForm, JudgeForm, PairForm, ScoreForm
from annotation.rating.models import (
    CampaignItem,
    Judge,
    PairJudgement,
    RatingAssignment,
    RatingCampaign,
)
from annotation.rating.permissions import (
    ANALYSIS_HIDDEN,
    get_campaign_for_user,
    is_manager,
    is_rater,
)
from annotation.rating.selectors import (
    campaign_summary,
    item_plot_data,
    own_assignment,
    own_judgement,
    rater_item_view,
    rater_pair_queue,
)
from annotation.rating.services import campaign_create_from_choices, judge_run_start

RUBRIC_ROWS = [{"score": score, "text": text} for score, text in RUBRIC.items()]
OUTCOME_KEYS = [
    {"outcome": "left", "key": "ArrowLeft", "symbol": "←", "label": "left better"},
    {"outcome": "tie", "key": "t", "symbol": "T", "label": "tie"},
    {"outcome": "right", "key": "ArrowRight", "symbol": "→", "label": "right better"},
]


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _forbidden(request: HttpRequest, reason: str) -> HttpResponse:
    return render(request, "rating/forbidden.html", {"reason": reason}, status=403)


# --- campaigns ------------------------------------------------------------------------------------


@require_role(permissions.RATING_READ)
@require_GET
def campaign_list(request: HttpRequest) -> HttpResponse:
    user = _expert(request)
    rating: list[dict[str, Any]] = [
        {"campaign": c, "progress": selectors.rater_progress(campaign=c, rater=user)}
        for c in selectors.campaigns_rated_by(user=user)
    ]
    managed = selectors.campaigns_managed_by(user=user)
    # Managers follow the analysis while a campaign runs, unless they rate in it (blinding).
    rates_in = {row["campaign"].pk for row in rating}
    managed_rows = [{"campaign": c, "analysis": c.closed or c.pk not in rates_in} for c in managed]
    return render(request, "rating/campaign_list.html", {"rating": rating, "managed": managed_rows})


@require_role(permissions.RATING_MANAGE)
@require_http_methods(["GET", "POST"])
def campaign_create(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only staff can create rating campaigns.")
    form = CampaignForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        pair_runs = (data["pair_run_a"], data["pair_run_b"]) if data["pair_run_a"] else None
        try:
            campaign = campaign_create_from_choices(
                name=data["name"],
                description=data["description"],
                raters=list(data["raters"]),
                raters_per_item=data["raters_per_item"],
                runs=list(data["runs"]),
                rollouts_per_run=data["rollouts_per_run"],
                curations=list(data["curations"]),
                pair_runs=pair_runs,
                raters_per_pair=data["raters_per_pair"] or 1,
                seed=data["seed"],
                created_by=request.user,
            )
        except core_errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            return redirect("rating_campaign", campaign_id=campaign.pk)
    return render(request, "rating/campaign_create.html", {"form": form})


@require_role(permissions.RATING_READ)
@require_GET
def campaign_detail(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    user = request.user
    manager, rater = is_manager(campaign, user), is_rater(campaign, user)
    context: dict[str, Any] = {
        "campaign": campaign,
        "manager": manager,
        "n_items": campaign.items.count(),
        "n_pairs": campaign.pairs.count(),
        "my_progress": selectors.rater_progress(campaign=campaign, rater=user) if rater else None,
        "can_see_analysis": selectors.can_see_analysis(campaign=campaign, user=user),
    }
    if manager:
        context["rater_rows"] = [
            {"rater": r, "progress": selectors.rater_progress(campaign=campaign, rater=r)}
            for r in campaign.raters.order_by(get_user_model().USERNAME_FIELD)
        ]
        context["judges"] = selectors.judge_rows(campaign)
    return render(request, "rating/campaign_detail.html", context)


@require_role(permissions.RATING_MANAGE)
@require_POST
def campaign_close(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    try:
        services.campaign_close(campaign=campaign, actor=request.user)  # type: ignore[arg-type]
    except core_errors.NotAllowed as error:
        return _forbidden(request, str(error))
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, "Campaign closed: scores are frozen and the analysis is open.")
    return redirect("rating_campaign", campaign_id=campaign.pk)


# --- the rating page (paper Figure 7) -------------------------------------------------------------


def _rate_context(
    campaign: RatingCampaign, user: Any, assignment: RatingAssignment | None, error: str = ""
) -> dict[str, Any]:
    """Plain values only: the template cannot reach the item's policy, source or other scores."""
    item = assignment.item if assignment else None
    return {
        "campaign": campaign_summary(campaign),
        "progress": selectors.rater_progress(campaign=campaign, rater=user),
        "rubric": RUBRIC_ROWS,
        "assignment_id": assignment.pk if assignment else None,
        "my_score": assignment.score if assignment else None,
        "my_comment": assignment.comment if assignment else "",
        "item": rater_item_view(item) if item else None,
        "plot_data": item_plot_data(item) if item else None,
        "previous_id": selectors.previous_assignment(
            campaign, user, assignment.position if assignment else None
        ),
        "error": error,
    }


def _render_rate(
    request: HtmxHttpRequest, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    template = "rating/rate.html#rate-panel" if request.htmx else "rating/rate.html"
    return render(request, template, context, status=status)


def _form_error(form: ScoreForm | PairForm) -> str:
    return " ".join(str(message) for errors in form.errors.values() for message in errors)


def _rate_submit(request: HtmxHttpRequest, campaign: RatingCampaign) -> HttpResponse:
    user = request.user
    form = ScoreForm(request.POST)
    assignment = own_assignment(campaign, user, request.POST.get("assignment"))
    if assignment is None:
        error = "this item is not in your list for this campaign; reload the page"
        return _render_rate(request, _rate_context(campaign, user, None, error), status=400)
    if not form.is_valid():
        context = _rate_context(campaign, user, assignment, _form_error(form))
        return _render_rate(request, context, status=400)
    try:
        services.rating_submit(
            assignment=assignment,
            rater=user,  # type: ignore[arg-type]
            score=form.cleaned_data["score"],
            comment=form.cleaned_data["comment"],
        )
    except core_errors.WorkflowError as error:
        context = _rate_context(campaign, user, assignment, str(error))
        return _render_rate(request, context, status=core_errors.http_status(error))
    if not request.htmx:
        return redirect("rating_rate", campaign_id=campaign.pk)
    next_one = selectors.rater_queue(campaign=campaign, rater=user).first()
    return _render_rate(request, _rate_context(campaign, user, next_one))


@require_role(permissions.RATE)
@require_http_methods(["GET", "POST"])
def rate(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not is_rater(campaign, request.user):
        return _forbidden(request, "You are not a rater of this campaign.")
    if request.method == "POST":
        return _rate_submit(request, campaign)
    assignment = None
    if request.GET.get("assignment"):
        assignment = own_assignment(campaign, request.user, request.GET["assignment"])
        if assignment is None:
            raise Http404("no such item in your list")
    elif not campaign.closed:
        assignment = selectors.rater_queue(campaign=campaign, rater=request.user).first()
    return _render_rate(request, _rate_context(campaign, request.user, assignment))


# --- pairwise comparisons ---------------------------------------------------------------------


def _pairs_context(
    campaign: RatingCampaign, user: Any, judgement: PairJudgement | None, error: str = ""
) -> dict[str, Any]:
    pair = judgement.pair if judgement else None
    return {
        "campaign": campaign_summary(campaign),
        "progress": selectors.rater_progress(campaign=campaign, rater=user),
        "outcomes": OUTCOME_KEYS,
        "judgement_id": judgement.pk if judgement else None,
        "left": rater_item_view(pair.left) if pair else None,
        "right": rater_item_view(pair.right) if pair else None,
        "left_plot": item_plot_data(pair.left) if pair else None,
        "right_plot": item_plot_data(pair.right) if pair else None,
        "error": error,
    }


def _render_pairs(
    request: HtmxHttpRequest, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    template = "rating/pairs.html#pair-panel" if request.htmx else "rating/pairs.html"
    return render(request, template, context, status=status)


def _pair_submit(request: HtmxHttpRequest, campaign: RatingCampaign) -> HttpResponse:
    user = request.user
    form = PairForm(request.POST)
    judgement = own_judgement(campaign, user, request.POST.get("judgement"))
    if judgement is None:
        error = "this pair is not in your list for this campaign; reload the page"
        return _render_pairs(request, _pairs_context(campaign, user, None, error), status=400)
    if not form.is_valid():
        context = _pairs_context(campaign, user, judgement, _form_error(form))
        return _render_pairs(request, context, status=400)
    try:
        services.pair_judgement_submit(
            judgement=judgement,
            rater=user,  # type: ignore[arg-type]
            outcome=form.cleaned_data["outcome"],
        )
    except core_errors.WorkflowError as error:
        context = _pairs_context(campaign, user, judgement, str(error))
        return _render_pairs(request, context, status=core_errors.http_status(error))
    if not request.htmx:
        return redirect("rating_pairs", campaign_id=campaign.pk)
    next_one = rater_pair_queue(campaign=campaign, rater=user).first()
    return _render_pairs(request, _pairs_context(campaign, user, next_one))


@require_role(permissions.RATE)
@require_http_methods(["GET", "POST"])
def pairs(request: HtmxHttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not is_rater(campaign, request.user):
        return _forbidden(request, "You are not a rater of this campaign.")
    if request.method == "POST":
        return _pair_submit(request, campaign)
    judgement = None
    if not campaign.closed:
        judgement = (
            rater_pair_queue(campaign=campaign, rater=request.user)
            .select_related("pair__left__task", "pair__right__task")
            .first()
        )
    return _render_pairs(request, _pairs_context(campaign, request.user, judgement))


# --- analysis (paper Figure 4) --------------------------------------------------------------------


@require_role(permissions.RATING_READ)
@require_GET
def analysis(request: HttpRequest, campaign_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not selectors.can_see_analysis(campaign=campaign, user=request.user):
        return _forbidden(request, ANALYSIS_HIDDEN)
    data = selectors.campaign_analysis(campaign=campaign)
    policy = dict(campaign.items.values_list("blind_id", "policy_name"))
    disagreement = [row | {"policy": policy[row["item"]]} for row in data["disagreement"]]
    context = {
        "campaign": campaign,
        "analysis": data,
        "analysis_chart": charts.analysis_chart_data(data),
        "disagreement": disagreement,
        "figures": FIGURES,
        "rubric": RUBRIC_ROWS,
    }
    return render(request, "rating/analysis.html", context)


@require_role(permissions.RATING_READ)
@require_GET
def analysis_csv(request: HttpRequest, campaign_id: int, figure: str) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if figure not in FIGURES:
        raise Http404(f"unknown figure {figure!r}")
    if not selectors.can_see_analysis(campaign=campaign, user=request.user):
        return _forbidden(request, ANALYSIS_HIDDEN)
    data = selectors.campaign_analysis(campaign=campaign)
    header, rows = analysis_figure(campaign=campaign, analysis=data, figure=figure)
    response = HttpResponse(csv_text(header, rows), content_type="text/csv; charset=utf-8")
    filename = f"campaign-{campaign.pk}-{figure}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(permissions.RATING_READ)
@require_GET
def item_detail(request: HttpRequest, campaign_id: int, blind_id: str) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    if not selectors.can_see_analysis(campaign=campaign, user=request.user):
        return _forbidden(request, ANALYSIS_HIDDEN)
    item = get_object_or_404(
        CampaignItem.objects.select_related("task", "spectrum"),
        campaign=campaign,
        blind_id=blind_id,
    )
    context = {
        "campaign": campaign,
        "item": item,
        "view": rater_item_view(item),
        "plot_data": item_plot_data(item, blinded=False),
        "policy": item.data.get("policy") or {},
        **selectors.item_scores(item=item),
        "rubric": RUBRIC,
    }
    return render(request, "rating/item_detail.html", context)


# --- LLM judges -------------------------------------------------------------------------------


@require_role(permissions.RATING_MANAGE)
@require_http_methods(["GET", "POST"])
def judge_list(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        return _forbidden(request, "Only staff can manage LLM judges.")
    form = JudgeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            judge = services.judge_create(actor=_expert(request), **form.cleaned_data)
        except core_errors.WorkflowError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Judge {judge.name} added.")
            return redirect("rating_judges")
    return render(
        request, "rating/judge_list.html", {"form": form, "judges": selectors.judges_with_counts()}
    )


@require_role(permissions.RATING_MANAGE)
@require_POST
def judge_run(request: HttpRequest, campaign_id: int, judge_id: int) -> HttpResponse:
    campaign = get_campaign_for_user(request, campaign_id)
    judge = get_object_or_404(Judge, pk=judge_id)
    try:
        job = judge_run_start(campaign=campaign, judge=judge, user=request.user)
    except core_errors.NotAllowed as error:
        return _forbidden(request, str(error))
    except core_errors.WorkflowError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Judge {judge.name} is scoring the campaign (job {job.pk}).")
    return redirect("rating_campaign", campaign_id=campaign.pk)
